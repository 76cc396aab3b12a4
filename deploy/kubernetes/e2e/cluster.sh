#!/bin/bash
# cluster.sh: a real single-node Kubernetes cluster on this machine, offline,
# in a network namespace of its own, for the fleet's e2e test (Linux, root).
#
#   cluster.sh build   # the Kubernetes components, CoreDNS, the images (cached)
#   cluster.sh up      # starts the cluster (ending any left by a run killed before)
#   cluster.sh down    # ends it and undoes everything up did, whatever state it is in
#   cluster.sh test    # build, up, the Go test (fleet_test.go), down: `make k8s-e2e`
#
# What runs: etcd, containerd and runc from Debian; kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet and kubectl built from
# k8s.io/kubernetes (this directory's go.mod pins the release); CoreDNS
# (built from its module) serving the cluster's records at the node's
# address; fuseplugin offering /dev/fuse. No kube-proxy (the test reaches
# pods by their addresses, as a headless Service's records give them).
#
# The network: namespace awcpk8s holds the control plane, the kubelet and
# the pods (10.88.0.0/16 on the bridge cni0). A veth pair joins it to this
# machine: the node is 10.250.0.1 on the namespace's side, this machine
# 10.250.0.254, with a route to the pods through the node. The delegator
# under test runs on this machine's side, outside the cluster.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
K8S_VERSION=v1.37.2
COREDNS_VERSION=v1.15.0
# Built once, kept across runs (the Go build cache keeps the rest).
CACHE=${AWCP_K8S_CACHE:-/var/cache/awcp-k8s}/$K8S_VERSION
WORK=${AWCP_K8S_WORK:-/tmp/awcp-k8s}
NS=awcpk8s
NODE=awcp-node
NODE_IP=10.250.0.1
HOST_IP=10.250.0.254
POD_CIDR=10.88.0.0/16
SVC_CIDR=10.96.0.0/24
KB=$CACHE/bin             # Kubernetes components and CoreDNS
B=$WORK/bin               # what is built from this tree, every run
P=$WORK/pki; C=$WORK/conf; S=$WORK/state; L=$WORK/logs; PIDS=$WORK/pids
# The kubelet sets these (and keeps the rest as they are): saved by up, put back by down.
SYSCTLS="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes"

log() { echo "[$(date +%T)] $*" >&2; }
die() { log "$*"; exit 1; }
inns() { nsenter --net=/run/netns/$NS "$@"; }
kubectl() { "$KB/kubectl" --kubeconfig "$C/admin.kubeconfig" "$@"; }

build() {
  mkdir -p "$KB" "$B"
  local s
  cd "$HERE" || exit 1
  for n in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
    [ -x "$KB/$n" ] && continue
    s=$(date +%s)
    CGO_ENABLED=0 nice -n 10 go build -trimpath -ldflags "-s -w" -o "$KB/$n.partial" k8s.io/kubernetes/cmd/$n \
      && mv "$KB/$n.partial" "$KB/$n" || die "building $n failed"
    log "built $n in $(( $(date +%s) - s )) s"
  done
  if [ ! -x "$KB/coredns" ]; then
    # CoreDNS's own go.mod, unchanged: go install of the tagged module.
    s=$(date +%s)
    rm -rf "$KB/.coredns" && mkdir -p "$KB/.coredns"
    CGO_ENABLED=0 GOBIN="$KB/.coredns" nice -n 10 go install -trimpath -ldflags "-s -w" github.com/coredns/coredns@$COREDNS_VERSION \
      && mv "$KB/.coredns/coredns" "$KB/coredns" || die "building coredns failed"
    log "built coredns in $(( $(date +%s) - s )) s"
  fi
  # This directory's helpers and the project's two programs, static.
  CGO_ENABLED=0 go build -trimpath -o "$B/" ./fuseplugin ./pause ./ociimage || die "building the test's helpers failed"
  (cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -o "$B/" ./cmd/awcp-fs ./cmd/awcp-ctl) || die "building awcp failed"
  images
}

# The images: pause (the sandbox), and awcp-fs on a busybox root (a shell
# and the usual commands for the test's scripted agent). The Dockerfile's
# image (Debian, git, node, an agent) needs a container builder and a
# registry, neither of which runs here.
images() {
  local root=$WORK/rootfs
  rm -rf "$root" "$WORK/images" && mkdir -p "$WORK/images"
  mkdir -p "$root/pause" && cp "$B/pause" "$root/pause/pause"
  "$B/ociimage" -o "$WORK/images/pause.tar" -name localhost/pause:e2e -entrypoint /pause "$root/pause" || die "pause image"
  local fsroot=$root/awcp-fs
  mkdir -p "$fsroot"/{bin,usr/local/bin,etc,tmp,proc,sys,dev,root,var/lib/awcp,var/lib/awcp-work}
  chmod 1777 "$fsroot/tmp"
  [ -x /bin/busybox ] || die "the executor's test image needs busybox-static (apt-get install busybox-static)"
  cp /bin/busybox "$fsroot/bin/busybox"
  for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$fsroot/bin/$a"; done
  cp "$B/awcp-fs" "$fsroot/usr/local/bin/awcp-fs"
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' > "$fsroot/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' > "$fsroot/etc/group"
  "$B/ociimage" -o "$WORK/images/awcp-fs.tar" -name awcp-fs:e2e -entrypoint /usr/local/bin/awcp-fs "$fsroot" || die "awcp-fs image"
}

pki() {
  mkdir -p "$P" "$C"
  [ -f "$P/ca.crt" ] && return
  (
    cd "$P" || exit 1
    openssl ecparam -name prime256v1 -genkey -noout -out ca.key
    openssl req -x509 -new -key ca.key -subj /CN=awcp-e2e-ca -days 2 -out ca.crt
    cert() { # NAME SUBJECT [SAN]
      openssl ecparam -name prime256v1 -genkey -noout -out "$1.key"
      openssl req -new -key "$1.key" -subj "$2" -out "$1.csr"
      { echo "basicConstraints=CA:FALSE"; echo "keyUsage=digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=serverAuth,clientAuth"; [ -n "${3:-}" ] && echo "subjectAltName=$3"; } > "$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
    }
    cert apiserver /CN=kube-apiserver "IP:$NODE_IP,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    cert admin "/O=system:masters/CN=admin"
    cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
    cert kubelet "/O=system:nodes/CN=system:node:$NODE" "IP:$NODE_IP,DNS:$NODE"
    cert controller-manager /CN=system:kube-controller-manager
    cert scheduler /CN=system:kube-scheduler
    cert coredns "/O=system:masters/CN=coredns"
    openssl ecparam -name prime256v1 -genkey -noout -out sa.key
    openssl ec -in sa.key -pubout -out sa.pub 2>/dev/null
  ) > "$L/pki.log" 2>&1 || die "making the cluster's certificates failed (see $L/pki.log)"
  for n in admin kubelet controller-manager scheduler coredns; do
    cat > "$C/$n.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: e2e, cluster: {server: "https://$NODE_IP:6443", certificate-authority: $P/ca.crt}}]
users: [{name: $n, user: {client-certificate: $P/$n.crt, client-key: $P/$n.key}}]
contexts: [{name: e2e, context: {cluster: e2e, user: $n}}]
current-context: e2e
KC
  done
}

network() {
  ip netns add $NS || die "ip netns add $NS"
  inns ip link set lo up
  ip link add awk8s-host type veth peer name awk8s-node
  ip link set awk8s-node netns $NS
  ip addr add $HOST_IP/24 dev awk8s-host
  ip link set awk8s-host up
  inns ip addr add $NODE_IP/24 dev awk8s-node
  inns ip link set awk8s-node up
  inns ip route add default via $HOST_IP
  # The node routes between its pods and this machine (the namespace's own setting).
  inns sysctl -q -w net.ipv4.ip_forward=1
  ip route add $POD_CIDR via $NODE_IP dev awk8s-host
}

# run NAME CMD...: in the namespace, in the background, its PID in $PIDS/NAME.pid.
run() {
  local n=$1; shift
  setsid nsenter --net=/run/netns/$NS "$@" > "$L/$n.log" 2>&1 < /dev/null &
  echo $! > "$PIDS/$n.pid"
}
waitfor() { # WHAT SECONDS CMD...
  local what=$1 limit=$2 s; s=$(date +%s); shift 2
  until "$@" > /dev/null 2>&1; do
    [ $(( $(date +%s) - s )) -ge "$limit" ] && { log "$what: not ready after $limit s"; return 1; }
    sleep 0.5
  done
  log "$what ready after $(( $(date +%s) - s )) s"
}

control_plane() {
  mkdir -p "$S/etcd"
  run etcd nice -n 5 etcd --name e2e --data-dir "$S/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster e2e=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381
  waitfor etcd 60 inns curl -sf http://127.0.0.1:2379/health || return 1
  run kube-apiserver nice -n 5 "$KB/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 \
    --bind-address=$NODE_IP --secure-port=6443 --advertise-address=$NODE_IP \
    --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" --client-ca-file="$P/ca.crt" \
    --kubelet-client-certificate="$P/apiserver-kubelet-client.crt" --kubelet-client-key="$P/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types=InternalIP \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
    --service-cluster-ip-range=$SVC_CIDR --authorization-mode=Node,RBAC \
    --enable-admission-plugins=NodeRestriction --allow-privileged=true
  waitfor kube-apiserver 240 kubectl get --raw /readyz || return 1
  run kube-controller-manager nice -n 5 "$KB/kube-controller-manager" \
    --kubeconfig="$C/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$C/controller-manager.kubeconfig" --authorization-kubeconfig="$C/controller-manager.kubeconfig" \
    --service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" --use-service-account-credentials=true \
    --leader-elect=false --bind-address=127.0.0.1
  run kube-scheduler nice -n 5 "$KB/kube-scheduler" --kubeconfig="$C/scheduler.kubeconfig" \
    --authentication-kubeconfig="$C/scheduler.kubeconfig" --authorization-kubeconfig="$C/scheduler.kubeconfig" \
    --leader-elect=false --bind-address=127.0.0.1
}

ctr_() { ctr --address "$S/containerd/containerd.sock" -n k8s.io "$@"; }

container_runtime() {
  mkdir -p "$C/cni" "$S/containerd" "$S/cni"
  cat > "$C/cni/10-awcp-e2e.conflist" <<CNI
{"cniVersion": "0.4.0", "name": "awcp-e2e", "plugins": [{"type": "bridge", "bridge": "cni0", "isGateway": true,
 "ipMasq": false, "hairpinMode": true, "ipam": {"type": "host-local", "dataDir": "$S/cni",
 "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]}}]}
CNI
  # Where the bounding set lacks CAP_SYS_RESOURCE (this machine type), runc
  # cannot lower oom_score_adj, and the kubelet's -998 for the sandbox fails
  # every pod ("can't get final child's PID from pipe: EOF"). The wrapper
  # raises a negative oomScoreAdj to 0 before runc reads the bundle.
  cat > "$B/runc-e2e" <<'RW'
#!/bin/sh
bundle=; prev=
for a in "$@"; do case "$prev" in --bundle|-b) bundle=$a ;; esac; prev=$a; done
[ -n "$bundle" ] && [ -f "$bundle/config.json" ] && sed -i 's/"oomScoreAdj":-[0-9]*/"oomScoreAdj":0/' "$bundle/config.json"
exec runc "$@"
RW
  chmod +x "$B/runc-e2e"
  cat > "$C/containerd.toml" <<CT
version = 2
root = "$S/containerd/root"
state = "$S/containerd/state"
[grpc]
  address = "$S/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:e2e"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$C/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$B/runc-e2e"
CT
  run containerd containerd --config "$C/containerd.toml"
  waitfor containerd 60 ctr_ version || return 1
  for i in pause awcp-fs; do ctr_ images import "$WORK/images/$i.tar" > /dev/null || return 1; done
}

kubelet_up() {
  for k in $SYSCTLS; do echo "$k=$(sysctl -n $k)"; done > "$WORK/sysctl.orig"
  # What the kubelet makes outside its root dir: noted so down removes only that.
  [ -e /var/lib/kubelet ] || touch "$WORK/made-var-lib-kubelet"
  cat > "$C/kubelet.yaml" <<KC
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$S/containerd/containerd.sock
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $P/ca.crt}
authorization: {mode: Webhook}
clusterDomain: cluster.local
clusterDNS: [$NODE_IP]
failSwapOn: false
resolvConf: /etc/resolv.conf
podLogsDir: $S/pod-logs
tlsCertFile: $P/kubelet.crt
tlsPrivateKeyFile: $P/kubelet.key
evictionHard: {"memory.available": "200Mi", "nodefs.available": "5%", "imagefs.available": "5%"}
KC
  # Localhost seccomp profiles are read from the kubelet's root dir; the
  # manifests install theirs where a kubelet's root usually is.
  mkdir -p /var/lib/kubelet/seccomp "$S/kubelet"
  ln -sfn /var/lib/kubelet/seccomp "$S/kubelet/seccomp"
  run kubelet nice -n 5 "$KB/kubelet" --config="$C/kubelet.yaml" --kubeconfig="$C/kubelet.kubeconfig" \
    --root-dir="$S/kubelet" --hostname-override=$NODE --node-ip=$NODE_IP -v=2
  waitfor "node $NODE" 180 sh -c "'$KB/kubectl' --kubeconfig '$C/admin.kubeconfig' get node $NODE -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True" || return 1
  # Device plugins register at /var/lib/kubelet/device-plugins whatever --root-dir says.
  run fuseplugin "$B/fuseplugin" -dir /var/lib/kubelet/device-plugins -devices 10
  waitfor "smarter-devices/fuse on $NODE" 60 sh -c "'$KB/kubectl' --kubeconfig '$C/admin.kubeconfig' get node $NODE -o jsonpath='{.status.allocatable.smarter-devices/fuse}' | grep -qx 10" || return 1
}

cluster_dns() {
  cat > "$C/Corefile" <<CF
.:53 {
    bind $NODE_IP
    errors
    kubernetes cluster.local {
        kubeconfig $C/coredns.kubeconfig
        ttl 2
    }
}
CF
  run coredns "$KB/coredns" -conf "$C/Corefile"
  waitfor coredns 60 inns busybox nslookup kubernetes.default.svc.cluster.local $NODE_IP || return 1
}

up() {
  [ "$(id -u)" = 0 ] || die "the cluster needs root (namespaces, mounts, containerd)"
  for b in "$KB/kubelet" "$KB/coredns" "$B/awcp-ctl" "$WORK/images/awcp-fs.tar"; do
    [ -e "$b" ] || die "$b is missing: run $0 build first"
  done
  down quiet
  mkdir -p "$S" "$L" "$PIDS"
  local t; t=$(date +%s)
  pki && network && control_plane && container_runtime && kubelet_up && cluster_dns || { log "the cluster did not come up; logs in $L"; return 1; }
  cat > "$WORK/env" <<ENV
AWCP_K8S_KUBECTL=$KB/kubectl
KUBECONFIG=$C/admin.kubeconfig
AWCP_K8S_BIN=$B
AWCP_K8S_DNS=$NODE_IP:53
AWCP_K8S_PV_DIR=$S/pv
AWCP_K8S_IMAGE=awcp-fs:e2e
AWCP_K8S_LOGS=$L
ENV
  log "cluster up in $(( $(date +%s) - t )) s (kubectl: $KB/kubectl --kubeconfig $C/admin.kubeconfig)"
}

stop() { # NAME: TERM, then KILL after 15 s
  local f=$PIDS/$1.pid p
  [ -f "$f" ] || return 0
  p=$(cat "$f")
  if kill -0 "$p" 2>/dev/null; then
    kill "$p"
    for _ in $(seq 30); do kill -0 "$p" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$p" 2>/dev/null && { log "$1 ($p) did not stop: KILL"; kill -9 "$p"; }
  fi
  rm -f "$f"
}

down() {
  local quiet=${1:-}
  [ -d "$WORK" ] || return 0
  stop coredns
  stop fuseplugin
  stop kubelet
  # The pods: their tasks (and so their shims) through our containerd, whose
  # socket nobody else uses, and the pod network namespaces CNI made.
  if [ -S "$S/containerd/containerd.sock" ] && [ -f "$PIDS/containerd.pid" ]; then
    local ids netnss
    ids=$(ctr_ containers ls -q 2>/dev/null)
    netnss=$(for id in $ids; do ctr_ containers info "$id" 2>/dev/null; done | grep -o '"/var/run/netns/cni-[^"]*"' | tr -d '"' | sort -u)
    for id in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -a -s SIGKILL "$id" > /dev/null 2>&1; done
    sleep 1
    for id in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks rm -f "$id" > /dev/null 2>&1; done
    for id in $ids; do ctr_ containers rm "$id" > /dev/null 2>&1; done
    for n in $netnss; do umount "$n" 2>/dev/null; rm -f "$n"; done
    for id in $ids; do rm -f /var/lib/cni/results/awcp-e2e-"$id"-* /var/lib/cni/results/cni-loopback-"$id"-*; done
  fi
  # Shims whose containerd died before them.
  pkill -9 -f "containerd-shim-runc-v2 -namespace k8s.io .*-address $S/" 2>/dev/null
  stop containerd
  stop kube-scheduler
  stop kube-controller-manager
  stop kube-apiserver
  stop etcd
  # Mounts left under the state dir (secret tmpfs, overlay roots, shm), deepest first.
  grep -o " $S/[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m"; done
  # The kubelet's cgroups (cgroupfs driver), empty once the pods are gone.
  for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  if [ -f "$WORK/sysctl.orig" ]; then
    while read -r kv; do sysctl -q -w "$kv"; done < "$WORK/sysctl.orig" && rm -f "$WORK/sysctl.orig"
  fi
  [ -e /run/netns/$NS ] && ip netns del $NS   # the veth pair and the route to the pods go with it
  ip link del awk8s-host 2>/dev/null
  rm -f /var/lib/kubelet/device-plugins/kubelet.sock /var/lib/kubelet/device-plugins/awcp-fuse.sock \
    /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint
  rm -f /var/lib/kubelet/seccomp/awcp/executor.json
  rmdir /var/lib/kubelet/seccomp/awcp /var/lib/kubelet/seccomp 2>/dev/null
  if [ -f "$WORK/made-var-lib-kubelet" ]; then
    rmdir /var/lib/kubelet/device-plugins /var/lib/kubelet/plugins_registry /var/lib/kubelet/plugins /var/lib/kubelet 2>/dev/null
    rm -f "$WORK/made-var-lib-kubelet"
  fi
  rmdir /var/lib/cni/results /var/lib/cni /run/containerd/runc/k8s.io /run/containerd/runc /run/containerd/fifo \
    /run/containerd/s /run/containerd 2>/dev/null
  rm -rf "$S" "$P" "$C" "$PIDS" "$WORK/env"
  local left
  left=$(pgrep -f "$KB/|$B/fuseplugin|containerd --config $C/" | tr '\n' ' ')
  [ -n "$left" ] && log "still running after down: $left"
  [ -n "$quiet" ] || log "cluster down"
}

e2e() {
  build || exit 1
  trap 'down' EXIT
  trap 'exit 130' INT TERM
  up || exit 1
  set -a; . "$WORK/env"; set +a
  cd "$HERE" && go test -count=1 -v -timeout 25m ./...
}

case "${1:-}" in
  build) build ;;
  up) up ;;
  down) down ;;
  test) e2e ;;
  *) echo "usage: $0 build|up|down|test" >&2; exit 2 ;;
esac

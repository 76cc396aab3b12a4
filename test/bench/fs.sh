#!/usr/bin/env bash
# make bench, the filesystem part: the workloads of test/bench/workloads.sh
# on a local directory, a go-fuse loopback mount (FUSE alone), sshfs over a
# private loopback OpenSSH (what people use today) and a real awcp delegation
# (awcp-ctl serve + awcp-fs serve, our FUSE client over our SSH server),
# interleaved for BENCH_ROUNDS rounds, each workload cold (the page cache
# dropped before the read workloads) and then warm (workloads.sh -C: never
# dropped). Then it probes how soon a change made on
# the source side shows through each mount. Prints a table of medians for
# each, with the ratios to local, to the loopback and to sshfs, the issues'
# targets, the CPU time and peak RSS of the two
# awcp daemons, and writes them as TSV to $BENCH_OUT/fs.tsv and
# $BENCH_OUT/fs-warm.tsv.
#
# Env: BIN (the binaries, default ./bin), BENCH_ROUNDS (default 3),
# BENCH_OUT (default ./bin/bench),
# BENCH_WARM (default 1; 0 runs the cold workloads only),
# WORKLOADS_ARGS (extra workloads.sh flags, e.g. -F to skip fio),
# BENCH_LOOP_PASSTHROUGH (1: the loopback with FUSE passthrough), AWCP_CTL_FLAGS
# (extra flags of awcp-ctl serve, e.g. --audit-records 0 to measure the
# audit log's cost).
# Needs root and /dev/fuse; installs sshfs, openssh-server and fio from
# Debian's packages if they are missing.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${BIN:-$ROOT/bin}
ROUNDS=${BENCH_ROUNDS:-3}
WORKLOADS=$ROOT/test/bench/workloads.sh
OUT=${BENCH_OUT:-$ROOT/bin/bench}
[ "$(id -u)" = 0 ] || { echo "bench: needs root (mounts, drop_caches, a private sshd)" >&2; exit 2; }
[ -e /dev/fuse ] || { echo "bench: needs /dev/fuse" >&2; exit 2; }

missing=""
for pkg in sshfs openssh-server openssh-client fio git fuse3 dbench; do
	dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"
done
if [ -n "$missing" ]; then
	echo "bench: installing$missing"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

B=$(mktemp -d /tmp/awcp-bench.XXXXXX)
mkdir -p "$B"/{ssh,src,local,mnt-loop,mnt-sshfs,run,work,results} "$OUT"
chmod 700 "$B/ssh"
pids=()
cleanup() {
	set +e
	[ -n "${AWCP_ID:-}" ] && "$BIN/awcp-ctl" --state-dir "$B/ctl" cancel "$AWCP_ID" >/dev/null 2>&1
	fusermount3 -u "$B/mnt-sshfs" 2>/dev/null
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
	[ -f "$B/ssh/sshd.pid" ] && kill "$(cat "$B/ssh/sshd.pid")" 2>/dev/null
	sleep 0.5
	grep -q " $B/" /proc/self/mountinfo && echo "bench: mounts left under $B" >&2
	rm -rf "$B"
}
trap cleanup EXIT INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() { # wait_for SECONDS CMD...: until CMD succeeds
	local n=$(($1 * 10)); shift
	until "$@" >/dev/null 2>&1; do n=$((n - 1)); [ $n -gt 0 ] || return 1; sleep 0.1; done
}

# --- sshfs over a private OpenSSH on loopback, root by key, internal-sftp ---
SSHD_PORT=$(free_port)
ssh-keygen -q -t ed25519 -N '' -f "$B/ssh/host_ed25519_key"
ssh-keygen -q -t ed25519 -N '' -f "$B/ssh/client_ed25519"
cp "$B/ssh/client_ed25519.pub" "$B/ssh/authorized_keys" && chmod 600 "$B/ssh/authorized_keys"
cat >"$B/ssh/sshd_config" <<EOF
Port $SSHD_PORT
ListenAddress 127.0.0.1
HostKey $B/ssh/host_ed25519_key
PidFile $B/ssh/sshd.pid
AuthorizedKeysFile $B/ssh/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin prohibit-password
StrictModes no
AllowTcpForwarding no
X11Forwarding no
UseDNS no
Subsystem sftp internal-sftp
EOF
mkdir -p /run/sshd
/usr/sbin/sshd -f "$B/ssh/sshd_config" -E "$B/ssh/sshd.log"
cat >"$B/ssh/ssh_config" <<EOF
Host awcpbench
  HostName 127.0.0.1
  Port $SSHD_PORT
  User root
  IdentityFile $B/ssh/client_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $B/ssh/known_hosts
  StrictHostKeyChecking accept-new
  BatchMode yes
EOF
wait_for 5 ssh -F "$B/ssh/ssh_config" awcpbench true
sshfs -F "$B/ssh/ssh_config" -o reconnect,ServerAliveInterval=15,ServerAliveCountMax=3 \
	"awcpbench:$B/src" "$B/mnt-sshfs"

# --- go-fuse loopback: the cost of FUSE alone ---
# Its reads and writes go through its process, as any FUSE server's whose
# data is elsewhere. go-fuse's loopback would otherwise hand the kernel
# the backing files (passthrough, Linux 6.9+): 23 GB/s reads here, a local
# disk's speed and no baseline for a network mount. BENCH_LOOP_PASSTHROUGH=1
# measures against that.
(cd "$ROOT" && go build -o "$B/run/loopmount" ./test/bench/loopmount)
LOOP_FLAGS=""
[ "${BENCH_LOOP_PASSTHROUGH:-0}" = 1 ] && LOOP_FLAGS=-passthrough
"$B/run/loopmount" $LOOP_FLAGS "$B/mnt-loop" "$B/src" >"$B/run/loopmount.log" 2>&1 &
pids+=($!)

# --- awcp: a real delegation of src, live-mounted on the executor ---
# --allow-git-control: git_workflow makes a repository in the mount, whose
# .git/config and hooks a delegation otherwise keeps read-only to the agent.
AWCP_PORT=$(free_port)
"$BIN/awcp-fs" serve --state-dir "$B/exec" --work-root "$B/work" --listen "127.0.0.1:$AWCP_PORT" --sandbox-allow "$B/run:rw" \
	--max-ttl 24h --agent-cmd "echo \"\$AWCP_WORKDIR\" > '$B/run/workdir'; exec sleep 100000" >"$B/run/awcp-fs.log" 2>&1 &
EXEC_PID=$!
pids+=($EXEC_PID)
"$BIN/awcp-ctl" --state-dir "$B/ctl" serve --ssh-listen 127.0.0.1:0 ${AWCP_CTL_FLAGS:-} >"$B/run/awcp-ctl.log" 2>&1 &
CTL_PID=$!
pids+=($CTL_PID)
wait_for 10 test -S "$B/ctl/ctl.sock"
wait_for 10 grep -q listening "$B/run/awcp-fs.log"
AWCP_ID=$("$BIN/awcp-ctl" --state-dir "$B/ctl" export "$B/src" --peer "https://127.0.0.1:$AWCP_PORT" --peer-key "$("$BIN/awcp-fs" id --state-dir "$B/exec" | head -1)" \
	--transport sshfs --ttl 12h --background --allow-git-control --prompt "benchmark mount: the agent waits")
wait_for 20 test -s "$B/run/workdir" || { echo "bench: the delegation did not start" >&2; cat "$B/run/"*.log >&2; exit 1; }
AWCP_MNT=$(cat "$B/run/workdir")
for m in "$B/mnt-loop" "$B/mnt-sshfs" "$AWCP_MNT"; do
	wait_for 10 grep -q " $m " /proc/self/mountinfo || { echo "bench: $m is not mounted" >&2; exit 1; }
done

cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }   # utime + stime, clock ticks
hwm() { awk '/^VmHWM/ { print $2 }' "/proc/$1/status"; } # peak RSS, KiB

declare -A DIRS=([local]="$B/local" [goloop]="$B/mnt-loop" [sshfs]="$B/mnt-sshfs" [awcp]="$AWCP_MNT")
TARGETS=(local goloop sshfs awcp)
export WORKLOADS_CACHE=${WORKLOADS_CACHE:-/tmp/awcp-workloads}
WARM=${BENCH_WARM:-1}
MODES=(cold)
[ "$WARM" = 1 ] && MODES+=(warm)
declare -A CTL_CPU=([cold]=0 [warm]=0) EXEC_CPU=([cold]=0 [warm]=0)
echo "bench: $ROUNDS round(s) of ${TARGETS[*]}, ${MODES[*]}; fixtures and logs in $WORKLOADS_CACHE"
for r in $(seq "$ROUNDS"); do
	for mode in "${MODES[@]}"; do
		flags=${WORKLOADS_ARGS:-}
		[ "$mode" = warm ] && flags="$flags -C"
		for t in "${TARGETS[@]}"; do
			printf 'bench: round %d %-4s %-7s ' "$r" "$mode" "$t"
			[ "$t" = awcp ] && c0=$(cpu $CTL_PID) && e0=$(cpu $EXEC_PID)
			start=$(date +%s)
			# shellcheck disable=SC2086 # flags are words
			"$WORKLOADS" $flags "${DIRS[$t]}" >"$B/results/$t.$mode.r$r.txt" 2>"$B/results/$t.$mode.r$r.err" || true
			if [ "$t" = awcp ]; then
				CTL_CPU[$mode]=$((CTL_CPU[$mode] + $(cpu $CTL_PID) - c0))
				EXEC_CPU[$mode]=$((EXEC_CPU[$mode] + $(cpu $EXEC_PID) - e0))
			fi
			echo "$(($(date +%s) - start))s"
		done
	done
done

# How long a change made on the source side — by another process, as the
# delegator's user would — takes to show through each mount: a new file
# whose absence was just looked up, and a rewrite of a file just read, of
# the same size. The worst of 10 probes each, in milliseconds (5000: not
# seen within 5 s).
probe() { # probe SOURCE MOUNT: prints notify_new_worst_ms and notify_rewrite_worst_ms
	python3 - "$1" "$2" <<'PY'
import os, sys, time
src, mnt = sys.argv[1], sys.argv[2]
def wait(seen, limit=5.0):
    t0 = time.monotonic()
    while not seen():
        if time.monotonic() - t0 > limit:
            return limit * 1000
        time.sleep(0.0005)
    return (time.monotonic() - t0) * 1000
def read(p):
    try:
        with open(p) as f:
            return f.read()
    except OSError:
        return None
new, rewrite = [], []
for i in range(10):
    name = "notify-probe-%d" % i
    there, here = os.path.join(src, name), os.path.join(mnt, name)
    os.path.exists(here)  # its absence, looked up (and cached, where a mount does)
    with open(there, "w") as f:
        f.write("a")
    new.append(wait(lambda: os.path.exists(here)))
    wait(lambda: read(here) == "a")
    with open(there, "w") as f:
        f.write("b")
    rewrite.append(wait(lambda: read(here) == "b"))
    os.remove(there)
print("notify_new_worst_ms %.1f" % max(new))
print("notify_rewrite_worst_ms %.1f" % max(rewrite))
PY
}
declare -A SOURCES=([local]="$B/local" [goloop]="$B/src" [sshfs]="$B/src" [awcp]="$B/src")
for t in "${TARGETS[@]}"; do
	probe "${SOURCES[$t]}" "${DIRS[$t]}" >"$B/results/$t.notify.txt" || echo "bench: the notification probe of $t failed" >&2
done

TICK=$(getconf CLK_TCK)
for mode in "${MODES[@]}"; do
	for t in "${TARGETS[@]}"; do
		"$WORKLOADS" -m "$B"/results/"$t".$mode.r*.txt >"$B/results/$t.$mode.txt"
		cat "$B/results/$t.notify.txt" >>"$B/results/$t.$mode.txt"
	done
	tsv=$OUT/fs.tsv
	[ "$mode" = warm ] && tsv=$OUT/fs-warm.tsv
	echo
	echo "== $mode: the page cache $([ "$mode" = warm ] && echo "never dropped (workloads.sh -C)" || echo "dropped before the read workloads")"
	awk -v mode="$mode" -v tick="$TICK" -v rounds="$ROUNDS" \
		-v ctl_cpu="${CTL_CPU[$mode]}" -v exec_cpu="${EXEC_CPU[$mode]}" -v ctl_rss="$(hwm $CTL_PID)" -v exec_rss="$(hwm $EXEC_PID)" \
		-v tsv="$tsv" -v goals="$ROOT/test/bench/goals.tsv" -f "$ROOT/test/bench/goals.awk" -f "$ROOT/test/bench/table.awk" \
		"$B/results/local.$mode.txt" "$B/results/goloop.$mode.txt" "$B/results/sshfs.$mode.txt" "$B/results/awcp.$mode.txt"
done
cp "$B"/results/*.txt "$OUT/" 2>/dev/null || true
# A workload that failed in every round is a benchmark that no longer
# runs: said, and make bench fails.
failed=$(grep -l ' FAIL$' "$B"/results/*.cold.txt "$B"/results/*.warm.txt 2>/dev/null || true)
if [ -n "$failed" ]; then
	echo "bench: a workload failed in every round, in $(echo $failed | xargs -n1 basename | tr '\n' ' '); what it said:" >&2
	tail -20 "$WORKLOADS_CACHE/workloads.log" >&2
	exit 1
fi

# A file-server workload nobody here wrote: dbench's NetBench load (a
# Windows file server's clients: creates, finds, renames, statfs, flushes)
# on each target, 2 clients for 20 s, BENCH_DBENCH_RUNS runs (default 4)
# interleaved. The medians of its throughput and of the average latency
# of the operations that tell the mounts apart. BENCH_DBENCH=0 skips it.
if [ "${BENCH_DBENCH:-1}" = 1 ] && command -v dbench >/dev/null; then
	LOADFILE=/usr/share/dbench/client.txt
	DB_RUNS=${BENCH_DBENCH_RUNS:-4}
	echo
	echo "bench: dbench, $DB_RUNS run(s) of 20 s, 2 clients, on ${TARGETS[*]}"
	for r in $(seq "$DB_RUNS"); do
		for t in "${TARGETS[@]}"; do
			d="${DIRS[$t]}/.dbench"
			mkdir -p "$d"
			timeout 120 dbench -c "$LOADFILE" -D "$d" -t 20 2 >"$B/results/$t.dbench.r$r.txt" 2>&1 || echo "bench: dbench on $t failed" >&2
			rm -rf "$d"
		done
	done
	echo
	echo "== dbench (NetBench load, 2 clients, 20 s; medians of $DB_RUNS runs; latencies in ms)"
	for t in "${TARGETS[@]}"; do
		awk -v t="$t" '
			/^Throughput/ { tp[++n] = $2 }
			$1 ~ /^(Find|Qfsinfo|NTCreateX|Rename|Flush)$/ && NF == 4 { avg[$1] = avg[$1] " " $3; if ($4 > mx[$1]) mx[$1] = $4 }
			function median(s,   v, k, a, b, x) { k = split(s, v, " "); for (a = 1; a <= k; a++) for (b = a + 1; b <= k; b++) if (v[b] + 0 < v[a] + 0) { x = v[a]; v[a] = v[b]; v[b] = x }; return k ? ((k % 2) ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2) : "-" }
			END {
				s = ""; for (i = 1; i <= n; i++) s = s " " tp[i]
				printf "%s throughput_mb_s %s\n", t, median(s)
				split("Find Qfsinfo NTCreateX Rename Flush", ops, " ")
				for (i = 1; i <= 5; i++) printf "%s %s_avg_ms %s\n", t, ops[i], median(avg[ops[i]])
				printf "%s Flush_max_ms %s\n", t, mx["Flush"] + 0
			}' "$B"/results/"$t".dbench.r*.txt
	done >"$B/results/dbench.txt"
	awk -v tsv="$OUT/dbench.tsv" '
		{ v[$1, $2] = $3; if (!($2 in seen)) { seen[$2] = 1; rows[++n] = $2 } }
		END {
			printf "%-18s %10s %10s %10s %10s %12s %12s\n", "", "local", "goloop", "sshfs", "awcp", "awcp/goloop", "sshfs/awcp"
			print "metric\tlocal\tgoloop\tsshfs\tawcp" > tsv
			for (i = 1; i <= n; i++) {
				m = rows[i]; a = v["awcp", m]; g = v["goloop", m]; s = v["sshfs", m]
				if (m == "throughput_mb_s") { r1 = (a > 0) ? g / a : 0; r2 = (s > 0) ? a / s : 0 } else { r1 = (g > 0) ? a / g : 0; r2 = (a > 0) ? s / a : 0 }
				printf "%-18s %10s %10s %10s %10s %12.2f %12.2f\n", m, v["local", m], g, s, a, r1, r2
				printf "%s\t%s\t%s\t%s\t%s\n", m, v["local", m], g, s, a > tsv
			}
		}' "$B/results/dbench.txt"
	echo "(awcp/goloop: how much slower than FUSE alone, lower is better; sshfs/awcp: how much faster than sshfs, higher is better)"
fi

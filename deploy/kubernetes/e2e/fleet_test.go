// Package e2e applies deploy/kubernetes to a real single-node cluster (the
// one cluster.sh starts) as an operator would, and delegates into it from
// a delegator outside the cluster, as a user would. `make k8s-e2e` runs it.
// It is a module of its own: the Kubernetes components it builds stay out
// of awcp's dependencies.
package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

const (
	serviceDomain = "awcp-executor.awcp.svc.cluster.local"
	replicas      = 3
	// The executors' agent: a script in the image's shell. "hold" keeps its
	// delegation running (the pod is deleted under it); "work" takes long
	// enough that ten at once fill more than one pod's slots.
	agentScript = `case "$AWCP_PROMPT" in hold*) sleep 600 ;; work*) sleep 4 ;; esac; echo "done by $(hostname)" > ran.txt`
)

// TestFleetOnARealCluster: the manifests are accepted by the API server
// under strict validation and applied with the operator's values; three
// executors become Ready and are found through cluster DNS; delegations
// from outside the cluster (live mount and archive, ten at once, three
// attempts) complete across the pods; a pod deleted under a delegation
// ends it with a clear error, the next goes to a pod that runs, and the
// StatefulSet brings the pod back with the same identity.
func TestFleetOnARealCluster(t *testing.T) {
	c := clusterFromEnv(t)
	d := &delegator{bin: c.bin, state: t.TempDir(), browse: []string{"--dns-server", c.dnsServer}}
	daemonLog := d.serve(t)
	c.dumpOnFailure(t, daemonLog)

	self := d.ctl(t, "peers", "self")
	delegatorKey, _, _ := strings.Cut(self.stdout, "\n")
	if self.code != 0 || !strings.HasPrefix(delegatorKey, "ssh-ed25519 ") {
		t.Fatalf("peers self: exit %d\n%s%s", self.code, self.stdout, self.stderr)
	}

	// The operator's copy of deploy/kubernetes, its values.yaml set: the
	// image, this delegator's key, the agent, requests three pods fit on
	// two cores, and the test's storage class (its volumes are below).
	dir := operatorCopy(t, map[string]any{
		"image":                c.image,
		"authorizedDelegators": delegatorKey + "\n",
		"agentCommand":         agentScript,
		"cpuRequest":           "250m",
		"memoryRequest":        "256Mi",
		"stateClaim": map[string]any{
			"storageClassName": "awcp-e2e",
			"accessModes":      []string{"ReadWriteOnce"},
			"resources":        map[string]any{"requests": map[string]any{"storage": "1Gi"}},
		},
	})
	persistentVolumes(t, c)

	// Strict validation by the real API server: every object accepted as
	// shipped; a misspelt field refused.
	c.mustKubectl(t, "apply", "-f", filepath.Join(dir, "namespace.yaml"))
	if out, err := c.kubectl("apply", "--dry-run=server", "--validate=strict", "-k", dir); err != nil {
		t.Fatalf("the API server refused the manifests: %v", err)
	} else if strings.Contains(out, "Warning") {
		t.Errorf("the API server warned of the manifests:\n%s", out)
	}
	bad := t.TempDir()
	copyDir(t, dir, bad)
	misspell(t, filepath.Join(bad, "statefulset.yaml"), "serviceName:", "servicename:")
	if _, err := c.kubectl("apply", "--dry-run=server", "--validate=strict", "-k", bad); err == nil || !strings.Contains(err.Error(), "unknown field") {
		t.Fatalf("a misspelt field (servicename) was not refused under strict validation: %v", err)
	}

	applied := time.Now()
	c.mustKubectl(t, "apply", "-k", dir)
	ready := waitFor(t, "3 executor pods Ready", 5*time.Minute, c.readyReplicas)
	t.Logf("kubectl apply -k to 3 executors Ready: %v", ready.Round(100*time.Millisecond))

	// The values reached the objects (the Values object itself stays local).
	if img := c.mustKubectl(t, "-n", "awcp", "get", "statefulset", "awcp-executor", "-o", "jsonpath={.spec.template.spec.containers[0].image}"); img != c.image {
		t.Errorf("the StatefulSet runs image %q, not values.yaml's %q", img, c.image)
	}
	if out, _ := c.kubectl("get", "values.awcp.dev", "-A"); strings.Contains(out, "awcp-values") {
		t.Errorf("the local-config Values object was sent to the cluster")
	}
	// Each executor runs under the profile shipped (installed by the init
	// container), a seccomp filter in force: not Unconfined.
	for i := range replicas {
		pod := fmt.Sprintf("awcp-executor-%d", i)
		if prof := c.mustKubectl(t, "-n", "awcp", "get", "pod", pod, "-o",
			"jsonpath={.spec.containers[0].securityContext.seccompProfile.localhostProfile}"); prof != "awcp/executor.json" {
			t.Errorf("%s's seccomp profile: %q", pod, prof)
		}
		if status := c.mustKubectl(t, "-n", "awcp", "exec", pod, "-c", "awcp-fs", "--", "cat", "/proc/1/status"); !regexp.MustCompile(`(?m)^Seccomp:\s+2$`).MatchString(status) {
			t.Errorf("%s's awcp-fs runs without a seccomp filter:\n%s", pod, status)
		}
	}

	// Each pod's identity, as its operator reads it.
	executors := map[string]executor{} // by agent id
	pods := map[string]executor{}      // by pod name
	for i := range replicas {
		e := c.identity(t, fmt.Sprintf("awcp-executor-%d", i))
		executors[e.agentID], pods[e.pod] = e, e
	}
	if len(executors) != replicas {
		t.Fatalf("the %d pods have %d distinct agent ids", replicas, len(executors))
	}

	// SRV browse from outside the cluster: the three, online.
	var listed []peer
	waitFor(t, "peers --dns "+serviceDomain+" lists the 3 executors online", 60*time.Second, func() (bool, string) {
		listed = d.peers(t)
		online := 0
		for _, p := range listed {
			if _, ok := executors[p.AgentID]; ok && p.Online {
				online++
			}
		}
		return online == replicas, fmt.Sprintf("%+v", listed)
	})
	for _, e := range executors {
		if r := d.ctl(t, "peers", "trust", e.agentID, "--key", e.key); r.code != 0 {
			t.Fatalf("peers trust %s (%s): exit %d\n%s", e.pod, e.agentID, r.code, r.stderr)
		}
	}

	// The first delegation, live, and how long a delegation takes from
	// export to its agent running, in a pod and on loopback.
	first := d.export(t, "live", "quick")
	t.Logf("kubectl apply -k to the first delegation completed: %v", time.Since(applied).Round(100*time.Millisecond))
	checkRan(t, first, executors)
	for _, p := range listed {
		if e, ok := executors[p.AgentID]; ok && e.pod == "awcp-executor-0" {
			compareStartup(t, c, d, p, e.key, delegatorKey)
		}
	}

	// Ten at once, half live and half archive: each completes, its file
	// comes back, and they run on all three pods (four slots each).
	var ids []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 10 {
		transport := []string{"live", "archive"}[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := d.ctl(t, append([]string{"export", t.TempDir(), "--peer", "dns:" + serviceDomain, "--transport", transport,
				"--prompt", fmt.Sprintf("work %d", i), "--background"}, d.browse...)...)
			if r.code != 0 {
				t.Errorf("export %d (%s): exit %d\n%s", i, transport, r.code, r.stderr)
				return
			}
			mu.Lock()
			ids = append(ids, strings.TrimSpace(r.stdout))
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	rows := d.waitEnded(t, 3*time.Minute, ids...)
	on := map[string]int{}
	byTransport := map[string]int{}
	for _, x := range rows {
		checkRan(t, x, executors)
		on[executors[x.PeerAgentID].pod]++
		byTransport[x.Transport]++
	}
	if len(on) != replicas {
		t.Errorf("ten delegations at once ran on %d pods, want all %d: %v", len(on), replicas, on)
	}
	t.Logf("ten at once: by pod %v, by transport %v", on, byTransport)

	// --attempts 3: one attempt on each of three pods.
	before := d.status(t)
	r := d.ctl(t, append([]string{"export", t.TempDir(), "--peer", "dns:" + serviceDomain, "--attempts", "3",
		"--transport", "archive", "--prompt", "quick"}, d.browse...)...)
	if r.code != 0 {
		t.Fatalf("export --attempts 3: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Each attempt's result is staged (awcp-ctl compare), not applied.
	attemptsOn := map[string]bool{}
	for id, x := range d.status(t) {
		if _, old := before[id]; !old {
			if e, ok := executors[x.PeerAgentID]; x.State != "completed" || !ok {
				t.Errorf("attempt %s ended %s on %q: %+v", id, x.State, x.PeerAgentID, x.Failure)
			} else {
				attemptsOn[e.pod] = true
			}
		}
	}
	if len(attemptsOn) != 3 {
		t.Errorf("--attempts 3 ran on %d distinct pods, want 3: %v\n%s", len(attemptsOn), attemptsOn, r.stderr)
	}

	deletedUnderADelegation(t, c, d, executors, pods)
	refusedUnderTheDefaultSeccomp(t, c)
}

// An executor in a container under the runtime's default seccomp profile
// (which refuses pivot_root(2)) cannot build its agents' sandbox: awcp-fs
// says so and exits, so such a pod is never Ready, rather than failing
// each delegation it takes.
func refusedUnderTheDefaultSeccomp(t *testing.T, c *cluster) {
	pod := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: awcp-default-seccomp, namespace: awcp}
spec:
  restartPolicy: Never
  automountServiceAccountToken: false
  containers:
    - name: awcp-fs
      image: %s
      imagePullPolicy: IfNotPresent
      args: [serve, --listen=0.0.0.0:10200, --state-dir=/tmp/state, --work-root=/tmp/work,
             --authorized-delegators=/etc/awcp/authorized-delegators, --agent-cmd=true]
      resources:
        requests: {cpu: 50m, memory: 64Mi}
        limits: {memory: 256Mi, smarter-devices/fuse: "1"}
      securityContext:
        capabilities:
          drop: ["ALL"]
          add: ["SYS_ADMIN", "SETUID", "SETGID", "CHOWN", "DAC_OVERRIDE", "FOWNER"]
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        appArmorProfile: {type: Unconfined}
        seccompProfile: {type: RuntimeDefault}
      volumeMounts:
        - {name: tmp, mountPath: /tmp}
        - {name: auth, mountPath: /etc/awcp, readOnly: true}
  volumes:
    - name: tmp
      emptyDir: {}
    - name: auth
      secret: {secretName: awcp-executor, items: [{key: authorized-delegators, path: authorized-delegators}]}
`, c.image)
	f := filepath.Join(t.TempDir(), "pod.yaml")
	if err := os.WriteFile(f, []byte(pod), 0o644); err != nil {
		t.Fatal(err)
	}
	c.mustKubectl(t, "apply", "-f", f)
	waitFor(t, "the executor under the default seccomp profile to exit", 2*time.Minute, func() (bool, string) {
		phase, err := c.kubectl("-n", "awcp", "get", "pod", "awcp-default-seccomp", "-o", "jsonpath={.status.phase}")
		return err == nil && (phase == "Failed" || phase == "Succeeded"), phase
	})
	logs := c.mustKubectl(t, "-n", "awcp", "logs", "awcp-default-seccomp")
	if !strings.Contains(logs, "the agents' sandbox cannot be built here") || !strings.Contains(logs, "seccomp profile refuses pivot_root") {
		t.Errorf("awcp-fs under the default seccomp profile did not refuse to serve, saying why:\n%s", logs)
	}
	if ready := c.mustKubectl(t, "-n", "awcp", "get", "pod", "awcp-default-seccomp", "-o",
		`jsonpath={.status.conditions[?(@.type=="Ready")].status}`); ready == "True" {
		t.Errorf("the pod was Ready")
	}
	t.Logf("under the default seccomp profile: %s", strings.TrimSpace(logs))
}

// A pod deleted under a running delegation: the delegation ends with a
// clear error; the next delegation goes to a pod that runs; the pod comes
// back with the identity key it had (its volume claim kept it).
func deletedUnderADelegation(t *testing.T, c *cluster, d *delegator, executors, pods map[string]executor) {
	r := d.ctl(t, append([]string{"export", t.TempDir(), "--peer", "dns:" + serviceDomain, "--transport", "live",
		"--prompt", "hold", "--background"}, d.browse...)...)
	if r.code != 0 {
		t.Fatalf("export (hold): exit %d\n%s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	var held delegation
	waitFor(t, "the held delegation running", time.Minute, func() (bool, string) {
		held = d.status(t)[id]
		return held.State == "running", held.State
	})
	victim := executors[held.PeerAgentID]
	oldUID := c.mustKubectl(t, "-n", "awcp", "get", "pod", victim.pod, "-o", "jsonpath={.metadata.uid}")
	deleted := time.Now()
	c.mustKubectl(t, "-n", "awcp", "delete", "pod", victim.pod, "--wait=false")

	ended := d.waitEnded(t, 90*time.Second, id)[0]
	t.Logf("%s deleted under delegation %s: it ended %s after %v: %+v %v", victim.pod, id, ended.State,
		time.Since(deleted).Round(100*time.Millisecond), ended.Failure, ended.Notes)
	if ended.State != "error" || ended.Failure == nil || ended.Failure.Code == "" || ended.Failure.Message == "" {
		t.Errorf("the deleted pod's delegation ended %s with failure %+v, want error with a code and a message", ended.State, ended.Failure)
	}

	// The next one, at once: it must complete, on a pod that runs.
	next := d.export(t, "live", "quick")
	checkRan(t, next, executors)
	if next.PeerAgentID == victim.agentID {
		// The pod may already be back (its replacement is Ready in
		// seconds): then it is the same identity, Ready before the
		// delegation began.
		readyAt := c.mustKubectl(t, "-n", "awcp", "get", "pod", victim.pod, "-o",
			`jsonpath={.status.conditions[?(@.type=="Ready")].lastTransitionTime}`)
		at, err := time.Parse(time.RFC3339, readyAt)
		if err != nil || at.After(next.CreatedAt.Add(time.Second)) {
			t.Errorf("the next delegation went to %s (%s) before its replacement was Ready (%s)", victim.pod, next.CreatedAt, readyAt)
		}
		t.Logf("the next delegation went to %s again: its replacement was Ready at %s", victim.pod, readyAt)
	} else {
		t.Logf("the next delegation went elsewhere: %s", executors[next.PeerAgentID].pod)
	}

	// Back, with the same key and agent id, as a new pod.
	waitFor(t, "the StatefulSet back to 3 Ready", 3*time.Minute, c.readyReplicas)
	if uid := c.mustKubectl(t, "-n", "awcp", "get", "pod", victim.pod, "-o", "jsonpath={.metadata.uid}"); uid == oldUID {
		t.Fatalf("%s was not replaced (uid %s)", victim.pod, uid)
	}
	back := c.identity(t, victim.pod)
	if back.key != pods[victim.pod].key || back.agentID != pods[victim.pod].agentID {
		t.Errorf("%s came back as %s %s, was %s %s", victim.pod, back.agentID, back.key, victim.agentID, victim.key)
	}
}

type peer struct {
	AgentID string `json:"agentId"`
	Name    string `json:"name"`
	URL     string `json:"url"`
	Online  bool   `json:"online"`
	Via     string `json:"via"`
}

func (d *delegator) peers(t *testing.T) []peer {
	t.Helper()
	r := d.ctl(t, append([]string{"peers", "--dns", serviceDomain, "--json"}, d.browse...)...)
	var ps []peer
	if r.code != 0 || jsonUnmarshal(r.stdout, &ps) != nil {
		return nil
	}
	return ps
}

// export runs one delegation to the fleet in the foreground and returns its row.
func (d *delegator) export(t *testing.T, transport, prompt string) delegation {
	t.Helper()
	return d.exportTo(t, append([]string{"--peer", "dns:" + serviceDomain, "--transport", transport, "--prompt", prompt}, d.browse...)...)
}

// exportTo runs `awcp-ctl export --json` of a fresh directory with args
// and returns the delegation it printed.
func (d *delegator) exportTo(t *testing.T, args ...string) delegation {
	t.Helper()
	r := d.ctl(t, append([]string{"export", t.TempDir(), "--json"}, args...)...)
	var x delegation
	if err := jsonUnmarshal(r.stdout, &x); r.code != 0 || err != nil {
		t.Fatalf("export %v: exit %d (%v)\n%s%s", args, r.code, err, r.stdout, r.stderr)
	}
	return x
}

// checkRan: x completed, on a pod of the fleet, and the agent's file came
// back to the lent directory naming that pod.
func checkRan(t *testing.T, x delegation, executors map[string]executor) {
	t.Helper()
	e, ok := executors[x.PeerAgentID]
	if x.State != "completed" || !ok {
		t.Errorf("delegation %s (%s) ended %s on %q: %+v %v", x.ID, x.Transport, x.State, x.PeerAgentID, x.Failure, x.Notes)
		return
	}
	got, err := os.ReadFile(filepath.Join(x.LocalDir, "ran.txt"))
	if want := "done by " + e.pod + "\n"; string(got) != want {
		t.Errorf("delegation %s (%s on %s): ran.txt %q (%v), want %q", x.ID, x.Transport, e.pod, got, err, want)
	}
}

// compareStartup logs how long a delegation takes from `awcp-ctl export`
// to its agent running — into a pod, and to an executor on this machine's
// loopback with the same agent — each named by URL and key (no browse),
// the median of three.
func compareStartup(t *testing.T, c *cluster, d *delegator, pod peer, podKey, delegatorKey string) {
	t.Helper()
	local := localExecutor(t, c, delegatorKey)
	median := func(url, key string) (time.Duration, []time.Duration) {
		var all []time.Duration
		for range 3 {
			start := time.Now()
			x := d.exportTo(t, "--peer", url, "--peer-key", key, "--transport", "live", "--prompt", "quick")
			all = append(all, x.reached("running").Sub(start))
		}
		sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
		return all[len(all)/2], all
	}
	inPod, podAll := median(pod.URL, podKey)
	onLoopback, loopAll := median(local.url, local.key)
	t.Logf("export→running (live mount, the executor named by URL): into a pod %v, on loopback %v (all: %v; %v)",
		inPod.Round(time.Millisecond), onLoopback.Round(time.Millisecond), podAll, loopAll)
}

// operatorCopy is deploy/kubernetes as an operator keeps it, with values
// set in values.yaml; every value set must be one values.yaml has.
func operatorCopy(t *testing.T, values map[string]any) string {
	t.Helper()
	dir := t.TempDir()
	copyDir(t, "..", dir)
	path := filepath.Join(dir, "values.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatalf("values.yaml: %v", err)
	}
	for k, val := range values {
		if _, ok := v[k]; !ok {
			t.Fatalf("values.yaml has no %s", k)
		}
		v[k] = val
	}
	out, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// copyDir copies the YAML files of src (the manifests, not this module).
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(src, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", src, err)
	}
	profiles, _ := filepath.Glob(filepath.Join(src, "seccomp-*.json")) // kustomize's ConfigMap of it
	files = append(files, profiles...)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, filepath.Base(f)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func misspell(t *testing.T, path, from, to string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), from) {
		t.Fatalf("%s has no %q", path, from)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), from, to, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// persistentVolumes: no storage provisioner runs here, so each pod's state
// claim binds to one of three volumes of the test's class on the node.
func persistentVolumes(t *testing.T, c *cluster) {
	t.Helper()
	var docs []string
	for i := range replicas {
		p := filepath.Join(c.pvDir, fmt.Sprint(i))
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		docs = append(docs, fmt.Sprintf(`apiVersion: v1
kind: PersistentVolume
metadata: {name: awcp-e2e-state-%d}
spec:
  storageClassName: awcp-e2e
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  hostPath: {path: %s, type: Directory}
`, i, p))
	}
	f := filepath.Join(t.TempDir(), "pv.yaml")
	if err := os.WriteFile(f, []byte(strings.Join(docs, "---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	c.mustKubectl(t, "apply", "-f", f)
}

// Package kubernetes holds the executor's Kubernetes manifests and their
// test: each is decoded strictly against the Kubernetes API types (an
// unknown or misspelt field fails), and what one manifest says of another
// — selectors, port names, volumes, the Secret's key, the flags given to
// awcp-fs — is checked to agree. No cluster and no network are needed.
//
// It is a module of its own so that the Kubernetes API types stay out of
// awcp's own dependencies.
package kubernetes

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// manifests are the objects of the manifests here, by kind.
type manifests struct {
	namespaces  []*corev1.Namespace
	secrets     []*corev1.Secret
	services    []*corev1.Service
	statefulSet []*appsv1.StatefulSet
	policies    []*networkingv1.NetworkPolicy
}

// decodeStrict decodes one YAML document as the type its kind names,
// refusing unknown and duplicate fields.
func decodeStrict(doc []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, err
	}
	var obj any
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 Namespace":
		obj = &corev1.Namespace{}
	case "v1 Secret":
		obj = &corev1.Secret{}
	case "v1 Service":
		obj = &corev1.Service{}
	case "apps/v1 StatefulSet":
		obj = &appsv1.StatefulSet{}
	case "networking.k8s.io/v1 NetworkPolicy":
		obj = &networkingv1.NetworkPolicy{}
	case "v1 ConfigMap":
		obj = &corev1.ConfigMap{}
	case "apps/v1 DaemonSet":
		obj = &appsv1.DaemonSet{}
	default:
		return nil, fmt.Errorf("kind %q of apiVersion %q: not one this test knows", tm.Kind, tm.APIVersion)
	}
	// As the API server decodes: field names matched case-sensitively
	// (encoding/json alone would take "servicename"), and neither an
	// unknown field nor one given twice.
	data, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, err
	}
	strict, err := kjson.UnmarshalStrict(data, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return nil, err
	}
	if len(strict) > 0 {
		return nil, errors.Join(strict...)
	}
	return obj, nil
}

// load decodes what kustomization.yaml applies (values.yaml aside: it is
// the operator's settings, never sent) and the optional external.yaml.
func load(t *testing.T) *manifests {
	t.Helper()
	files := append(kustomized(t), "external.yaml")
	m := &manifests{}
	for _, f := range files {
		if f == "values.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(data, []byte("\n---\n")) {
			obj, err := decodeStrict(doc)
			if err != nil {
				t.Fatalf("%s document %d: %v", f, i+1, err)
			}
			switch o := obj.(type) {
			case *corev1.Namespace:
				m.namespaces = append(m.namespaces, o)
			case *corev1.Secret:
				m.secrets = append(m.secrets, o)
			case *corev1.Service:
				m.services = append(m.services, o)
			case *appsv1.StatefulSet:
				m.statefulSet = append(m.statefulSet, o)
			case *networkingv1.NetworkPolicy:
				m.policies = append(m.policies, o)
			}
		}
	}
	if len(m.namespaces) != 1 || len(m.statefulSet) != 1 || len(m.secrets) != 1 || len(m.policies) != 1 || len(m.services) < 2 {
		t.Fatalf("want one namespace, StatefulSet, Secret and NetworkPolicy and two Services at least; have %d %d %d %d %d",
			len(m.namespaces), len(m.statefulSet), len(m.secrets), len(m.policies), len(m.services))
	}
	return m
}

// A misspelt field is refused: the decoding the test relies on is strict.
func TestStrictDecodingRefusesUnknownFields(t *testing.T) {
	data, err := os.ReadFile("statefulset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ from, to string }{
		{"serviceName:", "servicename:"},
		{"readinessProbe:", "readynessProbe:"},
		{"volumeClaimTemplates:", "volumeClaimTemplate:"},
	} {
		bad := bytes.Replace(data, []byte(c.from), []byte(c.to), 1)
		if _, err := decodeStrict(bad); err == nil || !strings.Contains(err.Error(), "unknown field") {
			t.Errorf("%s misspelt as %s: %v", c.from, c.to, err)
		}
	}
}

// The Service, the StatefulSet, the NetworkPolicy and the Secret agree.
func TestManifestsAgree(t *testing.T) {
	m := load(t)
	ns := m.namespaces[0].Name
	sts := m.statefulSet[0]
	pod := labels.Set(sts.Spec.Template.Labels)
	if sel, err := metav1.LabelSelectorAsSelector(sts.Spec.Selector); err != nil || !sel.Matches(pod) {
		t.Errorf("the StatefulSet's selector does not select its pods: %v", err)
	}
	for _, o := range []metav1.Object{sts, m.secrets[0], m.policies[0], m.services[0], m.services[1]} {
		if o.GetNamespace() != ns {
			t.Errorf("%s is in namespace %q, not %q", o.GetName(), o.GetNamespace(), ns)
		}
	}

	// The headless Service cluster DNS makes SRV records of.
	var headless *corev1.Service
	for _, s := range m.services {
		if s.Spec.ClusterIP == corev1.ClusterIPNone {
			headless = s
		}
	}
	if headless == nil || sts.Spec.ServiceName != headless.Name {
		t.Fatalf("the StatefulSet's serviceName %q is no headless Service here", sts.Spec.ServiceName)
	}
	if !labels.SelectorFromSet(headless.Spec.Selector).Matches(pod) {
		t.Errorf("the headless Service does not select the executors")
	}
	c := sts.Spec.Template.Spec.Containers[0]
	port := containerPort(c, "awcp")
	if port == nil || port.Protocol != corev1.ProtocolTCP {
		t.Fatalf("the container has no TCP port named awcp")
	}
	if !slices.ContainsFunc(headless.Spec.Ports, func(p corev1.ServicePort) bool {
		return p.Name == "awcp" && p.Protocol == corev1.ProtocolTCP && p.TargetPort.String() == "awcp"
	}) {
		t.Errorf("the headless Service has no TCP port named awcp (its SRV record is _awcp._tcp.%s.%s.svc.ZONE)", headless.Name, ns)
	}
	if listen := flagValue(c.Args, "listen"); !strings.HasSuffix(listen, fmt.Sprintf(":%d", port.ContainerPort)) {
		t.Errorf("--listen %s is not the port named awcp (%d)", listen, port.ContainerPort)
	}
	for _, s := range m.services {
		if s != headless && !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(mergeLabels(pod, "statefulset.kubernetes.io/pod-name", sts.Name+"-0"))) {
			t.Errorf("Service %s selects no executor pod", s.Name)
		}
	}

	// Readiness: the manifest, over TLS, on the awcp port.
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Scheme != corev1.URISchemeHTTPS || p.HTTPGet.Port.String() != "awcp" || p.HTTPGet.Path != "/manifest" {
			t.Errorf("the %s probe is not GET https://…:awcp/manifest: %+v", name, p)
		}
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[r]; !ok {
			t.Errorf("no %s request", r)
		}
	}

	// Volumes: every mount has one; the state dir (the identity key) is
	// a claim of its own, kept across restarts; the Secret's key is where
	// --authorized-delegators reads it.
	vols := map[string]corev1.Volume{}
	for _, v := range sts.Spec.Template.Spec.Volumes {
		vols[v.Name] = v
	}
	claims := map[string]bool{}
	for _, pvc := range sts.Spec.VolumeClaimTemplates {
		claims[pvc.Name] = true
	}
	mountOf := map[string]string{}
	for _, vm := range c.VolumeMounts {
		if _, ok := vols[vm.Name]; !ok && !claims[vm.Name] {
			t.Errorf("volume mount %s names no volume", vm.Name)
		}
		mountOf[vm.MountPath] = vm.Name
	}
	if state := flagValue(c.Args, "state-dir"); !claims[mountOf[state]] {
		t.Errorf("--state-dir %s is not on a volume claim: the identity key would change at each restart", state)
	}
	if work := flagValue(c.Args, "work-root"); mountOf[work] == "" {
		t.Errorf("--work-root %s is on no volume (the root file system is read-only)", work)
	}
	auth := flagValue(c.Args, "authorized-delegators")
	dir, file := filepath.Split(auth)
	v, ok := vols[mountOf[filepath.Clean(dir)]]
	if !ok || v.Secret == nil || v.Secret.SecretName != m.secrets[0].Name {
		t.Fatalf("--authorized-delegators %s is not on the Secret %s's volume", auth, m.secrets[0].Name)
	}
	if !slices.ContainsFunc(v.Secret.Items, func(k corev1.KeyToPath) bool { return k.Path == file && m.secrets[0].StringData[k.Key] != "" }) {
		t.Errorf("the Secret volume has no item %s from a key of the Secret", file)
	}
	if c.SecurityContext == nil || c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged {
		t.Errorf("the executor runs privileged")
	}

	// The NetworkPolicy is about these pods, and its ports are theirs.
	np := m.policies[0]
	if sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector); err != nil || !sel.Matches(pod) {
		t.Errorf("the NetworkPolicy does not select the executors")
	}
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			if p.Port == nil || containerPort(c, p.Port.String()) == nil {
				t.Errorf("the NetworkPolicy admits port %v, which the executor does not name", p.Port)
			}
		}
	}
}

// Every flag and AWCP_ variable the StatefulSet gives awcp-fs is one
// `awcp-fs serve` takes: awcp-fs is built from this repository and asked.
func TestFlagsAreAwcpFs(t *testing.T) {
	m := load(t)
	c := m.statefulSet[0].Spec.Template.Spec.Containers[0]
	bin := filepath.Join(t.TempDir(), "awcp-fs")
	build := exec.Command("go", "build", "-o", bin, "./cmd/awcp-fs")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build awcp-fs: %v\n%s", err, out)
	}
	help, err := exec.Command(bin, "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("awcp-fs serve --help: %v\n%s", err, help)
	}
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		t.Fatalf("the container does not run awcp-fs serve: %v", c.Args)
	}
	for _, a := range c.Args[1:] {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !regexp.MustCompile(`(?m)^\s+--`+regexp.QuoteMeta(name)+`\b`).Match(help) {
			t.Errorf("awcp-fs serve has no flag %s", a)
		}
	}
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "AWCP_") && !bytes.Contains(help, []byte("$"+e.Name+"]")) && !bytes.Contains(help, []byte("$"+e.Name+",")) {
			t.Errorf("awcp-fs serve reads no %s", e.Name)
		}
	}
}

func containerPort(c corev1.Container, name string) *corev1.ContainerPort {
	for i := range c.Ports {
		if c.Ports[i].Name == name {
			return &c.Ports[i]
		}
	}
	return nil
}

// flagValue is --name's value in args (--name=value), "" if absent.
func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

func mergeLabels(set labels.Set, k, v string) map[string]string {
	out := map[string]string{k: v}
	for a, b := range set {
		out[a] = b
	}
	return out
}

// Every egress rule names where it may go, and none of the HTTPS or SSH
// ones reaches the cluster's own ranges, the nodes' or the cloud's
// metadata endpoint: a rule with no `to:` lets an agent reach every
// service of the cluster on that port.
func TestEgressLeavesTheClusterOnly(t *testing.T) {
	m := load(t)
	if len(m.policies) != 1 {
		t.Fatalf("%d NetworkPolicies, want 1", len(m.policies))
	}
	inside := []string{"10.96.0.1", "10.244.1.7", "172.17.0.2", "192.168.1.10", "169.254.169.254", "100.64.0.5", "127.0.0.1", "fd00::1", "fe80::1"}
	for _, rule := range m.policies[0].Spec.Egress {
		if len(rule.To) == 0 {
			t.Errorf("an egress rule (ports %v) has no `to:`: it reaches everything", rule.Ports)
			continue
		}
		for _, peer := range rule.To {
			if peer.IPBlock == nil {
				continue
			}
			_, block, err := net.ParseCIDR(peer.IPBlock.CIDR)
			if err != nil {
				t.Fatalf("ipBlock %q: %v", peer.IPBlock.CIDR, err)
			}
			for _, addr := range inside {
				ip := net.ParseIP(addr)
				if !block.Contains(ip) {
					continue
				}
				excepted := false
				for _, ex := range peer.IPBlock.Except {
					if _, n, err := net.ParseCIDR(ex); err == nil && n.Contains(ip) {
						excepted = true
					}
				}
				if !excepted {
					t.Errorf("egress on %v reaches %s (ipBlock %s)", rule.Ports, addr, peer.IPBlock.CIDR)
				}
			}
		}
	}
}

// kustomized are the files kustomization.yaml names as its resources.
func kustomized(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if len(k.Resources) == 0 {
		t.Fatal("kustomization.yaml names no resources")
	}
	return k.Resources
}

// Every manifest here is applied by kustomization.yaml (external.yaml
// aside, an operator's choice): a file left out would not reach a
// cluster, and its test here would prove nothing.
func TestKustomizationNamesEveryManifest(t *testing.T) {
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	named := kustomized(t)
	for _, f := range files {
		if f != "kustomization.yaml" && f != "external.yaml" && !slices.Contains(named, f) {
			t.Errorf("%s is not among kustomization.yaml's resources", f)
		}
	}
}

// The executor's container runs under its own seccomp profile, which its
// init container installs from the ConfigMap kustomize makes of
// seccomp-executor.json: refusals by default, what the agents' roots need
// allowed (pivot_root, mount, unshare, the new mount API, Landlock,
// seccomp), and what a container has no use for — the kernel keyrings
// first — not.
func TestExecutorSeccompProfile(t *testing.T) {
	data, err := os.ReadFile("seccomp-executor.json")
	if err != nil {
		t.Fatal(err)
	}
	var prof struct {
		DefaultAction string `json:"defaultAction"`
		ArchMap       []struct {
			Architecture     string   `json:"architecture"`
			SubArchitectures []string `json:"subArchitectures"`
		} `json:"archMap"`
		Syscalls []struct {
			Names  []string `json:"names"`
			Action string   `json:"action"`
		} `json:"syscalls"`
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(data, &prof); err != nil {
		t.Fatalf("seccomp-executor.json: %v", err)
	}
	if prof.DefaultAction != "SCMP_ACT_ERRNO" || len(prof.Syscalls) != 1 || prof.Syscalls[0].Action != "SCMP_ACT_ALLOW" {
		t.Fatalf("the profile is not an allow list refusing the rest: %s, %d rules", prof.DefaultAction, len(prof.Syscalls))
	}
	for _, a := range prof.ArchMap {
		if len(a.SubArchitectures) > 0 {
			t.Errorf("%s lets %v through too: another ABI's calls bypass the names", a.Architecture, a.SubArchitectures)
		}
	}
	allowed := prof.Syscalls[0].Names
	for _, need := range []string{"pivot_root", "mount", "umount2", "unshare", "mount_setattr", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount",
		"landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self", "seccomp", "prctl", "capset", "setuid", "setgid", "clone", "clone3",
		"execve", "openat", "openat2", "read", "write", "epoll_pwait", "futex", "inotify_init1", "fanotify_init"} {
		if !slices.Contains(allowed, need) {
			t.Errorf("%s is refused: the executor needs it", need)
		}
	}
	for _, never := range []string{"add_key", "request_key", "keyctl", "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
		"reboot", "bpf", "perf_event_open", "open_by_handle_at", "userfaultfd", "swapon", "settimeofday", "clock_settime", "io_uring_setup",
		"process_vm_writev", "sethostname"} {
		if slices.Contains(allowed, never) {
			t.Errorf("%s is allowed", never)
		}
	}
	if !slices.IsSorted(allowed) || len(slices.Compact(slices.Clone(allowed))) != len(allowed) {
		t.Errorf("the names are not sorted and unique")
	}

	m := load(t)
	spec := m.statefulSet[0].Spec.Template.Spec
	var fs, init *corev1.Container
	for i := range spec.Containers {
		if spec.Containers[i].Name == "awcp-fs" {
			fs = &spec.Containers[i]
		}
	}
	for i := range spec.InitContainers {
		if spec.InitContainers[i].Name == "seccomp-profile" {
			init = &spec.InitContainers[i]
		}
	}
	if fs == nil || init == nil {
		t.Fatalf("the StatefulSet has no awcp-fs container or no seccomp-profile init container")
	}
	sp := fs.SecurityContext.SeccompProfile
	if sp == nil || sp.Type != corev1.SeccompProfileTypeLocalhost || sp.LocalhostProfile == nil || *sp.LocalhostProfile != "awcp/executor.json" {
		t.Errorf("awcp-fs's seccomp profile: %+v", sp)
	}
	var hostDir string
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostDir = v.HostPath.Path
		}
	}
	if hostDir != "/var/lib/kubelet/seccomp/awcp" {
		t.Errorf("the profile is installed in %q, not the kubelet's seccomp/awcp", hostDir)
	}
	if !strings.Contains(strings.Join(init.Command, " "), "/seccomp/executor.json") {
		t.Errorf("the init container does not install executor.json: %v", init.Command)
	}
}

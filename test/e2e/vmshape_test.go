package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestExecutorInALinuxVMOnTheLaptop: the shape a Mac user runs — the
// executor in a Linux VM on the laptop (Lima, colima, OrbStack, Docker
// Desktop's VM), a container with /dev/fuse, its port forwarded to the
// laptop's loopback; the delegator on the laptop. Here the "VM" is a
// network, mount and PID namespace of its own with only a loopback: the
// executor cannot open a connection to the delegator at all, and the
// delegator reaches it only through the forwarded port (the test's own
// forwarder, as Lima's). An export with the defaults finds that the
// executor cannot reach its SSH port, says so, and lends the directory
// over connections it opens itself through the forward; the agent edits
// the owner's file through the live mount; the delegation completes, and
// the executor leaves nothing mounted nor in its work root.
func TestExecutorInALinuxVMOnTheLaptop(t *testing.T) {
	parallel(t)
	if os.Geteuid() != 0 {
		t.Fatal("this test builds namespaces: run it as root (CI does)")
	}
	ns := fmt.Sprintf("awcpvm%d", os.Getpid()%100000)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	if out, err := exec.Command("ip", "-n", ns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up: %v\n%s", err, out)
	}

	// The VM: awcp-fs in the namespace, a mount and PID namespace of its
	// own besides (a container's), listening on the VM's loopback.
	dir := t.TempDir()
	work, state := filepath.Join(dir, "work"), filepath.Join(dir, "state")
	agent := `sed -i 's/status: draft/status: edited in the VM/' notes.txt && echo "edited notes.txt in the VM"`
	vm := exec.Command("ip", "netns", "exec", ns, "unshare", "--mount", "--pid", "--fork", "--mount-proc",
		filepath.Join(binDir, "awcp-fs"), "serve", "--state-dir", state, "--work-root", work, "--agent-cmd", agent,
		"--listen", "127.0.0.1:10200", "--plain-http", "--sandbox-allow", filepath.Dir(dir)+":rw")
	var vmLog lockedLog
	vm.Stderr = &vmLog
	vm.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // unshare and the executor it forks, signalled as one
	out, err := vm.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := vm.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-vm.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { vm.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			syscall.Kill(-vm.Process.Pid, syscall.SIGKILL)
			<-done
			t.Errorf("awcp-fs in the VM did not stop on SIGTERM")
		}
		if t.Failed() {
			t.Logf("awcp-fs in the VM:\n%s", vmLog.String())
		}
	})
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || !strings.Contains(line, "listening on") {
		t.Fatalf("awcp-fs in the VM did not start: %q %v\n%s", line, err, vmLog.String())
	}

	// The forward: the laptop's 127.0.0.1:PORT to the VM's 127.0.0.1:10200.
	fwd := forwardInto(t, ns, "127.0.0.1:10200")
	c := newCtl(t)
	ws := notesWorkspace(t)
	r := c.run("export", ws, "--peer", "http://"+fwd, "--prompt", "Mark the notes edited.")
	if r.code != 0 {
		t.Fatalf("export to the VM: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "transport auto: the executor cannot reach this machine's SSH port") {
		t.Errorf("export did not say why it lent over its own connections:\n%s", r.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "notes.txt")); !strings.Contains(string(b), "status: edited in the VM") {
		t.Errorf("the owner's notes after the VM's agent: %q", b)
	}
	d := c.only()
	if d.State != "completed" || !strings.Contains(d.Summary, "edited notes.txt in the VM") {
		t.Errorf("the delegation: %s, summary %q", d.State, d.Summary)
	}
	if !strings.Contains(c.run("status", d.ID).stdout, "(sshfs in reverse, rw)") {
		t.Errorf("status does not show the reverse live mount:\n%s", c.run("status", d.ID).stdout)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ents, _ := os.ReadDir(work)
		if len(ents) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the VM's work root is not empty: %v", ents)
			break
		}
	}
}

// forwardInto forwards a new port on this namespace's loopback to addr
// inside network namespace ns, as a VM's port forward does, until the test
// ends. Each connection is dialled from a thread moved into ns.
func forwardInto(t *testing.T, ns, addr string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				v, err := dialInNetns(ns, addr)
				if err != nil {
					t.Logf("forward: %v", err)
					return
				}
				defer v.Close()
				done := make(chan struct{})
				go func() { io.Copy(v, c); v.(*net.TCPConn).CloseWrite(); close(done) }()
				io.Copy(c, v)
				c.(*net.TCPConn).CloseWrite()
				<-done
			}()
		}
	}()
	return ln.Addr().String()
}

// dialInNetns dials addr from network namespace ns: the socket belongs to
// the namespace of the thread that makes it. The thread is returned to
// this namespace after, or never used again.
func dialInNetns(ns, addr string) (net.Conn, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	home, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, err
	}
	defer home.Close()
	there, err := os.Open("/run/netns/" + ns)
	if err != nil {
		return nil, err
	}
	defer there.Close()
	if err := unix.Setns(int(there.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, err
	}
	conn, derr := net.DialTimeout("tcp", addr, 5*time.Second)
	if err := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); err != nil {
		// Not back home: this thread must die with the goroutine.
		runtime.LockOSThread()
		if conn != nil {
			conn.Close()
		}
		return nil, err
	}
	return conn, derr
}

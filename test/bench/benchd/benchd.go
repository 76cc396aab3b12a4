// Package benchd runs a real `awcp-fs serve` and `awcp-ctl serve` under one
// directory for the benchmarks (test/bench/control, test/bench/ops), and
// reaches the executor as a user does: over TLS, its key pinned. A build
// from before the executor refused plain HTTP (it has no --peer-key) is
// reached as it was then, so that older commits can be measured beside
// this one.
package benchd

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Daemons is a pair of real daemons under one directory.
type Daemons struct {
	Bin   string // the directory of awcp-ctl and awcp-fs
	State string // awcp-ctl's state directory
	Peer  string // the executor's URL
	Key   string // its identity key, pinned; "" for a build with no --peer-key
	Exe   *exec.Cmd
	Ctl   *exec.Cmd
}

// Start runs awcp-fs serve (whose agent is agentCmd) with fsExtra flags
// and awcp-ctl serve with ctlExtra, their state in dir. Each daemon logs
// to dir/awcp-fs.log and dir/awcp-ctl.log.
func Start(bin, dir, agentCmd string, fsExtra, ctlExtra []string) (*Daemons, error) {
	d := &Daemons{Bin: bin, State: filepath.Join(dir, "ctl")}
	d.Exe = exec.Command(filepath.Join(bin, "awcp-fs"), append([]string{"serve", "--state-dir", filepath.Join(dir, "exec"),
		"--work-root", filepath.Join(dir, "work"), "--listen", "127.0.0.1:0", "--agent-cmd", agentCmd}, fsExtra...)...)
	out, err := d.Exe.StdoutPipe() // one line: where it listens
	if err != nil {
		return nil, err
	}
	if err := startLogged(d.Exe, filepath.Join(dir, "awcp-fs.log")); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		d.Stop()
		return nil, fmt.Errorf("awcp-fs did not start (see %s): %w", filepath.Join(dir, "awcp-fs.log"), err)
	}
	_, d.Peer, _ = strings.Cut(strings.TrimSpace(line), "listening on ")
	d.Peer, _, _ = strings.Cut(d.Peer, ",") // then its identity
	if Has(bin, "awcp-ctl", []string{"export", "--help"}, "--peer-key") {
		key, err := exec.Command(filepath.Join(bin, "awcp-fs"), "id", "--state-dir", filepath.Join(dir, "exec")).Output()
		if err != nil {
			d.Stop()
			return nil, fmt.Errorf("awcp-fs id: %w", err)
		}
		d.Key, _, _ = strings.Cut(string(key), "\n")
	}
	ctl, err := StartCtl(bin, dir, ctlExtra)
	if err != nil {
		d.Stop()
		return nil, err
	}
	d.Ctl = ctl.Ctl
	return d, nil
}

// StartCtl runs awcp-ctl serve alone with extra flags, its state in
// dir/ctl, logging to dir/awcp-ctl.log, and waits until it answers.
func StartCtl(bin, dir string, extra []string) (*Daemons, error) {
	d := &Daemons{Bin: bin, State: filepath.Join(dir, "ctl")}
	d.Ctl = exec.Command(filepath.Join(bin, "awcp-ctl"), append([]string{"serve", "--state-dir", d.State, "--ssh-listen", "127.0.0.1:0"}, extra...)...)
	log := filepath.Join(dir, "awcp-ctl.log")
	if err := startLogged(d.Ctl, log); err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(d.State, "ctl.sock")); err == nil {
			return d, nil
		}
		if time.Now().After(deadline) {
			d.Stop()
			return nil, fmt.Errorf("awcp-ctl serve did not start (see %s)", log)
		}
	}
}

// startLogged starts c with its stderr (its log) in the file log: what a
// bench that fails points to.
func startLogged(c *exec.Cmd, log string) error {
	if err := os.MkdirAll(filepath.Dir(log), 0o755); err != nil {
		return err
	}
	f, err := os.Create(log)
	if err != nil {
		return err
	}
	defer f.Close() // the child has its own descriptor
	c.Stderr = f
	c.Env = daemonEnv()
	return c.Start()
}

// daemonEnv is the daemons' environment: the bench's, without the
// GODEBUG the bench itself may run with (ops.sh turns off preemption by
// signal in its own process), so that the daemons measured run as they
// are shipped.
func daemonEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GODEBUG=") {
			env = append(env, kv)
		}
	}
	return env
}

// PeerArgs are the flags of an export to the executor.
func (d *Daemons) PeerArgs() []string {
	if d.Key == "" {
		return []string{"--peer", d.Peer}
	}
	return []string{"--peer", d.Peer, "--peer-key", d.Key}
}

// Run is an awcp-ctl command against the daemon; its output.
func (d *Daemons) Run(args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(d.Bin, "awcp-ctl"), append([]string{"--state-dir", d.State}, args...)...)
	cmd.Env = daemonEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("awcp-ctl %s: %w: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// Stop ends both daemons (SIGTERM, then SIGKILL after 10 s) and waits.
func (d *Daemons) Stop() {
	for _, c := range []*exec.Cmd{d.Ctl, d.Exe} {
		if c == nil || c.Process == nil {
			continue
		}
		c.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			c.Process.Kill()
			<-done
		}
	}
}

// Has reports whether `bin/prog args...` (a --help) mentions flag: what an
// older build lacks.
func Has(bin, prog string, args []string, flag string) bool {
	b, _ := exec.Command(filepath.Join(bin, prog), args...).CombinedOutput()
	return bytes.Contains(b, []byte(flag))
}

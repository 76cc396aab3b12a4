package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The soak: an agent works on the live mount while faults are injected
// into the delegator (frozen, killed and restarted, its connections reset),
// in forward and in reverse mode, and into the executor (killed and
// restarted). The agent writes files with fio (each block carries a
// crc32c) and keeps a tree of creates, appends with fsync, renames and
// deletes, journalling outside the mount each operation that succeeded.
// At the end fio verifies every file it finished on the delegator's own
// disk, the tree is what the journal says, nothing is left on the
// executor, and the executor's descriptors, goroutines and heap are back.
//
// AWCP_SOAK is how long each phase injects faults (default 20s; `make
// soak` runs 5m). AWCP_SOAK_DUMP=1 has a delegation that does not complete
// dump the agent's kernel stacks and both daemons' goroutines.

// soakAgentEnv, set to a journal's path, makes the test binary the soak's
// agent (TestMain).
const soakAgentEnv = "AWCP_SOAK_AGENT_JOURNAL"

// fioJob is the fio job that writes file name (with verify, it verifies
// it); the same job with --verify_only checks it again.
func fioJob(name string, extra ...string) []string {
	return append([]string{"--name=soak", "--filename=" + name, "--size=8M", "--bs=4k", "--rw=randwrite",
		"--ioengine=psync", "--verify=crc32c", "--verify_fatal=1", "--fsync_on_close=1", "--minimal"}, extra...)
}

const fioFileBytes = 8 << 20

// soakContent is what the journal's put and append of name at seq write:
// the checker makes the same bytes again from the journal line.
func soakContent(name string, seq, n int) []byte {
	unit := fmt.Sprintf("%s:%d;", name, seq)
	return bytes.Repeat([]byte(unit), n/len(unit)+1)[:n]
}

// soakAgent is the agent: it works in its cwd (the mount) until a file
// named stop appears there, then exits 0.
func soakAgent(journal string) int {
	j, err := os.OpenFile(journal, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer j.Close()
	record := func(format string, args ...any) {
		fmt.Fprintf(j, format+"\n", args...)
		j.Sync()
	}
	stopped := func() bool { _, err := os.Stat("stop"); return err == nil }
	fioDone := make(chan struct{})
	go func() {
		defer close(fioDone)
		for i := 0; !stopped(); i++ {
			name := "fio." + strconv.Itoa(i)
			if exec.Command("fio", fioJob(name)...).Run() == nil {
				record("fio %s", name)
			}
		}
	}()
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), 7))
	treeMade := false
	for seq := 0; !stopped(); seq++ {
		// Made until it is: a mkdir the fault cut off (EIO while the
		// executor restarts) left every later op with no tree to work in.
		if !treeMade {
			err := os.Mkdir("tree", 0o755)
			treeMade = err == nil || errors.Is(err, fs.ErrExist)
			if !treeMade {
				time.Sleep(20 * time.Millisecond)
				continue
			}
		}
		name := "f" + strconv.Itoa(rng.IntN(40))
		p := filepath.Join("tree", name)
		switch op := rng.IntN(10); {
		case op < 4: // create or rewrite, fsync, close: close(2) does not wait for the writes, fsync does
			n := 1 + rng.IntN(8192)
			record("? %s", name)
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
			if err != nil {
				continue
			}
			_, werr := f.Write(soakContent(name, seq, n))
			serr := f.Sync()
			if errors.Join(werr, serr, f.Close()) == nil {
				record("put %s %d %d", name, seq, n)
			}
		case op < 7: // append, fsync, close
			n := 1 + rng.IntN(2048)
			record("? %s", name)
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					record("absent %s", name)
				}
				continue
			}
			_, werr := f.Write(soakContent(name, seq, n))
			serr := f.Sync()
			cerr := f.Close()
			if werr == nil && serr == nil && cerr == nil {
				record("app %s %d %d", name, seq, n)
			}
		case op < 9: // rename over another
			to := "f" + strconv.Itoa(rng.IntN(40))
			if to == name {
				continue
			}
			record("? %s %s", name, to)
			switch err := os.Rename(p, filepath.Join("tree", to)); {
			case err == nil:
				record("mv %s %s", name, to)
			case errors.Is(err, fs.ErrNotExist):
				record("absent %s", name)
			}
		default:
			record("? %s", name)
			if err := os.Remove(p); err == nil || errors.Is(err, fs.ErrNotExist) {
				record("rm %s", name)
			}
		}
	}
	<-fioDone
	return 0
}

// journalLines is the journal's complete lines: the agent may be midway
// through writing the last.
func journalLines(journal string) []byte {
	b, _ := os.ReadFile(journal)
	return b[:bytes.LastIndexByte(b, '\n')+1]
}

// journalShowsWork reports whether the journal's complete lines show a
// fio file and a tree operation finished.
func journalShowsWork(journal string) bool {
	b := journalLines(journal)
	var fio, tree bool
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, "fio "):
			fio = true
		case strings.HasPrefix(l, "put "), strings.HasPrefix(l, "app "), strings.HasPrefix(l, "mv "), strings.HasPrefix(l, "rm "), strings.HasPrefix(l, "absent "):
			tree = true
		}
	}
	return fio && tree
}

// soakFile is what the journal says of one name: its bytes, absent, or
// unknown (an operation on it did not finish).
type soakFile struct {
	known bool
	data  []byte // nil: absent
}

// replayJournal reads a journal into the tree it describes, and the fio
// files finished. An append is certain only if the file was certain before
// its "?"; a rename moves what the name was before its "?".
func replayJournal(t *testing.T, journal string) (map[string]soakFile, []string) {
	t.Helper()
	b, err := os.ReadFile(journal)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]soakFile{}
	before := map[string]soakFile{} // each name's state at its last "?"
	get := func(name string) soakFile {
		if f, ok := files[name]; ok {
			return f
		}
		return soakFile{known: true}
	}
	var fios []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		num := func(i int) int { n, _ := strconv.Atoi(f[i]); return n }
		switch f[0] {
		case "?":
			for _, name := range f[1:] {
				before[name] = get(name)
				files[name] = soakFile{}
			}
		case "absent", "rm":
			files[f[1]] = soakFile{known: true}
		case "put":
			files[f[1]] = soakFile{known: true, data: soakContent(f[1], num(2), num(3))}
		case "app":
			prev := before[f[1]]
			if prev.known && prev.data != nil {
				files[f[1]] = soakFile{known: true, data: append(append([]byte(nil), prev.data...), soakContent(f[1], num(2), num(3))...)}
			}
		case "mv":
			files[f[2]] = before[f[1]]
			files[f[1]] = soakFile{known: true}
		case "fio":
			fios = append(fios, f[1])
		}
	}
	return files, fios
}

// checkSoak verifies, on the delegator's disk (ws), every fio file the
// journal says finished and every tree file it knows; it returns the
// bytes verified.
func checkSoak(t *testing.T, ws, journal string) int64 {
	t.Helper()
	files, fios := replayJournal(t, journal)
	var verified int64
	for _, name := range fios {
		cmd := exec.Command("fio", fioJob(name, "--verify_only")...)
		cmd.Dir = ws
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("fio --verify_only %s on the delegator's disk: %v\n%s", name, err, out)
			continue
		}
		verified += fioFileBytes
	}
	known := 0
	for name, want := range files {
		if !want.known {
			continue
		}
		known++
		got, err := os.ReadFile(filepath.Join(ws, "tree", name))
		switch {
		case want.data == nil && !errors.Is(err, fs.ErrNotExist):
			t.Errorf("tree/%s exists (%d bytes, %v); the journal says it was removed", name, len(got), err)
		case want.data != nil && err != nil:
			t.Errorf("tree/%s: %v; the journal says it holds %d bytes", name, err, len(want.data))
		case want.data != nil && !bytes.Equal(got, want.data):
			t.Errorf("tree/%s holds %d bytes, not the %d the journal says", name, len(got), len(want.data))
		default:
			verified += int64(len(got))
		}
	}
	if len(fios) == 0 || known == 0 {
		t.Errorf("the agent finished %d fio files and the journal knows %d tree files: it did not work", len(fios), known)
	}
	t.Logf("verified on the delegator's disk: %d fio files, %d tree files, %d bytes", len(fios), known, verified)
	return verified
}

func soakDuration(t *testing.T) time.Duration {
	if s := os.Getenv("AWCP_SOAK"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("AWCP_SOAK=%q: %v", s, err)
		}
		return d
	}
	return 20 * time.Second
}

// delegatorDaemon is an `awcp-ctl serve` the soak kills and restarts.
type delegatorDaemon struct {
	t       *testing.T
	c       *ctl
	sshAddr string
	cmd     *exec.Cmd
	log     bytes.Buffer
}

func (d *delegatorDaemon) start() {
	d.t.Helper()
	os.Remove(filepath.Join(d.c.state, "ctl.sock"))
	d.cmd = d.c.command("serve", "--state-dir", d.c.state, "--ssh-listen", d.sshAddr)
	d.cmd.Stderr = &d.log
	if err := d.cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(d.c.state, "ctl.sock")); err == nil {
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("awcp-ctl serve did not start:\n%s", d.log.String())
		}
	}
}

func (d *delegatorDaemon) stop() {
	if d.cmd.ProcessState != nil {
		return // stopped (or crashed) and not started again
	}
	d.cmd.Process.Signal(syscall.SIGCONT)
	d.cmd.Process.Signal(syscall.SIGTERM)
	d.cmd.Wait()
}

// soakFaults injects a fault into the delegator every 2–4 s until
// duration has passed, and returns how many of each.
func soakFaults(t *testing.T, d *delegatorDaemon, resetPort string, duration time.Duration) map[string]int {
	t.Helper()
	faults := map[string]int{}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for end := time.Now().Add(duration); time.Now().Before(end); {
		time.Sleep(2*time.Second + time.Duration(rng.IntN(2000))*time.Millisecond)
		switch rng.IntN(3) {
		case 0:
			d.cmd.Process.Signal(syscall.SIGSTOP)
			time.Sleep(time.Duration(2000+rng.IntN(2000)) * time.Millisecond)
			d.cmd.Process.Signal(syscall.SIGCONT)
			faults["frozen"]++
		case 1:
			d.cmd.Process.Kill()
			d.cmd.Wait()
			time.Sleep(300 * time.Millisecond)
			d.start()
			faults["killed and restarted"]++
		case 2:
			// Both ends of every connection on the port reset.
			exec.Command("ss", "-K", "sport", "=", ":"+resetPort).Run()
			exec.Command("ss", "-K", "dport", "=", ":"+resetPort).Run()
			faults["connections reset"]++
		}
	}
	return faults
}

// executorFootprint is what the soak expects back after each delegation.
type executorFootprint struct{ fds, goroutines, heapMiB float64 }

func footprint(t *testing.T, metricsAddr string) executorFootprint {
	s := scrape(t, metricsAddr)
	return executorFootprint{fds: sum(s, "process_open_fds"), goroutines: sum(s, "go_goroutines"),
		heapMiB: sum(s, "go_memstats_heap_inuse_bytes") / (1 << 20)}
}

func TestSoak(t *testing.T) {
	slow(t)
	parallel(t) // its faults are to its own daemons, its footprint its own executor's: others' load slows it, and must not break it
	if _, err := exec.LookPath("fio"); err != nil {
		t.Fatal("the soak needs fio (.ci/run installs it)")
	}
	duration := soakDuration(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	journalDir := t.TempDir()
	metricsAddr := freeAddr(t)
	x := startExecutor(t, soakAgentEnv+`=`+journalDir+`/"$AWCP_DELEGATION_ID" exec `+self,
		"--metrics-listen", metricsAddr)
	// The baseline with the scrape's own connection open, as later.
	footprint(t, metricsAddr)
	time.Sleep(500 * time.Millisecond)
	baseline := footprint(t, metricsAddr)
	var total struct {
		faults   int
		verified int64
	}

	for _, mode := range []string{"sshfs", "sshfs-reverse"} {
		t.Run(mode, func(t *testing.T) {
			c := newCtl(t)
			d := &delegatorDaemon{t: t, c: c, sshAddr: freeAddr(t)}
			d.start()
			defer d.stop()
			ws := t.TempDir()
			r := c.run("export", ws, "--peer", x.url, "--transport", mode, "--prompt", "soak", "--background")
			if r.code != 0 {
				t.Fatalf("export: %d %s", r.code, r.stderr)
			}
			id := strings.TrimSpace(r.stdout)
			journal := filepath.Join(journalDir, id)
			waitFile(t, journal)
			resetPort := d.sshAddr[strings.LastIndexByte(d.sshAddr, ':')+1:]
			if mode == "sshfs-reverse" {
				resetPort = x.url[strings.LastIndexByte(x.url, ':')+1:]
			}
			faults := soakFaults(t, d, resetPort, duration)
			os.WriteFile(filepath.Join(ws, "stop"), nil, 0o644)
			out := c.run("output", id, "--block", "--timeout", "120s")
			if out.code != 0 {
				if os.Getenv("AWCP_SOAK_DUMP") != "" {
					stacks, _ := exec.Command("sh", "-c", "for p in $(pgrep -f 'fio --name') $(pgrep -f "+self+"); do echo == $p; cat /proc/$p/cmdline; echo; for t in /proc/$p/task/*; do cat $t/stack; done; done").CombinedOutput()
					t.Logf("stacks:\n%s", stacks)
					d.cmd.Process.Signal(syscall.SIGQUIT)
					d.cmd.Wait()
					t.Logf("faults %v", faults)
					dumpGoroutines(x)
				}
				t.Fatalf("the delegation did not complete after the faults: %d\n%s%s\ndelegator log:\n%s", out.code, out.stdout, out.stderr, d.log.String())
			}
			verified := checkSoak(t, ws, journal)
			n := 0
			for _, k := range faults {
				n += k
			}
			t.Logf("%s: %d faults injected into the delegator %v; %d bytes verified, 0 lost", mode, n, faults, verified)
			total.faults += n
			total.verified += verified
			noMountsLeft(t, x)
			waitWorkRootEmpty(t, x)
			storesAgree(t, c, x)
			// The delegator's kept-alive connections to the executor go
			// with it.
			d.stop()
			backToBaseline(t, metricsAddr, baseline)
		})
	}

	t.Run("executor killed", func(t *testing.T) {
		c := newCtl(t)
		ws := t.TempDir()
		exp := c.start("export", ws, "--peer", x.url, "--prompt", "soak", "--ssh-listen", "127.0.0.1:0")
		journal := filepath.Join(journalDir, c.waitState("", "running").ID)
		waitFile(t, journal)
		// Killed once the agent has shown it works — a fio file and a
		// tree operation finished — not after a fixed time: fio's
		// streams and the tree's fsyncs share the mount, and a slow
		// machine may finish neither in the first seconds.
		start := time.Now()
		time.Sleep(min(duration/2, 10*time.Second))
		for !journalShowsWork(journal) {
			if time.Since(start) > 90*time.Second {
				b, _ := os.ReadFile(journal)
				t.Fatalf("the agent finished no fio file or no tree operation in 90 s; its journal:\n%s", b)
			}
			time.Sleep(200 * time.Millisecond)
		}
		// The journal as it stood at the crash is what the delegator's
		// disk must show: an agent that outlives the executor for a
		// moment marks names in flight ("?") with operations that can no
		// longer reach the disk, and would leave nothing known.
		atCrash := journalLines(journal)
		x.crash(t)
		exp.Wait()
		if exp.ProcessState.ExitCode() != 1 || !strings.Contains(exp.stderr.String(), "error TASK_FAILED") ||
			!strings.Contains(exp.stderr.String(), "restarted") {
			t.Fatalf("after the executor's crash: exit %d\n%s", exp.ProcessState.ExitCode(), exp.stderr.String())
		}
		snapshot := filepath.Join(t.TempDir(), "journal-at-crash")
		if err := os.WriteFile(snapshot, atCrash, 0o644); err != nil {
			t.Fatal(err)
		}
		verified := checkSoak(t, ws, snapshot)
		total.faults++
		total.verified += verified
		noMountsLeft(t, x)
		waitWorkRootEmpty(t, x)
		storesAgree(t, c, x)
	})
	t.Logf("soak: %d faults injected, %d bytes verified on the delegator's disk, 0 bytes lost", total.faults, total.verified)
}

// backToBaseline waits up to 10 s for the executor's descriptors and
// goroutines to be back where they were before any delegation, and its
// heap within 64 MiB of it: the sample is not taken after a collection,
// so it counts garbage not yet collected.
func backToBaseline(t *testing.T, metricsAddr string, base executorFootprint) {
	t.Helper()
	var now executorFootprint
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		now = footprint(t, metricsAddr)
		if now.fds <= base.fds && now.goroutines <= base.goroutines+1 && now.heapMiB <= base.heapMiB+64 {
			t.Logf("executor: %v descriptors, %v goroutines, %.1f MiB heap (before: %v, %v, %.1f)", now.fds, now.goroutines, now.heapMiB, base.fds, base.goroutines, base.heapMiB)
			return
		}
	}
	t.Errorf("the executor did not come back: %v descriptors, %v goroutines, %.1f MiB heap (before: %v, %v, %.1f)",
		now.fds, now.goroutines, now.heapMiB, base.fds, base.goroutines, base.heapMiB)
}

// Command ops measures what one filesystem request costs each awcp daemon
// in CPU, through a real live-mount delegation (awcp-ctl serve, the
// delegator's SSH/SFTP server; awcp-fs serve, the executor's FUSE client),
// for several builds side by side in one run, interleaved: the rounds go
// through the builds in turn (in reverse every other round), so that a
// machine's changing load falls on all of them alike.
//
// The requests, each -n times a round on fresh names:
//
//	create       open(O_CREAT|O_EXCL|O_WRONLY) and close
//	write_close  open(O_WRONLY|O_TRUNC), write 4 KiB, close
//	rename       rename to a new name
//	unlink       unlink
//	stat         stat of a file made on the delegator's side (a LOOKUP)
//	open         open, read 1 KiB, close of such a file, looked up before
//
// A daemon's CPU is the sum of its threads' run time (schedstat, in ns),
// read once it is idle again after the batch (writes and closes go out
// behind the caller), less its idle rate over the same time. Prints the
// medians over the rounds, µs per request, per daemon and in all, with
// each build's total against the first one's, and writes them as TSV to
// -out.
//
//	go run ./test/bench/ops -bin now=./bin -bin base=/tmp/base/bin -n 2000 -rounds 5
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/awcp/awcp/test/bench/benchd"
)

type binFlag []string

func (b *binFlag) String() string     { return strings.Join(*b, ",") }
func (b *binFlag) Set(v string) error { *b = append(*b, v); return nil }

func main() {
	var bins binFlag
	flag.Var(&bins, "bin", "NAME=DIR: a build's awcp-ctl and awcp-fs (repeatable; the first is what the others are compared with)")
	n := flag.Int("n", 2000, "requests of each kind a round")
	rounds := flag.Int("rounds", 5, "rounds, interleaved over the builds")
	out := flag.String("out", "", "TSV of the medians (none if empty)")
	flag.Parse()
	if len(bins) == 0 {
		bins = binFlag{"now=bin"}
	}
	if err := run(bins, *n, *rounds, *out); err != nil {
		fmt.Fprintln(os.Stderr, "ops:", err)
		os.Exit(1)
	}
}

// ops are the requests measured, in the order a round runs them: each
// works on what the one before left.
var ops = []string{"create", "write_close", "rename", "unlink", "stat", "open"}

// perDir is how many names the batches make in one directory.
const perDir = 100

// sample is one batch's cost: per request, in µs.
type sample struct{ ctl, exec, wall float64 }

func run(bins []string, n, rounds int, out string) error {
	var ds []*delegation
	defer func() {
		for _, d := range ds {
			d.stop()
		}
	}()
	for _, b := range bins {
		name, dir, ok := strings.Cut(b, "=")
		if !ok {
			name, dir = filepath.Base(b), b
		}
		d, err := start(name, dir)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		ds = append(ds, d)
	}
	samples := map[string]map[string][]sample{} // build, op
	for _, d := range ds {
		samples[d.name] = map[string][]sample{}
	}
	for r := range rounds {
		order := slices.Clone(ds)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, d := range order {
			fmt.Fprintf(os.Stderr, "ops: round %d %s\n", r+1, d.name)
			got, err := d.round(r, n)
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", d.name, r+1, err)
			}
			for op, s := range got {
				samples[d.name][op] = append(samples[d.name][op], s)
			}
		}
	}
	report(ds, samples, rounds, n, out)
	return nil
}

// delegation is one build's delegation of a scratch directory, mounted.
type delegation struct {
	*benchd.Daemons
	name, dir string
	id, mnt   string
	ctlIdle   float64 // ns of CPU a second while idle
	execIdle  float64
}

func start(name, bin string) (*delegation, error) {
	bin, err := filepath.Abs(bin)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "awcp-ops-"+name+".")
	if err != nil {
		return nil, err
	}
	d := &delegation{name: name, dir: dir}
	for _, sub := range []string{"src", "run", "work"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o755); err != nil {
			return d, err
		}
	}
	fsExtra := []string{"--max-ttl", "24h"}
	if benchd.Has(bin, "awcp-fs", []string{"serve", "--help"}, "--sandbox-allow") {
		fsExtra = append(fsExtra, "--sandbox-allow", filepath.Join(dir, "run")+":rw")
	}
	agent := fmt.Sprintf(`echo "$AWCP_WORKDIR" > '%s/run/workdir'; exec sleep 100000`, dir)
	if d.Daemons, err = benchd.Start(bin, dir, agent, fsExtra, nil); err != nil {
		return d, err
	}
	id, err := d.Run(append(append([]string{"export", filepath.Join(dir, "src")}, d.PeerArgs()...),
		"--transport", "sshfs", "--ttl", "12h", "--background", "--prompt", "ops bench: the agent waits")...)
	if err != nil {
		return d, err
	}
	d.id = strings.TrimSpace(string(id))
	if err := waitFor(30*time.Second, func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "run", "workdir"))
		d.mnt = strings.TrimSpace(string(b))
		return d.mnt != ""
	}); err != nil {
		return d, fmt.Errorf("the delegation did not start: %w (the daemons' logs are in %s)", err, dir)
	}
	// Idle CPU: timers, keep-alives, the watch.
	time.Sleep(time.Second)
	c0, e0 := cpuNS(d.Ctl.Process.Pid), cpuNS(d.Exe.Process.Pid)
	time.Sleep(2 * time.Second)
	d.ctlIdle = float64(cpuNS(d.Ctl.Process.Pid)-c0) / 2
	d.execIdle = float64(cpuNS(d.Exe.Process.Pid)-e0) / 2
	return d, nil
}

// round runs each request n times on fresh names and returns its cost.
func (d *delegation) round(r, n int) (map[string]sample, error) {
	// The delegator-side files the stat and open batches reach, made
	// before anything is measured; the watch's news of them settles first.
	src := filepath.Join(d.dir, "src", fmt.Sprint("r", r))
	if err := os.Mkdir(src, 0o755); err != nil {
		return nil, err
	}
	body := bytes.Repeat([]byte("x"), 1024)
	for i := range n {
		for _, p := range []string{"s", "o"} {
			if err := os.WriteFile(filepath.Join(src, fmt.Sprint(p, i)), body, 0o644); err != nil {
				return nil, err
			}
		}
	}
	// A hundred names a directory: a create in a large directory costs
	// the delegator's file system more with each name (ext4 here: 50 µs
	// at 100 names, 280 at 4,000), which would hide what awcp costs.
	mine := filepath.Join(d.mnt, fmt.Sprint("m", r))
	for i := 0; i < n; i += perDir {
		if err := os.MkdirAll(filepath.Join(mine, fmt.Sprint("d", i/perDir)), 0o755); err != nil {
			return nil, err
		}
	}
	theirs := filepath.Join(d.mnt, fmt.Sprint("r", r))
	if err := waitFor(10*time.Second, func() bool { _, err := os.Stat(filepath.Join(theirs, fmt.Sprint("o", n-1))); return err == nil }); err != nil {
		return nil, fmt.Errorf("the owner's files never showed: %w", err)
	}
	time.Sleep(time.Second)
	data := make([]byte, 4096)
	buf := make([]byte, 1024)
	f := func(i int) string { return filepath.Join(mine, fmt.Sprint("d", i/perDir), fmt.Sprint("f", i)) }
	g := func(i int) string { return filepath.Join(mine, fmt.Sprint("d", i/perDir), fmt.Sprint("g", i)) }
	batch := map[string]func(i int) error{
		"create": func(i int) error {
			fd, err := syscall.Open(f(i), syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY|syscall.O_CLOEXEC, 0o644)
			if err != nil {
				return err
			}
			return syscall.Close(fd)
		},
		"write_close": func(i int) error {
			fd, err := syscall.Open(f(i), syscall.O_WRONLY|syscall.O_TRUNC|syscall.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			if _, err := syscall.Write(fd, data); err != nil {
				syscall.Close(fd)
				return err
			}
			return syscall.Close(fd)
		},
		"rename": func(i int) error { return syscall.Rename(f(i), g(i)) },
		"unlink": func(i int) error { return syscall.Unlink(g(i)) },
		"stat": func(i int) error {
			var st syscall.Stat_t
			return syscall.Stat(filepath.Join(theirs, fmt.Sprint("s", i)), &st)
		},
		"open": func(i int) error {
			fd, err := syscall.Open(filepath.Join(theirs, fmt.Sprint("o", i)), syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			if _, err := syscall.Read(fd, buf); err != nil {
				syscall.Close(fd)
				return err
			}
			return syscall.Close(fd)
		},
	}
	// The open batch's files looked up first, unmeasured: open is open.
	for i := range n {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(theirs, fmt.Sprint("o", i)), &st); err != nil {
			return nil, err
		}
	}
	got := map[string]sample{}
	for _, op := range ops {
		do := batch[op]
		c0, e0 := cpuNS(d.Ctl.Process.Pid), cpuNS(d.Exe.Process.Pid)
		t0 := time.Now()
		for i := range n {
			if err := do(i); err != nil {
				return nil, fmt.Errorf("%s %d: %w", op, i, err)
			}
		}
		wall := time.Since(t0)
		time.Sleep(300 * time.Millisecond) // what went out behind the caller, answered
		idle := time.Since(t0).Seconds()
		c := float64(cpuNS(d.Ctl.Process.Pid)-c0) - d.ctlIdle*idle
		e := float64(cpuNS(d.Exe.Process.Pid)-e0) - d.execIdle*idle
		got[op] = sample{ctl: max(c, 0) / float64(n) / 1e3, exec: max(e, 0) / float64(n) / 1e3,
			wall: float64(wall.Nanoseconds()) / float64(n) / 1e3}
	}
	return got, nil
}

func (d *delegation) stop() {
	if d.Daemons != nil {
		if d.id != "" {
			d.Run("cancel", d.id)
		}
		d.Stop()
	}
	if mounted(d.dir) {
		fmt.Fprintf(os.Stderr, "ops: a mount is left under %s; not removing it\n", d.dir)
		return
	}
	os.RemoveAll(d.dir)
}

func report(ds []*delegation, samples map[string]map[string][]sample, rounds, n int, out string) {
	var tsv strings.Builder
	tsv.WriteString("op\tbuild\tdelegator_us\texecutor_us\ttotal_us\twall_us\ttotal_vs_" + ds[0].name + "\n")
	fmt.Printf("\n== CPU per request (µs, medians of %d interleaved rounds of %d; delegator = awcp-ctl serve, executor = awcp-fs serve)\n", rounds, n)
	fmt.Printf("%-12s %-8s %10s %10s %10s %10s %8s\n", "op", "build", "delegator", "executor", "total", "wall", "x "+ds[0].name)
	for _, op := range ops {
		var first float64
		for i, d := range ds {
			ss := samples[d.name][op]
			c := median(ss, func(s sample) float64 { return s.ctl })
			e := median(ss, func(s sample) float64 { return s.exec })
			t := median(ss, func(s sample) float64 { return s.ctl + s.exec })
			w := median(ss, func(s sample) float64 { return s.wall })
			if i == 0 {
				first = t
			}
			ratio := "-"
			if first > 0 {
				ratio = fmt.Sprintf("%.2f", t/first)
			}
			fmt.Printf("%-12s %-8s %10.1f %10.1f %10.1f %10.1f %8s\n", op, d.name, c, e, t, w, ratio)
			fmt.Fprintf(&tsv, "%s\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t%s\n", op, d.name, c, e, t, w, ratio)
		}
	}
	if out != "" {
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err == nil {
			err = os.WriteFile(out, []byte(tsv.String()), 0o644)
		}
		fmt.Println("TSV:", out)
	}
}

func median(ss []sample, f func(sample) float64) float64 {
	v := make([]float64, len(ss))
	for i, s := range ss {
		v[i] = f(s)
	}
	slices.Sort(v)
	if len(v) == 0 {
		return 0
	}
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// cpuNS is the run time of pid's threads, in ns (their schedstat): finer
// than the clock ticks of /proc/PID/stat. A Go program's threads live as
// long as it does, so none is lost to an exit.
func cpuNS(pid int) int64 {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	var sum int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) > 0 {
			v, _ := strconv.ParseInt(f[0], 10, 64)
			sum += v
		}
	}
	return sum
}

func waitFor(limit time.Duration, ok func() bool) error {
	for end := time.Now().Add(limit); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			return errors.New("timed out after " + limit.String())
		}
	}
	return nil
}

func mounted(under string) bool {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	return bytes.Contains(b, []byte(" "+under+"/"))
}

// Package agent runs the executor's configured agent command on a task, as
// the agent-command contract of DESIGN.md says: /bin/sh -c "$AGENT_CMD" in
// the work directory, the task in the environment and on stdin (never on the
// command line), stdout lines as progress, the whole process group killed
// when the run's context ends.
package agent

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/awcp/awcp/internal/tail"
)

// Task is what the agent is asked to do.
type Task struct {
	DelegationID string
	Prompt       string
	Description  string
	WorkDir      string
	AccessMode   string
	// SummaryFile is where the agent may write its summary; it must be
	// outside WorkDir so it is not part of the result.
	SummaryFile string
	// Env is added to the environment of the agent and of every command
	// it has run for it (ACP terminals), after what they keep of the
	// daemon's (BaseEnv): what the executor hands on, such as the call
	// chain, and what the operator names (--agent-env).
	Env []string
	// Confine, if set, confines a command of the task's — the agent, and
	// every command it has run for it (ACP terminals) — before it starts
	// (internal/sandbox).
	Confine func(*exec.Cmd) error
	// Owner, if set, is the user the agent runs as (the sandbox's user
	// of its own): what the executor writes into the work dir on its
	// behalf (ACP's fs/write_text_file) is made its, as if it had.
	Owner *Owner
}

// Owner is a local uid and gid.
type Owner struct{ UID, GID int }

// Options configures a run.
type Options struct {
	// Command is the shell command line to run. Required.
	Command string
	// Started is called with the pid (= process group id) once the agent
	// runs, before any output is read. May be nil.
	Started func(pid int)
	// Line is called for each line of stdout, in order, from one goroutine.
	// Lines longer than MaxLine are cut. May be nil.
	Line func(line string)
	// KillGrace is how long the group has between SIGTERM and SIGKILL once
	// the context ends. Default 2s.
	KillGrace time.Duration
	// MaxLine bounds a progress line. Default 4 KiB.
	MaxLine int
}

// Result is how a run ended.
type Result struct {
	ExitCode   int    // -1 if killed by a signal
	Summary    string // $AWCP_SUMMARY_FILE if written, else the stdout tail
	StderrTail string
	// Failed, if set, says why the task failed (TASK_FAILED); else it is done.
	Failed string
}

// ErrKilled is returned when the run's context ended the agent.
var ErrKilled = errors.New("agent killed")

const (
	stdoutTailLines = 20
	stderrTailBytes = 4 << 10
	summaryMaxBytes = 64 << 10
)

// Command is the agent's process for task t, not yet started: command run
// by /bin/sh in the work dir, in a process group of its own, with the task
// in its environment (after BaseEnv, then t.Env) — never in a command line.
//
// The shell enters the work dir itself: the child must not chdir into it
// between fork and exec. When the work dir is a FUSE mount served by this
// very process, that chdir waits for our FUSE server while our forking
// thread waits for the child, and a garbage collection that stops the
// world in between deadlocks the daemon (go-fuse's "forking with the cwd in
// your own mount").
func Command(t Task, command string) *exec.Cmd {
	cmd := exec.Command("/bin/sh", "-c", `cd -- "$AWCP_WORKDIR" || exit 125; exec /bin/sh -c "$AWCP_AGENT_CMD"`)
	cmd.Dir = "/"
	cmd.Env = append(BaseEnv(),
		"AWCP_AGENT_CMD="+command,
		"AWCP_PROMPT="+t.Prompt,
		"AWCP_DESCRIPTION="+t.Description,
		"AWCP_DELEGATION_ID="+t.DelegationID,
		"AWCP_WORKDIR="+t.WorkDir,
		"AWCP_ACCESS_MODE="+t.AccessMode,
		"AWCP_SUMMARY_FILE="+t.SummaryFile,
	)
	cmd.Env = append(cmd.Env, t.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// Run runs the agent to completion, or until ctx ends; then the whole
// process group is killed and Run returns an error wrapping ErrKilled and
// ctx's cause. A non-zero exit is not an error: see Result.ExitCode.
func Run(ctx context.Context, t Task, opts Options) (*Result, error) {
	if opts.Command == "" {
		return nil, errors.New("agent command is empty")
	}
	if opts.KillGrace <= 0 {
		opts.KillGrace = 2 * time.Second
	}
	if opts.MaxLine <= 0 {
		opts.MaxLine = 4 << 10
	}
	if t.SummaryFile != "" {
		os.Remove(t.SummaryFile)
	}
	proc, err := Start(t, opts.Command, strings.NewReader(t.Prompt))
	if err != nil {
		return nil, err
	}
	defer proc.Stdout.Close()
	defer proc.Stderr.Close()
	if opts.Started != nil {
		opts.Started(proc.Pgid)
	}
	stderr := &tail.Buffer{Max: stderrTailBytes}

	// The killer owns the group's end: on ctx done it stops the group. It
	// stops when the run is over.
	over := make(chan struct{})
	var killed bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-over:
			return
		case <-ctx.Done():
		}
		killed = true
		proc.Stop(opts.KillGrace)
	}()

	var tail []string
	wg.Add(1)
	go func() {
		defer wg.Done()
		tail = readLines(proc.Stdout, opts.MaxLine, opts.Line)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		io.Copy(stderr, proc.Stderr)
	}()
	<-proc.Exited()
	close(over)
	// Whatever the agent left running in its group goes with it; that also
	// closes the last writers of stdout, so the reader ends.
	proc.KillRest()
	wg.Wait()

	if killed {
		return nil, fmt.Errorf("%w: %w", ErrKilled, context.Cause(ctx))
	}
	res := &Result{ExitCode: proc.ExitCode(), StderrTail: strings.TrimSpace(stderr.String())}
	var exitErr *exec.ExitError
	if waitErr := proc.WaitErr(); waitErr != nil && !errors.As(waitErr, &exitErr) {
		return nil, fmt.Errorf("wait for agent: %w", waitErr)
	}
	res.Summary = readSummary(t.SummaryFile)
	if res.Summary == "" {
		res.Summary = strings.Join(tail, "\n")
	}
	return res, nil
}

// readLines feeds each stdout line to fn and returns the last lines.
func readLines(r io.Reader, maxLine int, fn func(string)) []string {
	br := bufio.NewReaderSize(r, 64<<10)
	var tail []string
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			line = strings.TrimRight(line, "\r\n")
			if len(line) > maxLine {
				line = line[:maxLine]
			}
			if fn != nil {
				fn(line)
			}
			tail = append(tail, line)
			if len(tail) > stdoutTailLines {
				tail = tail[1:]
			}
		}
		if err != nil {
			return tail
		}
	}
}

func readSummary(path string) string {
	if path == "" {
		return ""
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, summaryMaxBytes))
	return strings.TrimSpace(string(b))
}

// GroupAlive reports whether process group pgid has a member that is not a
// zombie. An agent's leader may be gone while children it started live on,
// and orphans that died may wait for a reaper that never comes (PID 1 in a
// container), so neither kill(-pgid, 0) nor the leader's pid tells.
func GroupAlive(pgid int) bool {
	if pgid <= 1 {
		return false
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return syscall.Kill(-pgid, 0) == nil
	}
	want := strconv.Itoa(pgid)
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after "(comm)": state, ppid, pgrp, ...
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 2 && f[0] != "Z" && f[2] == want {
			return true
		}
	}
	return false
}

// StopGroup ends the process group of a leader that has not exited (exited
// closes when it has): SIGTERM, then SIGKILL after grace, to the whole
// group either way. It returns once the leader exited.
func StopGroup(pgid int, exited <-chan struct{}, grace time.Duration) {
	select {
	case <-exited:
	default:
		syscall.Kill(-pgid, syscall.SIGTERM)
		t := time.NewTimer(grace)
		select {
		case <-exited:
		case <-t.C:
		}
		t.Stop()
	}
	syscall.Kill(-pgid, syscall.SIGKILL)
	<-exited
}

// KillGroup kills what is left of process group pgid.
func KillGroup(pgid int) {
	if GroupAlive(pgid) {
		syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

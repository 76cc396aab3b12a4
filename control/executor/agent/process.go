package agent

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Process is an agent's process: Command started in a process group of
// its own, with pipes of our own rather than exec's (a child the agent
// leaves behind may hold them open after the agent itself has exited, and
// must not keep us waiting). It is the one way both workers, the shell
// contract's and ACP's, start and stop an agent.
type Process struct {
	// Stdin is the write end of the agent's stdin, nil when Start was
	// given the input.
	Stdin *os.File
	// Stdout and Stderr are the read ends of its output; the caller reads
	// them and closes them.
	Stdout, Stderr *os.File
	// Pgid is the agent's process group (its pid).
	Pgid int

	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error // set before exited is closed
}

// Start starts Command(t, command) with stdin, or with a pipe to
// write to (Process.Stdin) if stdin is nil. The caller must wait for
// Exited, or Stop it.
func Start(t Task, command string, stdin io.Reader) (*Process, error) {
	cmd := Command(t, command)
	if t.Confine != nil {
		if err := t.Confine(cmd); err != nil {
			return nil, fmt.Errorf("confine agent: %w", err)
		}
	}
	p := &Process{cmd: cmd, exited: make(chan struct{})}
	var opened []*os.File // every pipe end, closed if the start fails
	pipe := func() (r, w *os.File, err error) {
		if r, w, err = os.Pipe(); err == nil {
			opened = append(opened, r, w)
		}
		return r, w, err
	}
	fail := func(err error) (*Process, error) {
		for _, f := range opened {
			f.Close()
		}
		return nil, err
	}
	var childIn *os.File
	if stdin == nil {
		r, w, err := pipe()
		if err != nil {
			return fail(err)
		}
		childIn, p.Stdin = r, w
		cmd.Stdin = r
	} else {
		cmd.Stdin = stdin
	}
	var outW, errW *os.File
	var err error
	if p.Stdout, outW, err = pipe(); err != nil {
		return fail(err)
	}
	if p.Stderr, errW, err = pipe(); err != nil {
		return fail(err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	if err := cmd.Start(); err != nil {
		return fail(fmt.Errorf("start agent: %w", err))
	}
	// The child has its copies; ours of its ends must go, or its output
	// would never end.
	for _, f := range []*os.File{childIn, outW, errW} {
		if f != nil {
			f.Close()
		}
	}
	p.Pgid = cmd.Process.Pid
	go func() { p.waitErr = cmd.Wait(); close(p.exited) }()
	return p, nil
}

// Exited is closed once the agent (the group's leader) has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Stop ends the agent's whole process group: SIGTERM, then SIGKILL after
// grace, and SIGKILL to what is left either way. It returns once the
// agent has exited.
func (p *Process) Stop(grace time.Duration) { StopGroup(p.Pgid, p.exited, grace) }

// KillRest kills what the agent left running in its group after it
// exited.
func (p *Process) KillRest() { syscall.Kill(-p.Pgid, syscall.SIGKILL) }

// ExitCode is the agent's exit code, once Exited is closed; -1 if a signal
// ended it.
func (p *Process) ExitCode() int { return p.cmd.ProcessState.ExitCode() }

// WaitErr is what waiting for the agent reported, once Exited is closed:
// nil, an *exec.ExitError, or why it could not be waited for.
func (p *Process) WaitErr() error { return p.waitErr }

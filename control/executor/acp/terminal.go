package acp

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/awcp/awcp/control/executor/agent"
	"github.com/awcp/awcp/internal/tail"
)

// defaultOutputLimit bounds a terminal's kept output when the agent sets
// no outputByteLimit.
const defaultOutputLimit = 16 << 20

// terminal is a command the agent runs through terminal/create.
type terminal struct {
	cmd  *exec.Cmd
	out  *tail.Buffer
	done chan struct{} // closed once the command exited and status is set
	// status is how the command ended; written before done is closed.
	status acpsdk.TerminalExitStatus
}

func (t *terminal) kill() {
	select {
	case <-t.done:
	default:
		syscall.Kill(-t.cmd.Process.Pid, syscall.SIGKILL)
	}
}

func (t *terminal) wait() { <-t.done }

func (c *client) CreateTerminal(_ context.Context, p acpsdk.CreateTerminalRequest) (acpsdk.CreateTerminalResponse, error) {
	if !c.allowExec {
		return acpsdk.CreateTerminalResponse{}, acpsdk.NewInvalidRequest(map[string]any{
			"error": "running commands is not allowed here (sandboxProfile.allowExec is false)"})
	}
	if p.Command == "" {
		return acpsdk.CreateTerminalResponse{}, acpsdk.NewInvalidParams(map[string]any{"error": "command is empty"})
	}
	cwd := c.workDir
	if p.Cwd != nil && *p.Cwd != "" {
		rel, err := c.path(*p.Cwd)
		if err != nil {
			return acpsdk.CreateTerminalResponse{}, err
		}
		// Through the root, so that a symlinked directory leading out of
		// the work dir is refused too.
		if info, err := c.root.Stat(rel); err != nil || !info.IsDir() {
			if err == nil {
				err = fmt.Errorf("not a directory")
			}
			return acpsdk.CreateTerminalResponse{}, fileError(*p.Cwd, err)
		}
		cwd = filepath.Join(c.workDir, rel)
	}
	limit := defaultOutputLimit
	if p.OutputByteLimit != nil {
		if *p.OutputByteLimit < 0 {
			return acpsdk.CreateTerminalResponse{}, acpsdk.NewInvalidParams(map[string]any{"error": "outputByteLimit is negative"})
		}
		limit = min(*p.OutputByteLimit, defaultOutputLimit)
	}
	// The argv runs as given — the shell only enters the directory and
	// execs it, never parsing the command. It enters the directory after
	// fork, for the reason agent.Command gives.
	cmd := exec.Command("/bin/sh", append([]string{"-c", `cd -- "$0" || exit 125; exec "$@"`, cwd, p.Command}, p.Args...)...)
	cmd.Dir = "/"
	cmd.Env = append(agent.BaseEnv(), c.task.Env...)
	for _, e := range p.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	out := &tail.Buffer{Max: limit}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A child left behind holding the output open must not keep the exit
	// from being seen.
	cmd.WaitDelay = time.Second
	if c.task.Confine != nil {
		if err := c.task.Confine(cmd); err != nil {
			return acpsdk.CreateTerminalResponse{}, acpsdk.NewInternalError(map[string]any{"error": err.Error()})
		}
	}
	if err := cmd.Start(); err != nil {
		return acpsdk.CreateTerminalResponse{}, acpsdk.NewInternalError(map[string]any{"error": err.Error()})
	}
	t := &terminal{cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			sig := ws.Signal().String()
			t.status.Signal = &sig
		} else {
			code := cmd.ProcessState.ExitCode()
			t.status.ExitCode = &code
		}
		close(t.done)
	}()
	c.mu.Lock()
	c.nextID++
	id := "term-" + strconv.Itoa(c.nextID)
	c.terms[id] = t
	c.mu.Unlock()
	c.log.Info("terminal started", "terminal", id, "command", p.Command, "args", p.Args)
	return acpsdk.CreateTerminalResponse{TerminalId: id}, nil
}

func (c *client) terminal(id string) (*terminal, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.terms[id]
	if t == nil {
		return nil, &acpsdk.RequestError{Code: codeResourceNotFound, Message: "Resource not found",
			Data: map[string]any{"terminalId": id}}
	}
	return t, nil
}

func (c *client) TerminalOutput(_ context.Context, p acpsdk.TerminalOutputRequest) (acpsdk.TerminalOutputResponse, error) {
	t, err := c.terminal(p.TerminalId)
	if err != nil {
		return acpsdk.TerminalOutputResponse{}, err
	}
	var resp acpsdk.TerminalOutputResponse
	select {
	case <-t.done:
		st := t.status
		resp.ExitStatus = &st
	default:
	}
	resp.Output, resp.Truncated = t.out.Snapshot()
	return resp, nil
}

func (c *client) WaitForTerminalExit(ctx context.Context, p acpsdk.WaitForTerminalExitRequest) (acpsdk.WaitForTerminalExitResponse, error) {
	t, err := c.terminal(p.TerminalId)
	if err != nil {
		return acpsdk.WaitForTerminalExitResponse{}, err
	}
	select {
	case <-t.done:
	case <-ctx.Done():
		return acpsdk.WaitForTerminalExitResponse{}, ctx.Err()
	}
	return acpsdk.WaitForTerminalExitResponse{ExitCode: t.status.ExitCode, Signal: t.status.Signal}, nil
}

func (c *client) KillTerminal(_ context.Context, p acpsdk.KillTerminalRequest) (acpsdk.KillTerminalResponse, error) {
	t, err := c.terminal(p.TerminalId)
	if err != nil {
		return acpsdk.KillTerminalResponse{}, err
	}
	t.kill()
	return acpsdk.KillTerminalResponse{}, nil
}

func (c *client) ReleaseTerminal(_ context.Context, p acpsdk.ReleaseTerminalRequest) (acpsdk.ReleaseTerminalResponse, error) {
	t, err := c.terminal(p.TerminalId)
	if err != nil {
		return acpsdk.ReleaseTerminalResponse{}, err
	}
	c.mu.Lock()
	delete(c.terms, p.TerminalId)
	c.mu.Unlock()
	t.kill()
	return acpsdk.ReleaseTerminalResponse{}, nil
}

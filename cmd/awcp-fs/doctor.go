package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
	"github.com/awcp/awcp/control/executor"
	"github.com/awcp/awcp/control/executor/acp"
	awcpfs "github.com/awcp/awcp/fs"
	"github.com/awcp/awcp/internal/sandbox"
)

func doctorCommand(ctx context.Context) *cli.Command {
	// `doctor --config FILE` checks what serve will be given.
	clikit.SettingsOf("doctor", "serve")
	return &cli.Command{
		Name:  "doctor",
		Usage: "check this machine as an executor (FUSE, port, state dir, work root, agent), and with --delegator the way to one: each line OK or FAIL with the fix",
		Flags: append(append(clikit.CommonFlags(),
			&cli.StringFlag{Name: "listen", EnvVars: []string{"AWCP_LISTEN"}, Value: "127.0.0.1:10200", Usage: "the address serve is given"},
			&cli.StringFlag{Name: "work-root", EnvVars: []string{"AWCP_WORK_ROOT"}, Usage: "the work root serve is given"},
			&cli.StringFlag{Name: "agent-cmd", EnvVars: []string{"AWCP_AGENT_CMD"}, Usage: "the agent command serve is given"},
			&cli.StringFlag{Name: "agent-acp", EnvVars: []string{"AWCP_AGENT_ACP"}, Usage: "the ACP agent serve is given"},
			&cli.StringFlag{Name: "delegator", Usage: "a delegator's SSH server, host:port, to check this machine can reach (awcp-ctl doctor on the delegator checks the rest)"},
		), append(sandboxFlags(), agentEnvFlags()...)...),
		Action: func(c *cli.Context) error { return doctor(ctx, c) },
	}
}

func doctor(ctx context.Context, c *cli.Context) error {
	l := &clikit.Checklist{W: c.App.Writer}
	checkFUSE(l)
	clikit.CheckSettingsSecrets(l, c)

	state, err := clikit.StateDirPath(c)
	if err != nil {
		return err
	}
	clikit.CheckStateDir(l, state, "executor.db", "agent-id")

	listen := c.String("listen")
	if running := answersAsExecutor(ctx, listen); running {
		l.OK("listen port", listen+" is in use by a running awcp-fs serve")
	} else {
		clikit.CheckPortFree(l, "listen port", listen, false, "stop what holds it, or give serve another --listen")
	}

	switch root := c.String("work-root"); {
	case root == "":
		l.Info("work root", "not checked: give --work-root as serve has it")
	default:
		checkWorkRoot(l, root)
	}

	switch cmd, acp := c.String("agent-cmd"), c.String("agent-acp"); {
	case cmd == "" && acp == "":
		l.Info("agent", "not checked: give --agent-cmd or --agent-acp as serve has it")
	default:
		line := cmd
		if line == "" {
			line = acp
		}
		if msg, hint := notInstalled(line); msg != "" {
			l.Fail("agent", msg, hint)
		} else if path, err := exec.LookPath(program(line)); err == nil {
			l.OK("agent", path)
		} else {
			l.Info("agent", "a shell command line: the programs it runs are looked up when it runs")
		}
	}

	checkSandbox(l, c, state)
	if addr := c.String("delegator"); addr != "" {
		checkDelegator(l, addr)
	}
	return l.Result()
}

// checkSandbox says what will confine the agents, and checks it does: a
// confined shell must not list the state dir.
func checkSandbox(l *clikit.Checklist, c *cli.Context, state string) {
	p, err := sandboxPolicy(c, c.String("agent-cmd"), c.String("agent-acp"))
	var setid *sandbox.SetidError
	switch {
	case errors.As(err, &setid):
		l.Fail("sandbox grant", err.Error(), setid.Hint())
		return
	case err != nil:
		l.Fail("sandbox", err.Error(), "run on a kernel with Landlock ABI 6 (Linux 6.12+), or drop --sandbox strict")
		return
	case p == nil:
		l.Info("sandbox", "WARNING: off: every agent reaches what this daemon reaches")
		return
	case sandbox.ABI() < sandbox.MinABI:
		l.Info("sandbox", "WARNING: "+sandbox.Describe(p)+": agents are not fully confined (--sandbox strict refuses to start so)")
	}
	os.MkdirAll(state, 0o700)
	// As an agent runs: in a directory of its own, and where the daemon
	// may, in a root and as a user of its own.
	work, err := os.MkdirTemp("", "awcp-doctor-")
	if err != nil {
		l.Fail("sandbox", err.Error(), "")
		return
	}
	defer os.RemoveAll(work)
	grants := p.RW
	p.RW = append(slices.Clone(p.RW), work)
	script := `ls "$0" >/dev/null 2>&1 && exit 3; exit 0`
	if p.Isolated {
		uid := uint32(executor.ProbeUID)
		p.User = &sandbox.User{UID: uid, GID: uid, Home: work}
		os.Chown(work, int(uid), int(uid))
		script = `ls "$0" >/dev/null 2>&1 && exit 3; [ "$(id -u)" = ` + fmt.Sprint(uid) + ` ] || exit 4; exit 0`
	}
	cmd := exec.Command("/bin/sh", "-c", script, state)
	cmd.Dir = work
	if err := p.Wrap(cmd); err != nil {
		l.Fail("sandbox", err.Error(), "")
		return
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		l.Fail("sandbox", fmt.Sprintf("a confined shell still reached the state dir (%v) %s", err, strings.TrimSpace(string(out))),
			"check the kernel's Landlock (cat /sys/kernel/security/lsm lists landlock), or run with --sandbox off knowingly")
		return
	}
	l.OK("sandbox", sandbox.Describe(p)+": agents write in their work dir and a temp dir of their own only; checked")
	for _, line := range []string{c.String("agent-cmd"), c.String("agent-acp")} {
		if line == "" {
			continue
		}
		r := sandbox.ResolveCommand(line)
		what := strings.Join(r.Chain, "; ")
		if len(r.Grants) > 0 {
			what += "; granted read-only: " + strings.Join(r.Grants, " ")
		}
		l.Info("agent runs", what)
	}
	l.Info("sandbox reads", strings.Join(p.RO, " "))
	if len(grants) > 0 {
		l.Info("sandbox writes", "the work dir, its temp dir, "+strings.Join(grants, " "))
	}
	for _, g := range grants {
		if warning := rwGrantWarning(g, p.Isolated); warning != "" {
			l.Info("sandbox grant", warning)
		}
	}
	env, unset, err := agentEnv(c)
	switch {
	case err != nil:
		l.Fail("agent environment", err.Error(), "name variables with --agent-env NAME, or give a file of NAME=VALUE lines of mode 600 with --agent-env-file")
	case len(unset) > 0:
		l.Fail("agent environment", "--agent-env names what this environment does not set: "+strings.Join(unset, " "),
			"set them where the daemon starts (an EnvironmentFile= of mode 600 with systemd), or drop the names")
	default:
		named := envNames(env)
		if named == "" {
			named = "nothing else (an agent that logs in with an API key gets none: --agent-env NAME)"
		}
		l.OK("agent environment", "PATH, the locale and TZ of this daemon's, a fresh HOME and TMPDIR, the task's AWCP_*; named: "+named)
	}
	checkAgentConfined(l, c, p, work, env)
}

// rwGrantWarning says what a read-write grant of dir hands every agent
// where dir is root's or the daemon's user's: what they write there is
// that user's (idmapped, with a root of its own; as the daemon's uid
// without), so a program or configuration kept there is theirs to
// change. No set-id bit (the sandbox refuses it). "" for another owner's.
func rwGrantWarning(dir string, idmapped bool) string {
	if agentsOwn(dir) {
		return "" // what docs/agents.md grants: the agents' own logins and settings
	}
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return ""
	}
	owner := ""
	switch {
	case st.Uid == 0:
		owner = "root"
	case int(st.Uid) == os.Geteuid():
		owner = "this daemon's user"
	default:
		return ""
	}
	how := "as this daemon's uid"
	if idmapped {
		how = "as " + owner + " (the grant is bound idmapped)"
	}
	return fmt.Sprintf("%s:rw is %s's: every agent writes there %s, and can change any program, script or configuration kept there that %s or a later agent runs (never a set-id file: the sandbox refuses it); grant :rw only what is the agents' own, such as ~/.claude", dir, owner, how, owner)
}

// agentStateDirs are the agents' own directories in their user's home —
// their logins, settings and sessions — that docs/agents.md grants :rw:
// the agents keep nothing there that root runs.
var agentStateDirs = []string{".claude", ".gemini", ".codex"}

// agentsOwn reports whether dir is one of agentStateDirs in this user's
// home.
func agentsOwn(dir string) bool {
	home, err := os.UserHomeDir()
	if err != nil {
		return false
	}
	for _, d := range agentStateDirs {
		if filepath.Clean(dir) == filepath.Join(home, d) {
			return true
		}
	}
	return false
}

// checkAgentConfined starts the configured agent the way serve will, in
// its sandbox (p, working in work): an ACP agent is initialized, and a
// task's command has its program found and executable in there — it is
// not run, having no task. What the agent says on stderr is shown when
// it fails: a path the sandbox refused it is named there.
func checkAgentConfined(l *clikit.Checklist, c *cli.Context, p *sandbox.Policy, work string, env []string) {
	if msg, _ := notInstalled(c.String("agent-cmd") + c.String("agent-acp")); msg != "" {
		// Said at "agent": not installed is not the sandbox's refusal.
		l.Info("agent in sandbox", "not checked: the agent is not installed")
		return
	}
	const grant = "grant what it needs with --sandbox-allow PATH[:rw] (its install, its credentials), or run it with --sandbox off knowingly"
	if line := c.String("agent-acp"); line != "" {
		ctx, cancel := context.WithTimeout(c.Context, 30*time.Second)
		defer cancel()
		// As serve starts it: its fresh HOME, temporary dir and caches.
		task, cleanup, err := executor.ProbeTask(p, work, c.String("name"), env)
		if err != nil {
			l.Fail("agent in sandbox", err.Error(), "")
			return
		}
		defer cleanup()
		init, stderr, err := acp.Worker{Command: line}.ProbeSession(ctx, task)
		var info struct {
			AgentInfo struct{ Name, Version string } `json:"agentInfo"`
		}
		json.Unmarshal(init, &info)
		answered := fmt.Sprintf("the ACP agent answered initialize in its sandbox (%s %s)",
			clikit.Printable(info.AgentInfo.Name), clikit.Printable(info.AgentInfo.Version))
		if err != nil {
			words := acp.Words(err)
			if !strings.HasPrefix(words, "session/new") {
				msg := "the ACP agent did not answer initialize in its sandbox: " + words
				if stderr != "" {
					msg += "; its stderr ends:\n" + clikit.PrintableText(stderr)
				}
				l.Fail("agent in sandbox", msg, grant)
				return
			}
			// It started; it would not open a session: its login, most
			// often, which a delegation would meet at its first turn.
			l.OK("agent in sandbox", answered)
			hint := executor.LoginHint(words, stderr)
			if hint == "" {
				hint = grant
			}
			l.Fail("agent session", "the ACP agent refused to open a session: "+words, hint)
			return
		}
		l.OK("agent in sandbox", answered)
		l.OK("agent session", "the ACP agent opened a session (no prompt sent: an agent that checks its login only at a turn, as Claude Code's adapter does, is not checked)")
	}
	if line := c.String("agent-cmd"); line != "" {
		prog := program(line)
		// Found and executable there, not run: doctor has no task to give it.
		cmd := exec.Command("/bin/sh", "-c", `p=$(command -v "$0") || { echo "$0: not found in the sandbox" >&2; exit 3; }; [ -x "$p" ] && [ -r "$p" ] || { echo "$p: Permission denied in the sandbox" >&2; exit 4; }`, prog)
		cmd.Dir = work
		if err := p.Wrap(cmd); err != nil {
			l.Fail("agent in sandbox", err.Error(), "")
			return
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			l.Fail("agent in sandbox", fmt.Sprintf("the agent command's program %s cannot run in its sandbox: %s", prog, strings.TrimSpace(clikit.PrintableText(string(out)))), grant)
			return
		}
		l.OK("agent in sandbox", "the agent command's program "+prog+" is found and executable in its sandbox (not run: doctor has no task)")
	}
}

// checkFUSE mounts an empty file system the way a live mount is made.
func checkFUSE(l *clikit.Checklist) {
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		l.Fail("fuse device", "/dev/fuse: "+err.Error(),
			"load the module (modprobe fuse); in a container, pass --device /dev/fuse (and --cap-add SYS_ADMIN to mount as root)")
		l.Info("transport", "live mounts (sshfs) will not work here; delegations use archive")
		return
	}
	f.Close()
	l.OK("fuse device", "/dev/fuse opens")
	how := "as root, with mount(2)"
	if os.Geteuid() != 0 {
		how = "through fusermount3"
		if _, err := exec.LookPath("fusermount3"); err != nil {
			if _, err := exec.LookPath("fusermount"); err != nil {
				l.Fail("fuse mount", "not root, and no fusermount3 on PATH", "install fuse3 (apt-get install fuse3), or run serve as root")
				return
			}
		}
	}
	dir, err := os.MkdirTemp("", "awcp-doctor-")
	if err != nil {
		l.Fail("fuse mount", err.Error(), "")
		return
	}
	defer os.Remove(dir)
	if err := awcpfs.CanMount(dir); err != nil {
		l.Fail("fuse mount", "a test mount failed: "+err.Error(),
			"run serve as root, or install fuse3 and allow your user to mount; in a container, --cap-add SYS_ADMIN")
		return
	}
	l.OK("fuse mount", "a test mount worked ("+how+")")
}

// answersAsExecutor reports whether addr is an awcp-fs serve's.
func answersAsExecutor(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/manifest", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// checkWorkRoot checks that work dirs can be made in root.
func checkWorkRoot(l *clikit.Checklist, root string) {
	abs, err := filepath.Abs(root)
	if err != nil {
		l.Fail("work root", err.Error(), "")
		return
	}
	probe := abs
	for {
		if _, err := os.Stat(probe); err == nil || !errors.Is(err, os.ErrNotExist) {
			break
		}
		probe = filepath.Dir(probe)
	}
	dir, err := os.MkdirTemp(probe, ".awcp-doctor-")
	if err != nil {
		l.Fail("work root", fmt.Sprintf("cannot make directories in %s: %v", probe, err), "make "+abs+" writable by the user serve runs as")
		return
	}
	os.Remove(dir)
	if probe != abs {
		// Missing: serve makes it, and can (its nearest existing parent
		// is writable). Saying "writable" of what is not there misled.
		l.OK("work root", abs+" does not exist yet; serve will make it (in "+probe+", which is writable)")
		return
	}
	l.OK("work root", abs+" is writable")
}

// checkDelegator dials a delegator's SSH server as a live mount would.
func checkDelegator(l *clikit.Checklist, addr string) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		l.Fail("here → delegator", fmt.Sprintf("cannot connect to %s: %v", addr, err),
			"let this machine reach that port (firewall, NAT), or delegate with --transport archive")
		return
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	line, _ := bufio.NewReaderSize(conn, 256).ReadSlice('\n')
	if !strings.HasPrefix(string(line), "SSH-2.0-") {
		l.Fail("here → delegator", addr+" answered, but not as an SSH server", "check the address: it is the delegator's --ssh-listen port")
		return
	}
	l.OK("here → delegator", "reached the SSH server at "+addr)
}

// program is the program a command line runs: its first word that is not
// the shell's exec, env or a VAR=value.
func program(line string) string {
	for _, w := range strings.Fields(line) {
		w = strings.Trim(w, `'"`)
		if w != "exec" && w != "env" && !strings.Contains(w, "=") {
			return w
		}
	}
	return line
}

// notInstalled says of an agent command whose program is found nowhere
// (sandbox.Resolved.Missing) that it is not installed, or misspelt, and
// how to fix it; "" where it is found, or where the line is shell syntax
// whose program only running it would tell.
func notInstalled(line string) (msg, hint string) {
	missing := sandbox.ResolveCommand(line).Missing
	if missing == "" {
		return "", ""
	}
	return fmt.Sprintf("the agent %s is not installed here: not found on PATH (%s)", missing, os.Getenv("PATH")),
		"install it where this daemon's PATH finds it, or give its full path; the agent is given this PATH"
}

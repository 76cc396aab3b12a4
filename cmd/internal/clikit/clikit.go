// Package clikit holds what both awcp programs' command lines share: the
// common flags, the state dir, logging and exit codes.
package clikit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/awcp/awcp/internal/cloexec"
	"github.com/awcp/awcp/internal/untrusted"
	"github.com/urfave/cli/v2"
)

// DelegatorProcs is awcp-ctl's GOMAXPROCS. Its data plane, the SSH/SFTP
// server, is a chain of short hand-offs between goroutines (socket → SSH
// mux → SFTP worker → responder → socket); with more than one P each
// hand-off may wake another OS thread. Two Ps made git, small creates
// and random reads through a mount 10–20% slower on a 2-vCPU VM (rm -rf
// 15% faster), for 20% more CPU (make bench, interleaved).
const DelegatorProcs = 1

// ExecutorProcs is awcp-fs's GOMAXPROCS. go-fuse keeps two readers or
// more blocked in read(2) on /dev/fuse, each holding a P while it blocks.
// With fewer Ps than that, the reader the kernel hands the next request to
// has none: it waits for sysmon to take one back from another reader
// (sysmon wakes every 20 µs while it keeps doing so), and the SFTP
// client's sender and receiver wait with it. With four, on a 2-vCPU VM,
// random 4 KiB writes ran 40% faster than with one and git 9% faster,
// for 15% more CPU; random reads 4–10% slower (make bench, interleaved
// against one, two and three).
const ExecutorProcs = 4

// Exit codes.
const (
	ExitOK     = 0
	ExitFailed = 1 // the delegation or the operation failed
	ExitUsage  = 2 // bad flags or arguments
)

// commonEnv are the environment variables of the common flags, read by
// flag below rather than by urfave/cli: a variable set at the command's
// level would otherwise beat the same flag given before the command.
var commonEnv = map[string][]string{
	"state-dir":  {"AWCP_STATE_DIR", "AWCP_HOME"},
	"log-level":  {"AWCP_LOG_LEVEL"},
	"log-format": {"AWCP_LOG_FORMAT"},
	"config":     {"AWCP_CONFIG"},
}

// CommonFlags are accepted by every command of both programs, before or
// after the command name.
func CommonFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "state-dir",
			Usage: "where leases, keys and sockets live (default ~/.awcp) [$AWCP_STATE_DIR, $AWCP_HOME]"},
		&cli.StringFlag{Name: "log-level", Value: "warn",
			Usage: "debug, info, warn or error [$AWCP_LOG_LEVEL]"},
		&cli.StringFlag{Name: "log-format", Value: "text",
			Usage: "text (key=value) or json (one object per line) [$AWCP_LOG_FORMAT]"},
		configFlag(),
	}
}

// DaemonFlags are CommonFlags for a daemon's command: it logs at info by
// default, so that its operator sees each delegation come and go.
func DaemonFlags() []cli.Flag {
	flags := CommonFlags()
	for _, f := range flags {
		if sf, ok := f.(*cli.StringFlag); ok && sf.Name == "log-level" {
			sf.Value = "info"
		}
	}
	return flags
}

// flag reads a common flag wherever on the command line it was given
// (urfave/cli would read the command's own, unset copy and miss
// `awcp-ctl --state-dir X status`), then the environment, then the default.
func flag(c *cli.Context, name string) string {
	for _, ctx := range c.Lineage() {
		if ctx.IsSet(name) {
			return ctx.String(name)
		}
	}
	for _, env := range commonEnv[name] {
		if v := os.Getenv(env); v != "" {
			return v
		}
	}
	return c.String(name)
}

// StateDirPath is the state dir's absolute path; it may not exist yet.
func StateDirPath(c *cli.Context) (string, error) {
	dir := flag(c, "state-dir")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no --state-dir and no home directory: %w", err)
		}
		dir = filepath.Join(home, ".awcp")
	}
	return filepath.Abs(dir)
}

// StateDir returns the state dir, created 0700.
func StateDir(c *cli.Context) (string, error) {
	abs, err := StateDirPath(c)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return "", fmt.Errorf("state dir: %w", err)
	}
	return abs, nil
}

// Logger builds the logger for --log-level and --log-format, writing to
// w. A delegation's lines carry its id as "delegation": every package
// logs it under that key.
func Logger(c *cli.Context, w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(flag(c, "log-level"))); err != nil {
		return nil, UsageError("--log-level must be debug, info, warn or error")
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch f := flag(c, "log-format"); f {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, UsageError("--log-format must be text or json, not %q", f)
	}
}

// exitError carries an exit code to main.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// UsageError reports bad input on the command line (exit 2).
func UsageError(format string, args ...any) error {
	return &exitError{code: ExitUsage, msg: fmt.Sprintf(format, args...)}
}

// Failed reports an outcome already printed in full (exit 1, no message).
func Failed() error { return Exit(ExitFailed) }

// Exit ends the program with code and no further message.
func Exit(code int) error { return &exitError{code: code} }

// Run is a program's main: the context ends on SIGINT or SIGTERM, and the
// process exits with Main's code. procs is the program's GOMAXPROCS
// unless the GOMAXPROCS variable is set: the daemons' best differs from
// the runtime's default (see DelegatorProcs and ExecutorProcs).
func Run(newApp func(ctx context.Context, stdout, stderr io.Writer) *cli.App, procs int) {
	// What the process was started with (a shell's, a supervisor's) is
	// not passed on to the agents it runs.
	cloexec.All()
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(procs)
	}
	// A reader that goes away (`awcp-ctl export … | head`) must not kill
	// a process that follows a lease: with SIGPIPE caught, a write to the
	// closed pipe fails with EPIPE instead, and the work goes on. Caught,
	// not ignored: an ignored signal would stay ignored in the agents and
	// daemons this process starts; a caught one is reset for them.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Main(newApp(ctx, os.Stdout, os.Stderr), os.Args)
	stop()
	os.Exit(code)
}

// Main runs app and maps its error to an exit code: the message goes to
// stderr once, and never as a stack trace.
func Main(app *cli.App, args []string) int {
	app.ExitErrHandler = func(*cli.Context, error) {} // exit codes are ours
	app.Version = Version
	oneLineUsageErrors(app.Name, app.Commands)
	withConfig(app.Commands, commandNames(app.Commands), flagNames(app.Commands, map[string]bool{}))
	app.OnUsageError = usageError(app.Name)
	if prof := os.Getenv("AWCP_CPUPROFILE"); prof != "" {
		// For performance work: a CPU profile per process.
		if f, err := os.Create(fmt.Sprintf("%s.%s.%d", prof, app.Name, os.Getpid())); err == nil {
			pprof.StartCPUProfile(f)
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
	}
	err := app.Run(Intersperse(app, args))
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(app.ErrWriter, app.Name+": "+ee.msg)
		}
		return ee.code
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "No help topic for '"); ok {
		// An unknown command is bad usage, and is said as such.
		name = strings.TrimSuffix(name, "'")
		msg = fmt.Sprintf("%q is not a command of %s%s (see %s --help)", name, app.Name, didYouMean(app.Commands, name), app.Name)
		fmt.Fprintln(app.ErrWriter, app.Name+": "+msg)
		return ExitUsage
	}
	fmt.Fprintln(app.ErrWriter, app.Name+": "+msg)
	if strings.Contains(msg, "flag provided but not defined") || strings.Contains(msg, "Required flag") {
		return ExitUsage
	}
	return ExitFailed
}

// didYouMean names the commands name may have meant: those it begins or
// that begin with it.
func didYouMean(cmds []*cli.Command, name string) string {
	var near []string
	for _, c := range cmds {
		if name != "" && (strings.HasPrefix(c.Name, name) || strings.HasPrefix(name, c.Name)) {
			near = append(near, c.Name)
		}
	}
	if len(near) == 0 {
		return ""
	}
	return "; did you mean " + strings.Join(near, " or ") + "?"
}

// Intersperse lets flags follow positional arguments, as in
// `awcp-ctl export DIR --peer URL`: urfave/cli v2 stops parsing flags at the
// first positional argument, so the command's flags are moved before its
// positional arguments (everything after "--" stays positional).
func Intersperse(app *cli.App, args []string) []string {
	i := 1
	for i < len(args) && strings.HasPrefix(args[i], "-") { // global flags
		if takesValue(app.Flags, args[i]) {
			i++
		}
		i++
	}
	if i >= len(args) {
		return args
	}
	cmd := app.Command(args[i])
	if cmd == nil {
		return args
	}
	out := append([]string(nil), args[:i+1]...)
	var pos []string
	rest := args[i+1:]
	// Down to the subcommand named (peers trust): its flags are the ones
	// to gather, and its name is no positional argument.
	for len(rest) > 0 {
		sub := subcommand(cmd, rest[0])
		if sub == nil {
			break
		}
		out, rest, cmd = append(out, rest[0]), rest[1:], sub
	}
	for j := 0; j < len(rest); j++ {
		a := rest[j]
		switch {
		case a == "--":
			pos = append(pos, rest[j+1:]...)
			j = len(rest)
		case strings.HasPrefix(a, "-") && a != "-":
			out = append(out, a)
			if takesValue(cmd.Flags, a) && j+1 < len(rest) {
				j++
				out = append(out, rest[j])
			}
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) > 0 {
		out = append(append(out, "--"), pos...)
	}
	return out
}

// subcommand is cmd's subcommand called name; nil if none.
func subcommand(cmd *cli.Command, name string) *cli.Command {
	for _, sub := range cmd.Subcommands {
		if sub.HasName(name) {
			return sub
		}
	}
	return nil
}

// takesValue reports whether arg names a flag that needs the next argument.
func takesValue(flags []cli.Flag, arg string) bool {
	name := strings.TrimLeft(arg, "-")
	if strings.Contains(name, "=") {
		return false
	}
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				_, isBool := f.(*cli.BoolFlag)
				return !isBool
			}
		}
	}
	return false
}

// oneLineUsageErrors makes a bad flag one line that names the command and
// where its flags are listed, instead of urfave/cli's error followed by
// the whole help page.
func oneLineUsageErrors(prefix string, cmds []*cli.Command) {
	for _, cmd := range cmds {
		cmd.OnUsageError = usageError(prefix + " " + cmd.Name)
		oneLineUsageErrors(prefix+" "+cmd.Name, cmd.Subcommands)
	}
}

func usageError(command string) cli.OnUsageErrorFunc {
	return func(c *cli.Context, err error, _ bool) error {
		msg := strings.Replace(err.Error(), "for flag -", "for --", 1)
		if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok && c != nil && c.Command != nil {
			msg = "--" + name + " is not a flag of " + command + nearFlag(c.Command.Flags, name)
		}
		return &exitError{code: ExitUsage, msg: fmt.Sprintf("%s (see %s --help)", msg, command)}
	}
}

// nearFlag names the flag a misspelt name may have meant: one within two
// edits of it, or that it begins; "" if none.
func nearFlag(flags []cli.Flag, name string) string {
	best, bestD := "", 3
	for _, f := range flags {
		for _, n := range f.Names() {
			d := editDistance(name, n)
			if len(name) >= 3 && strings.HasPrefix(n, name) {
				d = 1
			}
			if d < bestD && len(n) > 1 {
				best, bestD = n, d
			}
		}
	}
	if best == "" {
		return ""
	}
	return "; did you mean --" + best + "?"
}

// editDistance is Levenshtein's distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// Printable is untrusted.Name: a name from the other machine as a
// terminal may show it.
func Printable(s string) string { return untrusted.Name(s) }

// PrintableText is untrusted.Text: text of several lines from the other
// machine, with no escape sequence left in it.
func PrintableText(s string) string { return untrusted.Text(s) }

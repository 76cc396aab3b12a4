package clikit

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

// A duration flag takes Go's form or a bare number of seconds; a bad one
// is one line naming the flag, the accepted form and where help is — not
// the whole help page — and exit code 2.
func TestDurationFlag(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"50": 50 * time.Second, "1.5": 1500 * time.Millisecond, "90s": 90 * time.Second, "2h": 2 * time.Hour, "0": 0,
	} {
		var got time.Duration
		var out, errb bytes.Buffer
		app := &cli.App{Name: "x", Writer: &out, ErrWriter: &errb, Commands: []*cli.Command{{
			Name: "cmd", Flags: []cli.Flag{DurationFlag("ttl", time.Hour, "lease")},
			Action: func(c *cli.Context) error { got = Duration(c, "ttl"); return nil },
		}}}
		if code := Main(app, []string{"x", "cmd", "--ttl", in}); code != ExitOK || got != want {
			t.Errorf("--ttl %s: exit %d, %v; want %v\n%s", in, code, got, want, errb.String())
		}
	}
	for _, bad := range []string{"50x", "-5", "soon", "1e300"} {
		var out, errb bytes.Buffer
		app := &cli.App{Name: "x", Writer: &out, ErrWriter: &errb, Commands: []*cli.Command{{
			Name: "cmd", Flags: []cli.Flag{DurationFlag("ttl", time.Hour, "lease")},
			Action: func(c *cli.Context) error { t.Errorf("--ttl %s ran the command", bad); return nil },
		}}}
		code := Main(app, []string{"x", "cmd", "--ttl", bad})
		msg := errb.String() + out.String()
		if code != ExitUsage || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, "--ttl") ||
			!strings.Contains(msg, "a number of seconds") || !strings.Contains(msg, "see x cmd --help") {
			t.Errorf("--ttl %s: exit %d, said:\n%s", bad, code, msg)
		}
	}
}

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

// Every size flag takes 500M as --max-write-bytes always did, shows its
// default the same way, and refuses what is not a size in one line.
func TestBytesFlag(t *testing.T) {
	for in, want := range map[string]int64{"500M": 500 << 20, "2G": 2 << 30, "64k": 64 << 10, "10MiB": 10 << 20, "1048576": 1 << 20, "0": 0} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"lots", "-1", "5T", "9999999999G"} {
		if _, err := ParseBytes(bad); err == nil || !strings.Contains(err.Error(), bytesForm) {
			t.Errorf("ParseBytes(%q): %v", bad, err)
		}
	}
	if HumanBytes(1<<30) != "1G" || HumanBytes(1500) != "1500" || HumanBytes(3<<20) != "3M" {
		t.Errorf("HumanBytes: %s %s %s", HumanBytes(1<<30), HumanBytes(1500), HumanBytes(3<<20))
	}
}

package clikit

import (
	"bytes"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestCommonFlagsAnywhere: a common flag counts before the command, after
// it, and from the environment; a later one wins over an earlier one.
func TestCommonFlagsAnywhere(t *testing.T) {
	base := t.TempDir()
	var got string
	app := &cli.App{
		Name: "x", Flags: CommonFlags(), Writer: new(bytes.Buffer), ErrWriter: new(bytes.Buffer),
		Commands: []*cli.Command{{
			Name: "cmd", Flags: CommonFlags(),
			Action: func(c *cli.Context) error {
				dir, err := StateDir(c)
				got = dir
				return err
			},
		}},
	}
	tests := []struct {
		name string
		args []string
		env  string
		want string
	}{
		{"before the command", []string{"x", "--state-dir", base + "/a", "cmd"}, "", base + "/a"},
		{"after the command", []string{"x", "cmd", "--state-dir", base + "/b"}, "", base + "/b"},
		{"after a positional", []string{"x", "cmd", "arg", "--state-dir", base + "/c"}, "", base + "/c"},
		{"from the environment", []string{"x", "cmd"}, base + "/d", base + "/d"},
		{"flag over environment", []string{"x", "--state-dir", base + "/e", "cmd"}, base + "/d", base + "/e"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("AWCP_STATE_DIR", tt.env)
			t.Setenv("AWCP_HOME", "")
			got = ""
			if code := Main(app, tt.args); code != 0 {
				t.Fatalf("exit %d", code)
			}
			if got != filepath.Clean(tt.want) {
				t.Fatalf("state dir %q, want %q", got, tt.want)
			}
		})
	}
}

// A name an executor chose with a newline cannot print a forged line, nor
// one with ESC reach the terminal; plain names print as they are.
func TestPrintable(t *testing.T) {
	forged := "a\n12:00:00.000  read    .aws/credentials  REFUSED"
	for in, want := range map[string]string{
		"src/main.go":            "src/main.go",
		"naïve café.txt":         "naïve café.txt",
		forged:                   strconv.Quote(forged),
		"x\x1b[2J\x1b]0;pwned\a": `"x\x1b[2J\x1b]0;pwned\a"`,
		"back\\slash":            `"back\\slash"`,
		"bad\xffutf8":            `"bad\xffutf8"`,
	} {
		if got := Printable(in); got != want {
			t.Errorf("Printable(%q) = %s, want %s", in, got, want)
		}
		if strings.ContainsAny(Printable(in), "\n\x1b") {
			t.Errorf("Printable(%q) keeps a newline or ESC", in)
		}
	}
	if got := PrintableText("line one\n\x1b[31mred\x1b[0m\tdone"); got != `line one`+"\n"+`\x1b[31mred\x1b[0m`+"\t"+`done` {
		t.Errorf("PrintableText: %q", got)
	}
}

// An unknown command is bad usage (exit 2), and names the commands it
// may have meant.
func TestUnknownCommandIsBadUsage(t *testing.T) {
	errw := new(bytes.Buffer)
	app := &cli.App{Name: "x", Writer: new(bytes.Buffer), ErrWriter: errw,
		Commands: []*cli.Command{{Name: "status", Action: func(*cli.Context) error { return nil }}}}
	if code := Main(app, []string{"x", "stat"}); code != ExitUsage {
		t.Fatalf("exit %d, want %d", code, ExitUsage)
	}
	if want := `x: "stat" is not a command of x; did you mean status? (see x --help)` + "\n"; errw.String() != want {
		t.Errorf("said %q, want %q", errw.String(), want)
	}
}

// A misspelt flag is bad usage (exit 2), and names the flag it may have
// meant.
func TestMisspeltFlagIsBadUsage(t *testing.T) {
	errw := new(bytes.Buffer)
	app := &cli.App{Name: "x", Writer: new(bytes.Buffer), ErrWriter: errw,
		Commands: []*cli.Command{{Name: "export", Flags: []cli.Flag{&cli.StringFlag{Name: "token"}, &cli.BoolFlag{Name: "json"}},
			Action: func(*cli.Context) error { return nil }}}}
	if code := Main(app, []string{"x", "export", "--tokn", "t"}); code != ExitUsage {
		t.Fatalf("exit %d, want %d", code, ExitUsage)
	}
	if want := "x: --tokn is not a flag of x export; did you mean --token? (see x export --help)\n"; errw.String() != want {
		t.Errorf("said %q, want %q", errw.String(), want)
	}
}

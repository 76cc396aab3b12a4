package clikit

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

// configApp is a program with a serve command whose flags cover each
// kind a config file sets, and records what its action saw.
type seen struct {
	level, root, name string
	transports        []string
	max               int
	ttl               time.Duration
	advertise         bool
}

func configApp(got *seen) (*cli.App, *bytes.Buffer) {
	errw := new(bytes.Buffer)
	return &cli.App{
		Name: "x", Flags: CommonFlags(), Writer: new(bytes.Buffer), ErrWriter: errw,
		Commands: []*cli.Command{{
			Name: "serve",
			Flags: append(CommonFlags(),
				&cli.StringFlag{Name: "work-root", EnvVars: []string{"X_WORK_ROOT"}, Required: true},
				&cli.StringFlag{Name: "name", Value: "default"},
				&cli.StringSliceFlag{Name: "transports", Value: cli.NewStringSlice("sshfs", "archive")},
				&cli.IntFlag{Name: "max-concurrent", Value: 5},
				DurationFlag("max-ttl", time.Hour, "", ""),
				&cli.BoolFlag{Name: "advertise"},
			),
			Action: func(c *cli.Context) error {
				*got = seen{level: flag(c, "log-level"), root: c.String("work-root"), name: c.String("name"),
					transports: c.StringSlice("transports"), max: c.Int("max-concurrent"), ttl: Duration(c, "max-ttl"),
					advertise: c.Bool("advertise")}
				return nil
			},
		}, {Name: "status", Action: func(*cli.Context) error { return nil }}},
	}, errw
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "awcp.toml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A config file sets flags by their names, the command's table over the
// top level; the command line and the environment win over the file, and
// the file may supply a required flag.
func TestConfigFile(t *testing.T) {
	cfg := writeConfig(t, `
log-level = "info"
name = "top"

[serve]
work-root = "/srv/work"
name = "from-table"
transports = ["archive"]
max-concurrent = 2
max-ttl = "90m"
advertise = true

[status]
`)
	unsetenv(t, "X_WORK_ROOT")
	var got seen
	app, errw := configApp(&got)
	if code := Main(app, []string{"x", "serve", "--config", cfg}); code != 0 {
		t.Fatalf("exit %d: %s", code, errw)
	}
	want := seen{level: "info", root: "/srv/work", name: "from-table", transports: []string{"archive"}, max: 2, ttl: 90 * time.Minute, advertise: true}
	if got.level != want.level || got.root != want.root || got.name != want.name || strings.Join(got.transports, ",") != "archive" ||
		got.max != want.max || got.ttl != want.ttl || got.advertise != want.advertise {
		t.Fatalf("from the file: %+v, want %+v", got, want)
	}

	app, errw = configApp(&got)
	t.Setenv("X_WORK_ROOT", "/env/work")
	t.Setenv("AWCP_LOG_LEVEL", "debug")
	if code := Main(app, []string{"x", "--config", cfg, "serve", "--name", "flag", "--max-concurrent", "9"}); code != 0 {
		t.Fatalf("exit %d: %s", code, errw)
	}
	if got.name != "flag" || got.max != 9 || got.root != "/env/work" || got.level != "debug" || got.ttl != 90*time.Minute {
		t.Fatalf("flags and environment over the file: %+v", got)
	}
}

// What a config file cannot say is one line that names it, and the
// command does not run.
func TestConfigFileErrors(t *testing.T) {
	unsetenv(t, "X_WORK_ROOT")
	for _, tc := range []struct {
		name, text, want string
	}{
		{"misspelt key", "work-root = \"/w\"\nmax-concurent = 3\n", `"max-concurent" is not a setting of x serve`},
		{"unknown table", "[serv]\nwork-root = \"/w\"\n", "[serv] is no command of this program"},
		{"bad value", "work-root = \"/w\"\nmax-concurrent = \"many\"\n", "max-concurrent"},
		{"list for one value", "work-root = [\"/a\", \"/b\"]\n", "work-root takes one value, not a list"},
		{"bad duration", "work-root = \"/w\"\nmax-ttl = \"soon\"\n", "max-ttl"},
		{"not TOML", "work-root = \n", "--config"},
		{"required flag missing", "name = \"n\"\n", "--work-root is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ran := false
			var got seen
			app, errw := configApp(&got)
			app.Commands[0].Action = func(*cli.Context) error { ran = true; return nil }
			code := Main(app, []string{"x", "serve", "--config", writeConfig(t, tc.text)})
			msg := strings.TrimSpace(errw.String())
			if code != ExitUsage || ran || !strings.Contains(msg, tc.want) || strings.Count(msg, "\n") != 0 {
				t.Fatalf("exit %d, ran %v, message:\n%s\nwant one line with %q", code, ran, msg, tc.want)
			}
		})
	}
	var got seen
	app, errw := configApp(&got)
	if code := Main(app, []string{"x", "serve", "--config", "/nonexistent/awcp.toml"}); code != ExitUsage || !strings.Contains(errw.String(), "no such file") {
		t.Fatalf("missing file: exit %d: %s", code, errw)
	}
}

// unsetenv removes name from the environment for the test (urfave/cli
// counts a variable set to "" as given).
func unsetenv(t *testing.T, name string) {
	t.Setenv(name, "")
	os.Unsetenv(name)
}

// A command that borrows another's table (doctor, serve's) takes the keys
// it has from there, and leaves the rest.
func TestConfigBorrowedTable(t *testing.T) {
	unsetenv(t, "X_WORK_ROOT")
	SettingsOf("doctor", "serve")
	defer delete(borrowed, "doctor")
	var root, listen string
	app := &cli.App{Name: "x", Flags: CommonFlags(), Writer: new(bytes.Buffer), ErrWriter: new(bytes.Buffer),
		Commands: []*cli.Command{
			{Name: "serve", Flags: append(CommonFlags(), &cli.StringFlag{Name: "work-root"}, &cli.StringFlag{Name: "agent-cmd"}, &cli.StringFlag{Name: "listen"})},
			{Name: "doctor", Flags: append(CommonFlags(), &cli.StringFlag{Name: "work-root"}, &cli.StringFlag{Name: "listen"}),
				Action: func(c *cli.Context) error { root, listen = c.String("work-root"), c.String("listen"); return nil }},
		}}
	cfg := writeConfig(t, "[serve]\nwork-root = \"/srv/work\"\nagent-cmd = \"a\"\nlisten = \"1.2.3.4:1\"\n[doctor]\nlisten = \"5.6.7.8:2\"\n")
	if code := Main(app, []string{"x", "doctor", "--config", cfg}); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if root != "/srv/work" || listen != "5.6.7.8:2" {
		t.Fatalf("work-root %q (want serve's), listen %q (want doctor's own)", root, listen)
	}
}

// One file serves every command: a top-level key another command takes
// is left to it, not refused; and the user's file is read without
// --config, from where the README installs it.
func TestConfigSharedAndDefault(t *testing.T) {
	unsetenv(t, "X_WORK_ROOT")
	unsetenv(t, "AWCP_CONFIG")
	text := "work-root = \"/w\"\nname = \"shared\"\n"
	statusRan := false
	var got seen
	app, errw := configApp(&got)
	app.Commands[1].Action = func(*cli.Context) error { statusRan = true; return nil }
	if code := Main(app, []string{"x", "--config", writeConfig(t, text), "status"}); code != 0 || !statusRan {
		t.Fatalf("status with a file of serve's settings at the top: exit %d: %s", code, errw)
	}

	xdg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", xdg)
	if err := os.MkdirAll(filepath.Join(xdg, "awcp"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(xdg, "awcp", "x.toml"), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	app, errw = configApp(&got)
	if code := Main(app, []string{"x", "serve"}); code != 0 || got.root != "/w" || got.name != "shared" {
		t.Fatalf("without --config, the user's file was not read: exit %d, %+v: %s", code, got, errw)
	}
}

package clikit

import (
	"bytes"
	"path/filepath"
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

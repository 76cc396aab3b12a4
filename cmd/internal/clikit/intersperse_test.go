package clikit

import (
	"slices"
	"testing"

	"github.com/urfave/cli/v2"
)

// Flags go after the arguments too, at a subcommand's level as at a
// command's: `peers trust ID --key KEY` and `peers trust --key KEY ID`
// reach trust with its flag (they reached peers, which has none).
func TestIntersperseFindsTheSubcommand(t *testing.T) {
	app := &cli.App{Name: "awcp-ctl", Commands: []*cli.Command{{
		Name:  "peers",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json"}},
		Subcommands: []*cli.Command{{
			Name:  "trust",
			Flags: []cli.Flag{&cli.StringFlag{Name: "key"}},
		}},
	}}}
	for _, args := range [][]string{
		{"awcp-ctl", "peers", "trust", "ID", "--key", "ssh-ed25519 AAAA"},
		{"awcp-ctl", "peers", "trust", "--key", "ssh-ed25519 AAAA", "ID"},
	} {
		want := []string{"awcp-ctl", "peers", "trust", "--key", "ssh-ed25519 AAAA", "--", "ID"}
		if got := Intersperse(app, args); !slices.Equal(got, want) {
			t.Errorf("%q: %q, want %q", args, got, want)
		}
	}
	if got, want := Intersperse(app, []string{"awcp-ctl", "peers", "other", "--json"}), []string{"awcp-ctl", "peers", "--json", "--", "other"}; !slices.Equal(got, want) {
		t.Errorf("a command's argument: %q, want %q", got, want)
	}
}

package clikit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"

	"github.com/BurntSushi/toml"
	"github.com/urfave/cli/v2"
)

// A config file (--config FILE, TOML) sets a command's flags by their
// names: top-level keys apply to the command being run, and a table named
// after a command applies to that command only, so that one file can
// serve a program's commands:
//
//	log-level = "info"
//	[serve]
//	work-root = "/var/lib/awcp/work"
//	transports = ["sshfs", "archive"]
//
// A top-level key that is no flag of the command being run but is one of
// another command of the program is left to that command (one file serves
// `awcp-ctl export` and `awcp-ctl status` alike); a key that is no flag of
// any command, or a key in a command's table that is none of its flags,
// is an error, so a misspelt setting is never silently ignored. A flag
// on the command line wins, then its environment variable, then the file,
// then the default.
//
// Without --config (or $AWCP_CONFIG), $XDG_CONFIG_HOME/awcp/PROGRAM.toml
// (~/.config/awcp/PROGRAM.toml) is read if it exists: where the README
// and `make install` put it.

// configFlag is the common --config.
func configFlag() cli.Flag {
	return &cli.StringFlag{Name: "config",
		Usage: "TOML file of settings named as the flags (top level, or in a [command] table) [$AWCP_CONFIG]"}
}

// withConfig makes each command (and subcommand) read --config before its
// action, and check its required flags after that, so that the file may
// supply them (urfave/cli checks them before anything else runs).
func withConfig(cmds []*cli.Command, all []string, flags map[string]bool) {
	for _, cmd := range cmds {
		var required []string
		for _, f := range cmd.Flags {
			if sf, ok := f.(*cli.StringFlag); ok && sf.Required {
				sf.Required = false
				required = append(required, sf.Name)
			}
		}
		before := cmd.Before
		cmd.Before = func(c *cli.Context) error {
			if err := applyConfig(c, all, flags); err != nil {
				return err
			}
			for _, name := range required {
				if c.String(name) == "" {
					return UsageError("--%s is required (on the command line, in its environment variable, or as %s in --config)", name, name)
				}
			}
			if before != nil {
				return before(c)
			}
			return nil
		}
		withConfig(cmd.Subcommands, all, flags)
	}
}

// flagNames is every flag name of cmds and their subcommands.
func flagNames(cmds []*cli.Command, into map[string]bool) map[string]bool {
	for _, cmd := range cmds {
		for _, f := range cmd.Flags {
			for _, n := range f.Names() {
				into[n] = true
			}
		}
		flagNames(cmd.Subcommands, into)
	}
	return into
}

// defaultConfig is the settings file read without --config: the user's,
// if there is one.
func defaultConfig(program string) string {
	dir := os.Getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(home, ".config")
	}
	file := filepath.Join(dir, "awcp", program+".toml")
	if _, err := os.Stat(file); err != nil {
		return ""
	}
	return file
}

// commandNames lists every command name of an app, for telling a table
// meant for another command from a misspelt key.
func commandNames(cmds []*cli.Command) []string {
	var out []string
	for _, cmd := range cmds {
		out = append(out, cmd.Names()...)
		out = append(out, commandNames(cmd.Subcommands)...)
	}
	return out
}

// borrowed is, by command name, the command whose table it reads too:
// doctor checks what serve will be given (SettingsOf).
var borrowed = map[string]string{}

// SettingsOf makes command read another's table of a settings file, for
// the keys that are its flags too (its own table and the top level still
// win, and are still checked strictly).
func SettingsOf(command, other string) { borrowed[command] = other }

func applyConfig(c *cli.Context, commands []string, flags map[string]bool) error {
	if c.Command == nil {
		return nil
	}
	file := flag(c, "config")
	if file == "" {
		file = defaultConfig(c.App.Name)
	}
	if file == "" {
		return nil
	}
	var doc map[string]any
	if _, err := toml.DecodeFile(file, &doc); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return UsageError("--config %s: no such file", file)
		}
		return UsageError("--config %s: %v", file, err)
	}
	// The borrowed table's keys this command has, then the top level,
	// then the command's own table over it.
	settings := map[string]any{}
	if other, ok := doc[borrowed[c.Command.Name]].(map[string]any); ok && borrowed[c.Command.Name] != "" {
		for k, v := range other {
			if hasFlag(c.Command, k) {
				settings[k] = v
			}
		}
	}
	for k, v := range doc {
		if _, table := v.(map[string]any); !table && (hasFlag(c.Command, k) || !flags[k] || k == "config") {
			settings[k] = v // the command's own, or no command's: refused below
		}
	}
	for k, v := range doc {
		table, ok := v.(map[string]any)
		switch {
		case !ok:
		case k == c.Command.Name:
			for sk, sv := range table {
				settings[sk] = sv
			}
		case slices.Contains(commands, k):
			// Another command's settings.
		default:
			return UsageError("--config %s: [%s] is no command of this program", file, k)
		}
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := setFromConfig(c, file, k, settings[k]); err != nil {
			return err
		}
	}
	return nil
}

func hasFlag(cmd *cli.Command, name string) bool {
	for _, f := range cmd.Flags {
		if slices.Contains(f.Names(), name) {
			return true
		}
	}
	return false
}

// setFromConfig sets flag key to v unless the command line or the
// environment already gave it.
func setFromConfig(c *cli.Context, file, key string, v any) error {
	var f cli.Flag
	for _, cf := range c.Command.Flags {
		if slices.Contains(cf.Names(), key) {
			f = cf
		}
	}
	if f == nil || key == "config" {
		cmd := c.App.Name + " " + c.Command.FullName()
		return UsageError("--config %s: %q is not a setting of %s (settings are its flags: see %s --help)", file, key, cmd, cmd)
	}
	for _, ctx := range c.Lineage() {
		if ctx.IsSet(key) {
			return nil
		}
	}
	for _, env := range commonEnv[key] {
		if os.Getenv(env) != "" {
			return nil
		}
	}
	values, err := configValues(v)
	if err != nil {
		return UsageError("--config %s: %s: %v", file, key, err)
	}
	if _, list := v.([]any); list && !isList(f) {
		return UsageError("--config %s: %s takes one value, not a list", file, key)
	}
	for _, s := range values {
		if err := c.Set(key, s); err != nil {
			return UsageError("--config %s: %s = %q: %v", file, key, s, err)
		}
	}
	return nil
}

// isList reports whether f may be given several times.
func isList(f cli.Flag) bool {
	switch f.(type) {
	case *cli.StringSliceFlag, *cli.IntSliceFlag, *cli.Int64SliceFlag, *cli.GenericFlag:
		return true
	}
	return false
}

// configValues is v as the command-line strings it stands for: a list is
// one per element.
func configValues(v any) ([]string, error) {
	switch v := v.(type) {
	case string:
		return []string{v}, nil
	case bool:
		return []string{strconv.FormatBool(v)}, nil
	case int64:
		return []string{strconv.FormatInt(v, 10)}, nil
	case float64:
		return []string{strconv.FormatFloat(v, 'g', -1, 64)}, nil
	case []any:
		var out []string
		for _, e := range v {
			s, err := configValues(e)
			if err != nil || len(s) != 1 {
				return nil, fmt.Errorf("a list holds strings, numbers or booleans")
			}
			out = append(out, s...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%v is not a setting's value (use a string, number, boolean or list of them)", v)
}

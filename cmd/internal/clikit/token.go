package clikit

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
)

// Tokens are secrets: given on the command line (--token) they show in
// `ps` and /proc/PID/cmdline to every user of the machine, and in the
// environment (AWCP_TOKEN) they are inherited by every process the daemon
// starts — a delegated agent among them, whose output reaches the
// delegator. --token-file reads them from a file instead.

// TokenFileFlag is --token-file: tokens, one a line.
func TokenFileFlag(usage string) cli.Flag {
	return &cli.StringFlag{Name: "token-file", EnvVars: []string{"AWCP_TOKEN_FILE"}, Usage: usage}
}

// ReadTokenFile reads the tokens of file p: one a line, blank lines and
// lines starting with # skipped. A file others may read is refused.
func ReadTokenFile(p string) ([]string, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, UsageError("--token-file: %v", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Mode().Perm()&0o077 != 0 {
		return nil, UsageError("--token-file %s can be read by others (mode %#o): chmod 600 %s", p, fi.Mode().Perm(), p)
	}
	var tokens []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		tokens = append(tokens, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--token-file %s: %w", p, err)
	}
	if len(tokens) == 0 {
		return nil, UsageError("--token-file %s holds no token", p)
	}
	return tokens, nil
}

// TokenOnCommandLine reports whether a --token was given as an argument
// (not from the environment or a settings file): it shows in ps.
func TokenOnCommandLine() bool {
	for _, a := range os.Args[1:] {
		if a == "--token" || a == "-token" || strings.HasPrefix(a, "--token=") || strings.HasPrefix(a, "-token=") {
			return true
		}
	}
	return false
}

// ScrubSecrets removes from this process's environment, so that no process
// it starts inherits them, AWCP_TOKEN, AWCP_TOKEN_FILE and every variable
// whose value holds one of secrets.
func ScrubSecrets(secrets []string) {
	os.Unsetenv("AWCP_TOKEN")
	os.Unsetenv("AWCP_TOKEN_FILE")
	for _, kv := range os.Environ() {
		name, value, _ := strings.Cut(kv, "=")
		for _, s := range secrets {
			if s != "" && strings.Contains(value, s) {
				os.Unsetenv(name)
				break
			}
		}
	}
}

// PeerToken is the token a delegator sends the executor: --token, else the
// first of --token-file's.
func PeerToken(c *cli.Context) (string, error) {
	if t := c.String("token"); t != "" {
		return t, nil
	}
	if p := c.String("token-file"); p != "" {
		tokens, err := ReadTokenFile(p)
		if err != nil {
			return "", err
		}
		return tokens[0], nil
	}
	return "", nil
}

// CheckSettingsSecrets is doctor's check of the settings file (--config):
// one holding a token must not be readable by others.
func CheckSettingsSecrets(l *Checklist, c *cli.Context) {
	file := flag(c, "config")
	if file == "" {
		return
	}
	fi, err := os.Stat(file)
	if err != nil {
		return // applyConfig has said what is wrong
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return
	}
	holds := false
	for _, line := range strings.Split(string(b), "\n") {
		if key, _, ok := strings.Cut(strings.TrimSpace(line), "="); ok && strings.TrimSpace(key) == "token" {
			holds = true
		}
	}
	switch {
	case holds && fi.Mode().Perm()&0o077 != 0:
		l.Fail("settings file", fmt.Sprintf("%s holds a token and can be read by others (mode %#o)", file, fi.Mode().Perm()),
			"chmod 600 "+file+", or move the token to a --token-file of mode 600")
	case holds:
		l.OK("settings file", file+" holds a token, readable by its owner only")
	}
}

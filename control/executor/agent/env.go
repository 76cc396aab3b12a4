package agent

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strings"
	"syscall"
)

// An agent runs strangers' prompts: it gets a stated environment, not the
// daemon's. From the daemon it keeps where programs are (PATH), the
// locale (LANG, LANGUAGE, LC_*) and the time zone (TZ) — nothing else: not
// the executor's own token (AWCP_TOKEN), a cloud credential, whatever a
// supervisor set. Then what the executor gives it (its fresh HOME and
// TMPDIR, its caches, the AWCP_* of its task) and what the operator names
// (--agent-env NAME, --agent-env-file FILE: Task.Env).

// BaseEnv is what every agent, and every command it has run, keeps of the
// daemon's environment.
func BaseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case name == "PATH", name == "LANG", name == "LANGUAGE", name == "TZ", strings.HasPrefix(name, "LC_"):
			env = append(env, kv)
		}
	}
	return env
}

// envName is what a variable's name may be.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ReservedEnv says why the operator may not name variable name for the
// agents ("" if they may): the executor sets it for each agent itself, or
// it is the executor's secret. (An agent that delegates on, with the
// host's awcp-ctl, may be given AWCP_STATE_DIR and its like.)
func ReservedEnv(name string) string {
	switch name {
	case "HOME", "TMPDIR":
		return "each agent has a fresh one of its own"
	case "AWCP_TOKEN":
		return "the executor's own token is never an agent's"
	case "AWCP_AGENT_CMD", "AWCP_PROMPT", "AWCP_DESCRIPTION", "AWCP_DELEGATION_ID", "AWCP_WORKDIR", "AWCP_ACCESS_MODE",
		"AWCP_SUMMARY_FILE", "AWCP_CALL_CHAIN":
		return "each agent's task sets it"
	}
	if !envName.MatchString(name) {
		return "not a variable's name"
	}
	return ""
}

// ParseEnvFile reads a file of variables for the agents, as systemd's
// EnvironmentFile= takes them: NAME=VALUE lines, blank lines and #
// comments, a value in matching single or double quotes taken without
// them. The file must be the daemon's user's and readable by nobody else
// (mode 0600 or 0400): it holds credentials.
func ParseEnvFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s is readable by others (mode %04o): chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("%s belongs to uid %d, not to this daemon's user", path, st.Uid)
	}
	var env []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := string(bytes.TrimSpace(sc.Bytes()))
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";") {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		name = strings.TrimSpace(name)
		if !ok {
			return nil, fmt.Errorf("%s:%d: not NAME=VALUE", path, n)
		}
		if why := ReservedEnv(name); why != "" {
			return nil, fmt.Errorf("%s:%d: %s: %s", path, n, name, why)
		}
		value = strings.TrimSpace(value)
		if len(value) >= 2 && (value[0] == '"' || value[0] == '\'') && value[len(value)-1] == value[0] {
			value = value[1 : len(value)-1]
		}
		env = append(env, name+"="+value)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return env, nil
}

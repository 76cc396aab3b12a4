package main

import (
	"os"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
	"github.com/awcp/awcp/control/executor/agent"
)

// agentEnvFlags name what of the daemon's environment its agents get
// beyond agent.BaseEnv.
func agentEnvFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "agent-env", EnvVars: []string{"AWCP_AGENT_ENV"},
			Usage: "a variable of this daemon's environment its agents get, e.g. ANTHROPIC_API_KEY (repeatable); they get no other but PATH, the locale and TZ"},
		&cli.StringFlag{Name: "agent-env-file", EnvVars: []string{"AWCP_AGENT_ENV_FILE"},
			Usage: "a file of NAME=VALUE lines the agents get (systemd's EnvironmentFile= form), mode 600"},
	}
}

// agentEnv is what the flags give the agents ("NAME=VALUE"), and the
// names of --agent-env that this daemon's environment does not set.
func agentEnv(c *cli.Context) (env, unset []string, err error) {
	for _, name := range c.StringSlice("agent-env") {
		if why := agent.ReservedEnv(name); why != "" {
			return nil, nil, clikit.UsageError("--agent-env %q: %s", name, why)
		}
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		} else {
			unset = append(unset, name)
		}
	}
	if f := c.String("agent-env-file"); f != "" {
		more, err := agent.ParseEnvFile(f)
		if err != nil {
			return nil, nil, clikit.UsageError("--agent-env-file: %v", err)
		}
		env = append(env, more...)
	}
	return env, unset, nil
}

// envNames are the names of env, each once, sorted: what may be shown of
// the agents' environment (never a value).
func envNames(env []string) string {
	var names []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		names = append(names, name)
	}
	slices.Sort(names)
	return strings.Join(slices.Compact(names), " ")
}

package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
	"github.com/awcp/awcp/internal/sandbox"
)

// sandboxFlags confine the agents (internal/sandbox).
func sandboxFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "sandbox", EnvVars: []string{"AWCP_SANDBOX"}, Value: "auto",
			Usage: "confine every agent and what it starts with Landlock: auto (where the kernel has it; a warning where not), strict (refuse to start without it) or off"},
		&cli.StringSliceFlag{Name: "sandbox-allow", EnvVars: []string{"AWCP_SANDBOX_ALLOW"},
			Usage: "a path the agents may reach beyond their work dir and the system, PATH[:ro|rw] (repeatable; read-only unless :rw), e.g. ~/.claude:rw"},
		&cli.StringFlag{Name: "agent-cache", EnvVars: []string{"AWCP_AGENT_CACHE"}, Value: "delegator",
			Usage: "the agents' build caches (Go, npm, pip, XDG): delegator (kept across a delegator's delegations, one per delegator key: what one of its agents leaves there, the next one's build takes on trust) or delegation (each agent starts cold with a cache of its own, removed with it; off says the same)"},
		&cli.StringSliceFlag{Name: "sandbox-net", EnvVars: []string{"AWCP_SANDBOX_NET"},
			Usage: "restrict the agents' network to TCP connections to these ports (repeatable, e.g. 443); default: not restricted"},
	}
}

// sandboxPolicy is the agents' sandbox as the flags say, nil for off;
// what each of agentCmds runs is readable (sandbox.CommandGrants).
func sandboxPolicy(c *cli.Context, agentCmds ...string) (*sandbox.Policy, error) {
	if v := c.String("agent-cache"); v != "delegator" && v != "delegation" && v != "off" {
		return nil, clikit.UsageError("--agent-cache must be delegator or delegation (or off, the same), not %q", v)
	}
	mode := c.String("sandbox")
	switch mode {
	case "off":
		return nil, nil
	case "auto", "strict":
	default:
		return nil, clikit.UsageError("--sandbox must be auto, strict or off, not %q", mode)
	}
	if abi := sandbox.ABI(); mode == "strict" && abi < sandbox.MinABI {
		return nil, fmt.Errorf("--sandbox strict: this kernel's Landlock ABI is %d; %d (Linux 6.12) is needed", abi, sandbox.MinABI)
	}
	p := &sandbox.Policy{RO: append([]string{}, sandbox.System...), Devices: sandbox.Devices, Strict: mode == "strict",
		Isolated: sandbox.CanIsolate()}
	// What the agent command runs (its program and interpreter, each as
	// the tree it loads from), read-only; and what the operator lends the
	// agents is theirs to use, whichever uid each one runs as.
	for _, cmd := range agentCmds {
		runs := sandbox.CommandGrants(cmd)
		p.RO = append(p.RO, runs...)
		p.Yours = append(p.Yours, runs...)
	}
	for _, v := range c.StringSlice("sandbox-allow") {
		path, rw, err := sandbox.ParseAllow(v)
		if err != nil {
			return nil, clikit.UsageError("%v", err)
		}
		if _, err := os.Stat(path); err != nil {
			// A grant of nothing is a typo: the agent would be refused
			// what the operator meant to give it, with nothing said.
			return nil, clikit.UsageError("--sandbox-allow %q: %v", v, errors.Unwrap(err))
		}
		p.Yours = append(p.Yours, path)
		if rw {
			if err := sandbox.SetidInGrant(path); err != nil {
				var se *sandbox.SetidError
				if errors.As(err, &se) {
					return nil, fmt.Errorf("--sandbox-allow %s: %w; %s", v, err, se.Hint())
				}
				return nil, fmt.Errorf("--sandbox-allow %s: %w", v, err)
			}
			p.RW = append(p.RW, path)
		} else {
			p.RO = append(p.RO, path)
		}
	}
	for _, v := range c.StringSlice("sandbox-net") {
		port, err := strconv.ParseUint(v, 10, 16)
		if err != nil || port == 0 {
			return nil, clikit.UsageError("--sandbox-net takes TCP port numbers, not %q", v)
		}
		p.Net = true
		p.ConnectPorts = append(p.ConnectPorts, uint16(port))
	}
	return p, nil
}

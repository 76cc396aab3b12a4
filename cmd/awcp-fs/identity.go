package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/awcp/awcp/cmd/internal/clikit"
	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/discovery"
)

// idCommand prints this executor's identity: what a delegator pins
// (`awcp-ctl export --peer-key`, `awcp-ctl peers trust --key`) and the
// fingerprint to compare at a first contact.
func idCommand() *cli.Command {
	return &cli.Command{
		Name:  "id",
		Usage: "print this executor's identity key and its fingerprint (made on first use), for delegators to pin",
		Flags: clikit.CommonFlags(),
		Action: func(c *cli.Context) error {
			state, err := clikit.StateDir(c)
			if err != nil {
				return err
			}
			key, err := discovery.IdentityKey(state)
			if err != nil {
				return err
			}
			id, err := discovery.AgentID(state)
			if err != nil {
				return err
			}
			pub := control.IdentityPublic(key)
			fmt.Fprintf(c.App.Writer, "%s\nfingerprint %s\nagent id %s\n", pub, control.Fingerprint(pub), id)
			return nil
		},
	}
}

// readAuthorizedKeys reads an authorized-keys file of delegators' identity
// keys: one key a line (ssh-ed25519 AAAA… [comment]); blank lines and #
// comments skipped. A line that is not such a key is an error naming it.
func readAuthorizedKeys(path string) ([]string, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, clikit.UsageError("--authorized-delegators: %v", err)
	}
	defer f.Close()
	var keys []string
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		pub, err := control.ParseIdentityKey(line)
		if err != nil || pub.Type() != "ssh-ed25519" {
			return nil, clikit.UsageError("--authorized-delegators %s line %d: not an Ed25519 key (ssh-ed25519 AAAA…, as `awcp-ctl peers self` prints it)", path, n)
		}
		keys = append(keys, control.IdentityKeyText(pub))
	}
	if err := sc.Err(); err != nil {
		return nil, clikit.UsageError("--authorized-delegators %s: %v", path, err)
	}
	if len(keys) == 0 {
		// Served with no key and no token, the executor would take
		// delegations from anyone: a file left empty (a Secret not filled
		// in) must not open it.
		return nil, clikit.UsageError("--authorized-delegators %s holds no key: add the delegators' keys (`awcp-ctl peers self` prints one), or drop the flag", path)
	}
	return keys, nil
}

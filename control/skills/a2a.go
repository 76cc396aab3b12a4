package skills

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"strconv"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/internal/untrusted"
)

// A2AAgent is an A2A agent the user named (awcp-ctl skills sync --a2a
// URL), as its card was read now: Card nil if it could not be (Err says
// why), and the skill then says the agent is offline.
type A2AAgent struct {
	URL  string
	Card *control.AgentCard
	Err  string
}

// ForA2A is an A2A agent's skill: when to route a task to it, and
// `awcp-ctl export --peer a2a:URL`. Its card is a stranger's words, taken
// as For takes a manifest's.
func ForA2A(a A2AAgent) Skill {
	sum := sha256.Sum256([]byte(a.URL))
	id := hex.EncodeToString(sum[:4])
	name := "agent"
	if a.Card != nil {
		name = untrusted.Line(a.Card.Name, 60)
	}
	// Named by where it is, not by what its card calls it: the name must
	// not change when the card cannot be read (offline) or is renamed.
	skillName := prefix + "a2a-" + id
	if u, err := url.Parse(a.URL); err == nil {
		if s := slug(u.Hostname(), maxName-len(prefix)-len("a2a-")-len(id)-1); s != "" {
			skillName = prefix + "a2a-" + s + "-" + id
		}
	}
	where := untrusted.Line(a.URL, 300)
	status := "online"
	if a.Card == nil {
		status = "offline"
	}
	desc := fmt.Sprintf("Delegate a task on a local directory to the A2A agent %q at %s: it gets the task and the directory as a ZIP, and its files come back for review.", name, where)
	var said string
	if a.Card != nil {
		if said = untrusted.Line(a.Card.Description, maxSaid); said != "" {
			desc += fmt.Sprintf(" It describes itself as: %q.", said)
		}
	} else {
		desc = "OFFLINE now (its card could not be read). " + desc
	}
	desc += " Use when a task should be done by that agent rather than here."
	if len(desc) > maxDescription {
		desc = desc[:maxDescription]
	}

	var b bytes.Buffer
	b.WriteString("---\n")
	fmt.Fprintf(&b, "name: %s\n", skillName)
	fmt.Fprintf(&b, "description: %s\n", yamlString(desc))
	fmt.Fprintf(&b, "compatibility: %s\n", yamlString("Needs awcp-ctl (the AWCP delegator) on PATH. Linux."))
	b.WriteString("metadata:\n")
	fmt.Fprintf(&b, "  generated-by: %s\n", strconv.Quote(Maker))
	fmt.Fprintf(&b, "  awcp-agent-id: %s\n", strconv.Quote("a2a:"+where))
	version := ""
	if a.Card != nil {
		version = untrusted.Line(a.Card.Version, 80)
	}
	fmt.Fprintf(&b, "  awcp-executor-version: %s\n", strconv.Quote(version))
	fmt.Fprintf(&b, "  awcp-status: %s\n", strconv.Quote(status))
	b.WriteString("---\n\n")

	fmt.Fprintf(&b, "# Delegate to the A2A agent %s\n\n", mdCode(name))
	if a.Card == nil {
		fmt.Fprintf(&b, "**This agent is offline**: its card at %s could not be read (%s). A delegation to it fails until it answers.\n\n",
			mdCode(where), mdText(untrusted.Line(a.Err, 200)))
	}
	b.WriteString("This skill hands a task on a local directory to a remote agent that speaks A2A. The directory is\n" +
		"packed (secrets such as .env and *.pem kept back, .git left out) and sent with the task; the files\n" +
		"the agent sends back go through review before anything of the directory is touched.\n\n")
	b.WriteString("## How to delegate\n\n```sh\n")
	peer := "--peer " + shellWord("a2a:"+where)
	if u, err := url.Parse(a.URL); err == nil && u.Scheme == "http" {
		peer += " --plain-http"
	}
	writeHowTo(&b, peer)
	b.WriteString("- `--snapshot staged` leaves the directory untouched: show the change with `awcp-ctl diff ID`, then\n" +
		"  `awcp-ctl apply ID` or `awcp-ctl discard ID` as the user decides.\n" +
		"- `--token-file FILE` gives the agent its token, if it asks for one.\n\n")
	if a.Card != nil {
		caps := make([]control.ManifestCapability, 0, len(a.Card.Skills))
		for _, s := range a.Card.Skills {
			caps = append(caps, control.ManifestCapability{ID: s.ID, Description: s.Description})
		}
		if skills := offered(caps); len(skills) > 0 {
			b.WriteString("## What it offers\n\nIts skills, as its card names them:\n\n")
			for _, s := range skills {
				fmt.Fprintf(&b, "- %s\n", s)
			}
		}
		writeSaid(&b, said, "its card")
	}
	return Skill{Name: skillName, Content: b.Bytes()}
}

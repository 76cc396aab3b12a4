package discovery

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/awcp/awcp/control"
)

// Auto is the peer argument that lets Resolve choose.
const Auto = "auto"

// Want is what a delegation needs of its executor.
type Want struct {
	// Transport is auto, sshfs or archive; Access rw or ro.
	Transport, Access string
	// Self is this agent, which auto never chooses (named, it may be: a
	// person trying both programs on one machine); Exclude are the agents
	// the delegation passed through (control.CallChainEnv), never chosen.
	Self    string
	Exclude []string
}

// Resolve finds the executor arg names among peers: an agent id (or a
// unique prefix of one, eight characters at least), a name, or Auto. It
// refuses, saying why, a peer that is offline, excluded, a name two
// online peers claim, and a name that now answers with another agent id
// than the book remembers for it (an impostor, or a reinstall: the user
// then names it by id). why says how the peer was chosen.
func Resolve(peers []Peer, arg string, want Want) (p Peer, why string, err error) {
	if arg == Auto {
		return choose(peers, want)
	}
	if domain, ok := DomainOf(arg); ok {
		p, why, err := choose(Among(peers, arg), want)
		if err != nil {
			return Peer{}, "", fmt.Errorf("under %s: %w", domain, err)
		}
		return p, "dns " + domain + " " + why, nil
	}
	var byID, byName []Peer
	for _, p := range peers {
		switch {
		case p.AgentID == arg, len(arg) >= 8 && strings.HasPrefix(p.AgentID, arg):
			byID = append(byID, p)
		case strings.EqualFold(p.Name, arg):
			byName = append(byName, p)
		}
	}
	// Names and ids on mDNS are claims: only a peer whose key the user
	// trusts is chosen, by id or by name.
	switch {
	case len(byID) == 1:
		p = byID[0]
	case len(byID) > 1:
		return Peer{}, "", fmt.Errorf("%q is the start of several agent ids: %s; give more of it", arg, ids(byID))
	case len(byName) == 0:
		return Peer{}, "", fmt.Errorf("no executor called %q has been found on this network; `awcp-ctl peers` lists those that have", arg)
	default:
		online := slices.DeleteFunc(slices.Clone(byName), func(p Peer) bool { return !p.Online })
		trusted := slices.DeleteFunc(slices.Clone(byName), func(p Peer) bool { return p.TrustedKey == "" })
		switch {
		case len(trusted) == 1 && trusted[0].Online:
			p = trusted[0] // the others claiming its name are not trusted: ignored
		case len(online) > 1:
			return Peer{}, "", fmt.Errorf("%d executors online call themselves %q (%s): name one by its agent id", len(online), arg, ids(online))
		case len(online) == 1 && len(byName) > 1:
			return Peer{}, "", fmt.Errorf("%q now answers as agent %s, but was agent %s before: if that is expected (a reinstall), name it by its id",
				arg, online[0].AgentID, ids(slices.DeleteFunc(byName, func(p Peer) bool { return p.Online })))
		case len(online) == 1:
			p = online[0]
		default:
			p = newest(byName)
		}
	}
	if !p.Online {
		return Peer{}, "", fmt.Errorf("executor %s (%s) is offline: %s", p.Name, p.AgentID, OfflineSince(p))
	}
	if slices.Contains(want.Exclude, p.AgentID) {
		return Peer{}, "", fmt.Errorf("executor %s (%s) is already in this delegation's call chain %s: delegating there would be circular",
			p.Name, p.AgentID, control.FormatCallChain(want.Exclude))
	}
	if !p.Trusted() {
		return Peer{}, "", notTrusted(p)
	}
	return p, "named " + arg, nil
}

// DomainOf is the domain of a peer argument dns:DOMAIN.
func DomainOf(arg string) (string, bool) {
	d, ok := strings.CutPrefix(arg, "dns:")
	if !ok || CanonicalDomain(d) == "" {
		return "", false
	}
	return CanonicalDomain(d), true
}

// Chooses says whether arg lets auto choose: auto, or dns:DOMAIN.
func Chooses(arg string) bool {
	_, dns := DomainOf(arg)
	return arg == Auto || dns
}

// Among are the peers arg chooses among: those found under DOMAIN for
// dns:DOMAIN, all of them otherwise.
func Among(peers []Peer, arg string) []Peer {
	d, ok := DomainOf(arg)
	if !ok {
		return peers
	}
	return slices.DeleteFunc(slices.Clone(peers), func(p Peer) bool { return p.Via != ViaDNS(d) })
}

// MaxFallbacks bounds how many executors one delegation invites in turn.
const MaxFallbacks = 16

// Fallbacks are the executors auto would take after chosen for arg (auto
// or dns:DOMAIN; none for an arg naming one), best first, at most
// MaxFallbacks: invited in turn while one declines for want of a free
// slot (many delegations started at once all see the same free slots).
func Fallbacks(peers []Peer, arg string, want Want, chosen string) []Peer {
	if !Chooses(arg) {
		return nil
	}
	fit, _ := ranked(Among(peers, arg), want)
	fit = slices.DeleteFunc(fit, func(p Peer) bool { return p.AgentID == chosen })
	return fit[:min(len(fit), MaxFallbacks)]
}

// choose picks, among the online executors that can take the delegation
// now, the one with the live mount (when the transport is auto or sshfs)
// and the most free slots; a name breaks ties, so the choice is stable.
func choose(peers []Peer, want Want) (Peer, string, error) {
	fit, err := ranked(peers, want)
	if err != nil {
		return Peer{}, "", err
	}
	p := fit[0]
	how := "archive"
	if want.Transport != control.TransportArchive && p.Manifest.AWCP.FUSE {
		how = "live mount"
	}
	return p, fmt.Sprintf("auto: %s, %d of %d slots free", how, p.Manifest.AWCP.FreeSlots, p.Manifest.AWCP.MaxConcurrent), nil
}

// ChooseN is what auto chooses for n attempts at one task: the n best of
// the trusted executors online that can take it, each once, best first;
// an error if fewer than n can.
func ChooseN(peers []Peer, want Want, n int) ([]Peer, error) {
	fit, err := ranked(peers, want)
	if err != nil {
		return nil, err
	}
	if len(fit) < n {
		return nil, fmt.Errorf("%d attempts asked, and %d trusted executor(s) online can take one: %s", n, len(fit), ids(fit))
	}
	return fit[:n], nil
}

// ranked are the trusted executors online that can take the delegation,
// the best first: a live mount where one is wanted and possible, then the
// most free slots.
func ranked(peers []Peer, want Want) ([]Peer, error) {
	var fit []Peer
	var refused []string
	for _, p := range peers {
		if !p.Online {
			continue
		}
		if !p.Trusted() {
			refused = append(refused, fmt.Sprintf("%s: not trusted (`awcp-ctl peers trust %s`)", p.Name, p.AgentID))
			continue
		}
		if why := unfit(p, want); why != "" {
			refused = append(refused, fmt.Sprintf("%s: %s", p.Name, why))
			continue
		}
		fit = append(fit, p)
	}
	if len(fit) == 0 {
		if len(refused) == 0 {
			return nil, fmt.Errorf("no executor is online (`awcp-ctl peers` shows what was found)")
		}
		return nil, fmt.Errorf("no executor online can take this delegation now: %s", strings.Join(refused, "; "))
	}
	live := func(p Peer) bool { return want.Transport != control.TransportArchive && p.Manifest.AWCP.FUSE }
	slices.SortStableFunc(fit, func(x, y Peer) int {
		if live(x) != live(y) {
			if live(x) {
				return -1
			}
			return 1
		}
		if d := y.Manifest.AWCP.FreeSlots - x.Manifest.AWCP.FreeSlots; d != 0 {
			return d
		}
		return strings.Compare(x.Name+x.AgentID, y.Name+y.AgentID)
	})
	return fit, nil
}

// unfit says why p cannot take the delegation now, or "".
func unfit(p Peer, want Want) string {
	a := p.Manifest
	switch {
	case p.AgentID == want.Self:
		return "this agent itself"
	case slices.Contains(want.Exclude, p.AgentID):
		return "already in this delegation's call chain"
	case a == nil || a.AWCP == nil:
		if p.ManifestError != "" {
			return "no manifest (" + p.ManifestError + ")"
		}
		return "no AWCP manifest"
	case a.AWCP.FreeSlots <= 0:
		return "no free slot"
	case want.Transport != "" && want.Transport != "auto" && !slices.Contains(a.AWCP.Transports, want.Transport):
		return "does not offer " + want.Transport
	case len(a.AWCP.Transports) == 0:
		return "offers no transport now"
	case want.Access == control.AccessRW && !slices.Contains(a.AWCP.AccessModes, control.AccessRW):
		return "read-only"
	}
	return ""
}

func ids(ps []Peer) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.AgentID)
	}
	return strings.Join(s, ", ")
}

func newest(ps []Peer) Peer {
	return slices.MaxFunc(ps, func(x, y Peer) int { return x.LastSeen.Compare(y.LastSeen) })
}

// OfflineSince says how an offline peer went, and how long ago.
func OfflineSince(p Peer) string {
	how := "not answering"
	switch p.Gone {
	case GoneWithdrawn:
		how = "withdrawn"
	case GoneUnreachable:
		how = "listed in DNS, not answering"
	}
	if p.LastSeen.IsZero() {
		return how
	}
	return fmt.Sprintf("%s, last seen %s ago", how, time.Since(p.LastSeen).Round(time.Second))
}

// notTrusted says why p may not be chosen, and what to do.
func notTrusted(p Peer) error {
	key := p.Key()
	switch {
	case key == "":
		return fmt.Errorf("executor %s (%s) shows no identity key, so it cannot prove who it is: give its URL with --peer https://host:port if you trust that address", p.Name, p.AgentID)
	case p.TrustedKey == "":
		return fmt.Errorf("executor %s (%s) is not trusted yet; its key is %s: check that `awcp-fs serve` on it logs that identity, then run `awcp-ctl peers trust %s`",
			p.Name, p.AgentID, control.Fingerprint(key), p.AgentID)
	default:
		return fmt.Errorf("executor %s (%s) now shows key %s, not the %s trusted for it: an impostor, or a reinstall — check it, then `awcp-ctl peers trust %s` again",
			p.Name, p.AgentID, control.Fingerprint(key), control.Fingerprint(p.TrustedKey), p.AgentID)
	}
}

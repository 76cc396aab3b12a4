package sftpwire

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/awcp/awcp/internal/untrusted"
)

// Policy is our extension, announced in VERSION when the export refuses
// more than its access mode does: the extension's data is the policy as
// Policy.Encode writes it. The server enforces it whatever the client
// does; a client that reads it knows which requests may be refused, and
// waits for their answers instead of sending them behind (a remove under
// NoDelete, a create of a hidden name).
const Policy = "policy@awcp"

// ExportPolicy is what an export refuses beyond its access mode. The zero
// value refuses nothing.
type ExportPolicy struct {
	// Hide are patterns of names that are not lent (Hidden): they are left
	// out of listings, and every request naming one is refused.
	Hide []string
	// NoDelete refuses REMOVE, RMDIR and a rename over an existing name.
	NoDelete bool
	// MaxWriteBytes bounds the bytes written through all the delegation's
	// sessions together; 0 is no bound. The WRITE that would pass it is
	// refused.
	MaxWriteBytes int64
	// ProtectGit refuses every change to a path git executes or obeys
	// (untrusted.GitControlled: .git/config, hooks, info, …) in any
	// repository of the export; the rest of a repository stays writable.
	ProtectGit bool
	// WriteScope, if set, is the one directory (slash-separated,
	// relative to the export) the executor may change: everything
	// outside it is read-only to it (a scope of a task split among
	// executors).
	WriteScope string
}

// Zero reports whether p refuses nothing.
func (p ExportPolicy) Zero() bool {
	return len(p.Hide) == 0 && !p.NoDelete && p.MaxWriteBytes == 0 && !p.ProtectGit && p.WriteScope == ""
}

// Within reports whether rel, a slash-separated path relative to the
// export ("." its root), is dir or beneath it.
func Within(rel, dir string) bool {
	rel, dir = path.Clean(rel), path.Clean(dir)
	return rel == dir || strings.HasPrefix(rel, dir+"/")
}

// MaxPolicyBytes bounds an encoded policy: it travels in VERSION, which
// a client reads whole before anything else.
const MaxPolicyBytes = 16 << 10

// Encode is the policy as the extension's data: one line per rule,
// "no-delete", "protect-git", "max-write-bytes=N", "hide=PATTERN", in
// that order.
func (p ExportPolicy) Encode() string {
	var b strings.Builder
	if p.NoDelete {
		b.WriteString("no-delete\n")
	}
	if p.ProtectGit {
		b.WriteString("protect-git\n")
	}
	if p.MaxWriteBytes > 0 {
		fmt.Fprintf(&b, "max-write-bytes=%d\n", p.MaxWriteBytes)
	}
	if p.WriteScope != "" {
		b.WriteString("write-scope=" + p.WriteScope + "\n")
	}
	for _, h := range p.Hide {
		b.WriteString("hide=" + h + "\n")
	}
	return b.String()
}

// DecodePolicy reads Encode's lines. Lines it does not know are skipped:
// a later server may refuse more, and the client then only waits less.
func DecodePolicy(s string) ExportPolicy {
	var p ExportPolicy
	for _, line := range strings.Split(s, "\n") {
		switch key, val, _ := strings.Cut(line, "="); key {
		case "no-delete":
			p.NoDelete = true
		case "protect-git":
			p.ProtectGit = true
		case "max-write-bytes":
			p.MaxWriteBytes, _ = strconv.ParseInt(val, 10, 64)
		case "hide":
			p.Hide = append(p.Hide, val)
		case "write-scope":
			p.WriteScope = val
		}
	}
	return p
}

// CheckHidePattern reports what is wrong with a hide pattern, if anything.
func CheckHidePattern(pat string) error {
	switch {
	case pat == "" || strings.Trim(pat, "/") == "":
		return fmt.Errorf("hide pattern %q: empty", pat)
	case strings.ContainsAny(pat, "\n\x00"):
		return fmt.Errorf("hide pattern %q: holds a newline or NUL", pat)
	case strings.HasPrefix(pat, "/"):
		return fmt.Errorf("hide pattern %q: patterns are relative to the directory lent, anywhere in it (drop the leading /)", pat)
	}
	if _, err := path.Match(strings.TrimSuffix(pat, "/"), ""); err != nil {
		return fmt.Errorf("hide pattern %q: %v", pat, err)
	}
	return nil
}

// Hidden reports whether rel, a slash-separated path relative to the
// export's root ("." for the root), is hidden by patterns. A pattern is
// path.Match's, with a trailing "/" ignored. Without a "/" inside, it
// matches a name at any depth, which hides everything beneath it too
// (".env*", "*.pem", ".aws"). With one, it matches that many consecutive
// names anywhere (".git/config", "secrets/*.json"), and hides what is
// beneath them. The root itself is never hidden.
func Hidden(patterns []string, rel string) bool { return NewMatcher(patterns).Hidden(rel) }

// Matcher is hide patterns made ready once for the tests of many paths.
// The nil *Matcher hides nothing.
type Matcher struct {
	pats [][]namePattern // each pattern's names
}

// namePattern is one name of a hide pattern, made ready to test names:
// the common shapes (a plain name, name*, *.ext) without path.Match, which
// a listing otherwise runs for each entry and pattern (an eighth of the
// delegator's CPU in a walk of a large tree).
type namePattern struct {
	glob string // the name as given
	kind byte   // one of the kinds below
	text string // the name, its prefix or its suffix
}

const (
	patGlob   byte = iota // path.Match
	patExact              // a name without wildcards
	patPrefix             // text*
	patSuffix             // *text
)

func newNamePattern(glob string) namePattern {
	const meta = `*?[\\`
	glob = untrusted.Fold(glob)
	switch {
	case !strings.ContainsAny(glob, meta):
		return namePattern{glob: glob, kind: patExact, text: glob}
	case strings.HasSuffix(glob, "*") && !strings.ContainsAny(glob[:len(glob)-1], meta):
		return namePattern{glob: glob, kind: patPrefix, text: glob[:len(glob)-1]}
	case strings.HasPrefix(glob, "*") && !strings.ContainsAny(glob[1:], meta):
		return namePattern{glob: glob, kind: patSuffix, text: glob[1:]}
	}
	return namePattern{glob: glob, kind: patGlob}
}

// match compares without case: on a case-insensitive file system (a
// Mac's APFS, ext4's casefold directories) `.ENV` opens `.env`, so a
// pattern hides every spelling of the names it matches. The pattern is
// folded once; a name is folded only where it is not plain ASCII (the
// common case costs no allocation).
func (p namePattern) match(name string) bool {
	switch p.kind {
	case patExact:
		return strings.EqualFold(name, p.text)
	case patPrefix:
		if ascii(name) {
			return len(name) >= len(p.text) && strings.EqualFold(name[:len(p.text)], p.text)
		}
		return strings.HasPrefix(untrusted.Fold(name), p.text)
	case patSuffix:
		if ascii(name) {
			return len(name) >= len(p.text) && strings.EqualFold(name[len(name)-len(p.text):], p.text)
		}
		return strings.HasSuffix(untrusted.Fold(name), p.text)
	}
	ok, _ := path.Match(p.glob, untrusted.Fold(name))
	return ok
}

func ascii(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// NewMatcher prepares patterns; nil if there are none.
func NewMatcher(patterns []string) *Matcher {
	if len(patterns) == 0 {
		return nil
	}
	m := &Matcher{}
	for _, pat := range patterns {
		var names []namePattern
		for _, name := range strings.Split(strings.Trim(pat, "/"), "/") {
			names = append(names, newNamePattern(name))
		}
		m.pats = append(m.pats, names)
	}
	return m
}

// Hidden is the package's Hidden with m's patterns.
func (m *Matcher) Hidden(rel string) bool {
	if m == nil || rel == "." || rel == "" {
		return false
	}
	names := strings.Split(strings.Trim(rel, "/"), "/")
	for _, parts := range m.pats {
		for i := 0; i+len(parts) <= len(names); i++ {
			if matchAll(parts, names[i:i+len(parts)]) {
				return true
			}
		}
	}
	return false
}

// HiddenLeaf is the package's HiddenLeaf with m's patterns.
func (m *Matcher) HiddenLeaf(rel string) bool {
	if m == nil || rel == "." || rel == "" {
		return false
	}
	names := strings.Split(strings.Trim(rel, "/"), "/")
	for _, parts := range m.pats {
		if len(parts) <= len(names) && matchAll(parts, names[len(names)-len(parts):]) {
			return true
		}
	}
	return false
}

// Splits reports whether moving rel elsewhere could unhide a path beneath
// it: a pattern of several names whose first names match rel's last ones
// (.docker/config.json and rel .docker or a/.docker) hides paths below rel
// only while rel keeps its name. A pattern of one name hides by that name
// wherever it is, so moving a parent changes nothing for it.
func (m *Matcher) Splits(rel string) bool {
	if m == nil || rel == "." || rel == "" {
		return false
	}
	names := strings.Split(strings.Trim(rel, "/"), "/")
	for _, parts := range m.pats {
		for j := 1; j < len(parts) && j <= len(names); j++ {
			if matchAll(parts[:j], names[len(names)-j:]) {
				return true
			}
		}
	}
	return false
}

// HiddenLeaf is Hidden for a client walking down the tree, which has
// reached rel's parent: only the matches that end at rel's last name are
// looked for (a hidden parent could not have been reached).
func HiddenLeaf(patterns []string, rel string) bool { return NewMatcher(patterns).HiddenLeaf(rel) }

func matchAll(parts []namePattern, names []string) bool {
	for i, p := range parts {
		if !p.match(names[i]) {
			return false
		}
	}
	return true
}

// DefaultHide is what an export hides unless told otherwise: names that
// usually hold secrets (keys, tokens, credentials) and that an agent
// editing a project rarely needs. Not .git/config: git refuses to work
// without it; a remote's credentials belong in .git-credentials.
var DefaultHide = []string{
	".env", ".env.*", "*.pem", "*.key", "*.p12", "*.pfx", "id_rsa*", "id_ecdsa*", "id_ed25519*", "id_dsa*",
	".npmrc", ".pypirc", ".netrc", ".git-credentials", ".aws", ".ssh", ".gnupg", ".docker/config.json",
	".kube/config",
}

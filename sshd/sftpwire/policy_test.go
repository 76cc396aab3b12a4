package sftpwire

import (
	"path"
	"reflect"
	"testing"

	"github.com/awcp/awcp/internal/untrusted"
)

func TestHidden(t *testing.T) {
	pats := []string{".env", ".env.*", "*.pem", ".aws/", "config/secrets.json"}
	for rel, want := range map[string]bool{
		".":                       false,
		".env":                    true,
		"app/.env":                true,
		".env.local":              true,
		".envrc":                  false,
		"certs/server.pem":        true,
		"server.pem.txt":          false,
		".aws":                    true,
		".aws/credentials":        true,
		"home/.aws/config":        true,
		"config/secrets.json":     true,
		"app/config/secrets.json": true,
		"config/other.json":       false,
		"secrets.json":            false,
		"src/main.go":             false,
	} {
		if got := Hidden(pats, rel); got != want {
			t.Errorf("Hidden(%q) = %v, want %v", rel, got, want)
		}
	}
	// The mount, walking down, asks only about the last name: a path whose
	// parent is hidden was refused on the way.
	for rel, want := range map[string]bool{"app/.env": true, "a/config/secrets.json": true, ".aws/credentials": false, "src/x.go": false} {
		if got := HiddenLeaf(pats, rel); got != want {
			t.Errorf("HiddenLeaf(%q) = %v, want %v", rel, got, want)
		}
	}
}

func TestPolicyEncoding(t *testing.T) {
	p := ExportPolicy{Hide: []string{".env", "a/*.key"}, NoDelete: true, MaxWriteBytes: 1 << 20}
	if got := DecodePolicy(p.Encode()); !reflect.DeepEqual(got, p) {
		t.Fatalf("decoded %+v, want %+v", got, p)
	}
	if got := DecodePolicy("later-rule=1\nno-delete\n"); !got.NoDelete || len(got.Hide) != 0 {
		t.Fatalf("an unknown rule: %+v", got)
	}
	if !(ExportPolicy{}).Zero() || p.Zero() {
		t.Fatal("Zero")
	}
	for _, bad := range []string{"", "/", "/etc/passwd", "a\nb", "[", "x\x00"} {
		if CheckHidePattern(bad) == nil {
			t.Errorf("pattern %q accepted", bad)
		}
	}
	for _, good := range DefaultHide {
		if err := CheckHidePattern(good); err != nil {
			t.Errorf("default %q: %v", good, err)
		}
	}
}

// TestNamePatternsMatchAsPathMatch: the shapes matched without path.Match
// match exactly what path.Match does, on names folded.
func TestNamePatternsMatchAsPathMatch(t *testing.T) {
	globs := append([]string{"*", "**", "a*", "*a", "*.", ".*", "a*b", "[ab]*", `\*x`, "x\\", "[", "?x", "id_rsa*", "*.pem", ".env.*", ".env"}, DefaultHide...)
	names := []string{"", "a", "b", "ab", "ba", "a.", ".a", "*x", "xx", "x", "id_rsa", "id_rsa.pub", "key.pem", ".pem", "pem", ".env", ".env.local", ".envrc", "[", "a*b",
		"A", "AB", ".ENV", ".Env.Local", "ID_RSA.pub", "Key.PEM", "\u212Aey.pem", "é.pem", "É.PEM"}
	for _, g := range globs {
		p := newNamePattern(g)
		for _, n := range names {
			want, _ := path.Match(untrusted.Fold(g), untrusted.Fold(n))
			if got := p.match(n); got != want {
				t.Errorf("%q against %q: %v, path.Match says %v", g, n, got, want)
			}
		}
	}
}

// On a case-insensitive file system `.ENV` opens `.env`: every spelling
// of a hidden name is hidden, at any depth, by each pattern shape.
func TestHiddenWithoutCase(t *testing.T) {
	m := NewMatcher(append([]string{".git", "secrets/*.json", "Private*"}, DefaultHide...))
	for _, rel := range []string{".ENV", "sub/.Env.Local", "ID_RSA", "keys/server.PEM", ".GIT/config", "a/SECRETS/Db.JSON", "private-notes", "PRIVATE.txt", "x/\u212Aey.pem"} {
		if !m.Hidden(rel) {
			t.Errorf("%s is not hidden", rel)
		}
	}
	for _, rel := range []string{"ENVIRONMENT.md", "src/main.go", "Secrets.md", "README"} {
		if m.Hidden(rel) {
			t.Errorf("%s is hidden", rel)
		}
	}
}

package untrusted

import (
	"errors"
	"strings"
	"testing"
)

// A message two parsers read two ways is refused, at any depth; an honest
// one passes.
func TestJSONKeys(t *testing.T) {
	for _, ok := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"fs/read_text_file","params":{"path":"/p/a","sessionId":"s"}}`,
		`[{"a":1},{"a":2}]`, `"x"`, `{"a":{"b":[{"c":1,"C2":2}]}}`,
	} {
		if err := JSONKeys([]byte(ok)); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
	for _, bad := range []string{
		`{"path":"/etc/passwd","PATH":"/p/notes.txt"}`,
		`{"params":{"path":"/etc/passwd","path":"/p/notes.txt"}}`,
		`{"a":[{"b":{"Path":1,"pAth":2}}]}`,
		`{"method":"session/update","Method":"terminal/create"}`,
		"{\"k\":1,\"\u212a\":2}",                            // the Kelvin sign, which Go's decoder takes for k
		"{\"s\":1,\"\u017f\":2}",                            // the long s
		`{"path":"/etc/passwd","p\u0061th":"/p/notes.txt"}`, // an escape
		`{"path":"/etc/passwd","P\u0041TH":"/p/notes.txt"}`,
		`{"a":1} {"a":2}`,
		strings.Repeat("[", 300) + strings.Repeat("]", 300),
	} {
		if err := JSONKeys([]byte(bad)); !errors.Is(err, ErrAmbiguousJSON) {
			t.Errorf("%.60s: %v, want ambiguous", bad, err)
		}
	}
	if err := JSONKeys([]byte(`{"a":`)); err == nil {
		t.Error("a cut message passed")
	}
	if _, err := ExactObject([]byte(`{"path":"/a","Path":"/b"}`), "path"); err == nil {
		t.Error("ExactObject took case variants")
	}
	if _, err := ExactObject([]byte(`{"PATH":"/a"}`), "path"); err == nil {
		t.Error("ExactObject took a key of another case")
	}
	if m, err := ExactObject([]byte(`{"path":"/a"}`), "path", "line"); err != nil || string(m["path"]) != `"/a"` {
		t.Errorf("ExactObject: %v %v", m, err)
	}
}

func TestGitControlled(t *testing.T) {
	for _, p := range []string{
		".git/config", ".git/config.worktree", ".git/hooks", ".git/hooks/post-checkout", ".git/info/attributes",
		".git/objects/info/alternates", ".git/objects/info/http-alternates", ".git/objects/info", ".git/objects",
		".git/modules/sub/config", ".git/worktrees/w/gitdir", ".git/commondir", ".git",
		"vendor/lib/.git/config", "new/.git/hooks/pre-commit", "a/.git",
	} {
		if !GitControlled(p) {
			t.Errorf("%s not controlled", p)
		}
	}
	for _, p := range []string{
		".git/objects/ab/cdef", ".git/refs/heads/main", ".git/index", ".git/index.lock", ".git/HEAD",
		".git/config.lock", ".git/logs/HEAD", ".git/COMMIT_EDITMSG", ".git/objects/info/commit-graph",
		".git/objects/pack/pack-1.pack", "config", "hooks/x", "src/.gitignore", ".github/workflows/ci.yml", "x.git/config",
	} {
		if GitControlled(p) {
			t.Errorf("%s controlled", p)
		}
	}
	if !GitDir("a/.git") || !GitDir(".git") || GitDir("a/.git/x") || GitDir("x.git") {
		t.Error("GitDir")
	}
}

func TestLine(t *testing.T) {
	for _, c := range []struct {
		in   string
		max  int
		want string
	}{
		{"build box", 100, "build box"},
		{"two\nlines\r\n\n# Heading", 100, "two lines # Heading"},
		{"\x1b[2Jclear\tscreen", 100, "[2Jclear screen"},
		{"left\u202eright\u200bzero", 100, "leftrightzero"},
		{"para\u2029graph\u2028line\u0085next", 100, "para graph line next"},
		{"bad\xffbyte", 100, "badbyte"},
		{"  padded  ", 100, "padded"},
		{"héllo wörld", 6, "héllo"},
		{"ab cd", 3, "ab"},
		{"日本語", 7, "日本"},
	} {
		got := Line(c.in, c.max)
		if got != c.want {
			t.Errorf("Line(%q, %d) = %q, want %q", c.in, c.max, got, c.want)
		}
		if len(got) > c.max || strings.ContainsAny(got, "\n\r") {
			t.Errorf("Line(%q, %d) = %q: over its bound or several lines", c.in, c.max, got)
		}
	}
}

func TestClip(t *testing.T) {
	for in, want := range map[string]string{"shor": "shor", "abcdefgh": "abcd…", "日本語": "日…", "ab日": "ab…"} {
		if got := Clip(in, 4); got != want {
			t.Errorf("Clip(%q, 4) = %q, want %q", in, got, want)
		}
	}
}

// A name or text from the other machine reads as it is: a bidirectional
// override or isolate is escaped wherever it is printed, and a name with
// any format character (a zero-width space too) is quoted.
func TestBidiControlsEscaped(t *testing.T) {
	for _, s := range []string{"invoice\u202etxt.exe", "a\u2066b", "a\u200fb", "a\u061cb", "two\u200bnames"} {
		if n := Name(s); !strings.HasPrefix(n, `"`) || strings.ContainsAny(n, "\u202e\u2066\u200f\u061c\u200b") {
			t.Errorf("Name(%q) = %q", s, n)
		}
	}
	if got := Text("ok \u202eexe.txt\u202c\nline 2 \U0001F468\u200d\U0001F4BB"); got != `ok \u202eexe.txt\u202c`+"\nline 2 \U0001F468\u200d\U0001F4BB" {
		t.Errorf("Text: %q", got)
	}
	if Name("plain-name_1.txt") != "plain-name_1.txt" || Text("café\n") != "café\n" {
		t.Errorf("plain text changed")
	}
}

// On a case-insensitive file system (a Mac's, ext4's casefold) every
// spelling of a controlled path is that path: each is controlled.
func TestGitControlledWithoutCase(t *testing.T) {
	for _, rel := range []string{".GIT/config", ".Git/Config", "sub/.GIT/HOOKS/pre-commit", ".git/INFO/attributes",
		".GIT/objects/INFO/Alternates", ".GIT", "a/.gIt/CommonDir"} {
		if !GitControlled(rel) {
			t.Errorf("%s is not controlled", rel)
		}
	}
	for _, rel := range []string{".GIT/refs/heads/main", ".Git/OBJECTS/ab/cdef", "GIT/config", ".gitconfig"} {
		if GitControlled(rel) {
			t.Errorf("%s is controlled", rel)
		}
	}
	if !GitDir("a/.GIT") || !UnderGit("x/.Git/index") {
		t.Errorf(".GIT is not a git dir")
	}
}

package a2apeer

import (
	"net/url"
	"testing"
)

// A file part's name is a path of the directory, or nothing.
func TestResultName(t *testing.T) {
	for in, want := range map[string]string{
		"notes.md": "notes.md", "a/./b/../c.txt": "a/c.txt", "docs/x": "docs/x",
		"../escape": "", "a/../../b": "", "/etc/passwd": "", "": "", ".": "", "..": "",
		"a\\b": "", "nul\x00": "", "line\nbreak": "", "esc\x1b[2J": "",
	} {
		if got := resultName(in); got != want {
			t.Errorf("resultName(%q) = %q, want %q", in, got, want)
		}
	}
}

// A card may send tasks to the server it came from, under a loopback name
// for a loopback address; anywhere else is refused.
func TestSameServer(t *testing.T) {
	u := func(s string) *url.URL { v, _ := url.Parse(s); return v }
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{"https://agent.example:8443", "https://agent.example:8443/a2a", true},
		{"http://127.0.0.1:18777", "http://localhost:18777/", true},
		{"http://127.0.0.1:18777", "http://[::1]:18777/", true},
		{"https://agent.example:8443", "https://evil.example:8443/a2a", false},
		{"https://agent.example:8443", "http://agent.example:8443/a2a", false},
		{"https://agent.example:8443", "https://agent.example:9443/a2a", false},
		{"http://127.0.0.1:18777", "http://10.0.0.1:18777/", false},
	} {
		if got := sameServer(u(c.a), u(c.b)); got != c.same {
			t.Errorf("sameServer(%s, %s) = %v", c.a, c.b, got)
		}
	}
}

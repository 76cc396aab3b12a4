package a2apeer

import (
	"encoding/base64"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
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

// The workspace's base64 goes where the message's mark is, streamed from
// its file, and nowhere else: not into a prompt that reads like a mark.
func TestSpliceWorkspace(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ws.zip")
	os.WriteFile(file, []byte("the zip's bytes"), 0o600)
	body := `{"parts":[{"text":"awcp-workspace-base64"},{"text":"` + workspaceMark[:len(workspaceMark)-1] + `"},{"file":{"bytes":"` + workspaceMark + `"}}]}`
	r, _ := http.NewRequest(http.MethodPost, "http://agent.example/a2a", strings.NewReader(body))
	r, err := spliceWorkspace(r, file)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r.Body)
	want := strings.Replace(body, `"`+workspaceMark+`"`, `"`+base64.StdEncoding.EncodeToString([]byte("the zip's bytes"))+`"`, 1)
	if string(got) != want || r.ContentLength != int64(len(want)) || r.Header.Get("Expect") != "100-continue" {
		t.Errorf("spliced %q (length %d), want %q", got, r.ContentLength, want)
	}
	again, _ := r.GetBody()
	if b, _ := io.ReadAll(again); string(b) != want {
		t.Errorf("GetBody gave %q", b)
	}
}

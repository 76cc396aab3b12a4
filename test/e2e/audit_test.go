package e2e

import (
	"strings"
	"testing"
)

// The agent names files to forge the delegator's audit output: a name
// with a newline and a well-formed line after it, and one with terminal
// escape sequences. `awcp-ctl audit` prints each name on its own line,
// quoted, and no escape reaches the terminal.
func TestAuditNamesCannotForgeLines(t *testing.T) {
	parallel(t)
	forged := `12:00:00.000  read    credentials.json  40 bytes` // a name holds no /
	x := startExecutor(t, `printf x > "$(printf 'a\n`+forged+`')"; printf y > "$(printf 'b\033[2J\033]0;pwned\007')"; echo done`)
	c := newCtl(t)
	dir := sampleWorkspace(t)
	r := c.run("export", dir, "--peer", x.url, "--prompt", "forge", "--ssh-listen", "127.0.0.1:0")
	if r.code != 0 {
		t.Fatalf("export: %d\n%s", r.code, r.stderr)
	}
	id := c.only().ID
	a := c.run("audit", id)
	if a.code != 0 {
		t.Fatalf("audit: %d\n%s", a.code, a.stderr)
	}
	for _, line := range strings.Split(a.stdout, "\n") {
		if strings.HasPrefix(line, "12:00:00.000") {
			t.Errorf("a forged line was printed: %q\n%s", line, a.stdout)
		}
	}
	if strings.ContainsRune(a.stdout+a.stderr, '\x1b') {
		t.Errorf("an escape sequence reached the terminal:\n%q", a.stdout)
	}
	if !strings.Contains(a.stdout, `"a\n`+forged+`"`) || !strings.Contains(a.stdout, `"b\x1b[2J\x1b]0;pwned\a"`) {
		t.Errorf("the names are not shown quoted:\n%s", a.stdout)
	}
}

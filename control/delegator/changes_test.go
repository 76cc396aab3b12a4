package delegator

import (
	"strings"
	"testing"

	"github.com/awcp/awcp/sshd"
)

// The change list is the net effect: what was made and removed again is
// not listed, what was removed and made again is modified, a rename is a
// deletion and an addition, and what failed changed nothing.
func TestNetChanges(t *testing.T) {
	ops := []Op{
		{Kind: sshd.OpCreate, Path: "new.txt"}, {Kind: sshd.OpWrite, Path: "new.txt"},
		{Kind: sshd.OpWrite, Path: "README.md"}, {Kind: sshd.OpWrite, Path: "README.md"},
		{Kind: sshd.OpCreate, Path: "tmp.txt"}, {Kind: sshd.OpRemove, Path: "tmp.txt"},
		{Kind: sshd.OpRemove, Path: "go.sum"}, {Kind: sshd.OpCreate, Path: "go.sum"},
		{Kind: sshd.OpRename, Path: "src/old.go", To: "src/new.go"},
		{Kind: sshd.OpMkdir, Path: "docs"}, {Kind: sshd.OpRmdir, Path: "build"},
		{Kind: sshd.OpSetattr, Path: "run.sh"}, {Kind: sshd.OpLink, Path: "a", To: "b"},
		{Kind: sshd.OpRead, Path: "main.go"}, {Kind: sshd.OpList, Path: "."},
		{Kind: sshd.OpRemove, Path: "secret.pem", Refused: true, Err: "hidden"},
		{Kind: sshd.OpWrite, Path: "ro.txt", Err: "permission denied"},
	}
	want := "M README.md|A b|D build/|A docs/|M go.sum|A new.txt|M run.sh|A src/new.go|D src/old.go"
	if got := strings.Join(netChanges(ops), "|"); got != want {
		t.Fatalf("changes\n %s\nwant\n %s", got, want)
	}
}

package e2e

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// openPTY is a pseudo-terminal: its controller side, and the terminal a
// process writes to.
func openPTY(t *testing.T) (controller, term *os.File) {
	t.Helper()
	controller, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminal: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(controller.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(controller.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	term, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return controller, term
}

// TestExportProgressBar: an archive export on a terminal shows the
// workspace going out and the result coming back, redrawn in place; piped,
// it shows neither.
func TestExportProgressBar(t *testing.T) {
	slow(t)
	parallel(t)
	x := startExecutor(t, `head -c 3000000 /dev/urandom > result.bin`)
	dir := t.TempDir()
	big := make([]byte, 6<<20)
	rand.Read(big)
	os.WriteFile(filepath.Join(dir, "big.bin"), big, 0o644)

	c := newCtl(t)
	controller, term := openPTY(t)
	defer controller.Close()
	cmd := c.command("export", dir, "--peer", x.url, "--prompt", "p", "--transport", "archive")
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, term
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	term.Close() // the child holds it now: the controller reads EIO once it exits
	var screen bytes.Buffer
	read := make(chan struct{})
	go func() { io.Copy(&screen, controller); close(read) }()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("export on a terminal: %v\n%s", err, screen.String())
	}
	<-read
	out := screen.String()
	for _, want := range []string{"\rawcp: sending workspace [", "100%", "\rawcp: receiving result  "} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q on the terminal:\n%q", want, out)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "result.bin")); err != nil || fi.Size() != 3000000 {
		t.Fatalf("result.bin: %v %v", fi, err)
	}

	r := c.run("export", dir, "--peer", x.url, "--prompt", "p", "--transport", "archive")
	if r.code != 0 {
		t.Fatalf("export piped: %d\n%s", r.code, r.stderr)
	}
	if strings.Contains(r.stderr, "\r") || strings.Contains(r.stderr, "sending workspace") {
		t.Fatalf("a progress bar in a pipe:\n%q", r.stderr)
	}
}

package e2e

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// recordingRelay forwards every connection to target and keeps every byte
// that passed, both ways: what someone on the path sees, or an impostor
// that relays to the real executor.
type recordingRelay struct {
	ln   net.Listener
	mu   sync.Mutex
	seen bytes.Buffer
	wg   sync.WaitGroup
}

func startRelay(t *testing.T, target string) *recordingRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recordingRelay{ln: ln}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			r.wg.Add(2)
			pipe := func(dst, src net.Conn) {
				defer r.wg.Done()
				buf := make([]byte, 32<<10)
				for {
					n, err := src.Read(buf)
					if n > 0 {
						r.mu.Lock()
						r.seen.Write(buf[:n])
						r.mu.Unlock()
						dst.Write(buf[:n])
					}
					if err != nil {
						dst.Close()
						src.Close()
						return
					}
				}
			}
			go pipe(up, c)
			go pipe(c, up)
		}
	}()
	t.Cleanup(func() { ln.Close(); r.wg.Wait() })
	return r
}

func (r *recordingRelay) addr() string { return r.ln.Addr().String() }

func (r *recordingRelay) saw(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Contains(r.seen.Bytes(), []byte(s))
}

func tokenFile(t *testing.T, token string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Between delegator and executor everything is TLS, each side's key its
// certificate, the executor's pinned by the delegator. Tried as the
// network would: a relay on the path sees no token, no prompt and no byte
// of the workspace, and the delegation completes through it; an impostor
// with its own key gets no INVITE; plain HTTP is refused by the executor
// and by the delegator unless asked for; a first contact and a wrong key
// are refused with the key seen; and an executor admits a delegator by its
// key, without a token, while a stranger with no token or a wrong one is
// refused.
func TestPeersSpeakTLSPinnedToTheirKeys(t *testing.T) {
	slow(t)
	parallel(t)
	const token, secret, prompt = "tok-8c1f2e", "workspace-secret-5d7a", "prompt-words-93b2"
	x := startTLSExecutor(t, `cat notes.txt > seen.txt; echo done`, "--token-file", tokenFile(t, token), "--transports", "archive")
	key := x.key(t)
	c := newCtl(t)
	c.tls = true
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "notes.txt"), []byte(secret+"\n"), 0o644)
	tokenArgs := []string{"--token-file", tokenFile(t, token), "--transport", "archive"}

	// Through a relay that records everything: the delegation works, the
	// relay learns nothing.
	relay := startRelay(t, x.addr)
	r := c.run(append([]string{"export", ws, "--peer", "https://" + relay.addr(), "--peer-key", key, "--prompt", prompt}, tokenArgs...)...)
	if r.code != 0 {
		t.Fatalf("export through the relay: exit %d\n%s", r.code, r.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "seen.txt")); !strings.Contains(string(b), secret) {
		t.Fatalf("the agent did not see the workspace: %q", b)
	}
	for what, s := range map[string]string{"the token": token, "the workspace": secret, "the prompt": prompt} {
		if relay.saw(s) {
			t.Errorf("the relay saw %s", what)
		}
	}
	relay.mu.Lock()
	through := relay.seen.Len()
	relay.mu.Unlock()
	if through < 1000 {
		t.Errorf("the relay saw almost nothing (%d bytes): the test's relay is not on the path", through)
	}

	// An impostor: a real executor with its own key, at the address the
	// delegator was given, pinned to the real one.
	impostor := startTLSExecutor(t, `echo pwned > pwned.txt`, "--transports", "archive")
	r = c.run(append([]string{"export", ws, "--peer", impostor.url, "--peer-key", key, "--prompt", "p"}, tokenArgs...)...)
	// The user's own to settle (which key to trust), not the executor's
	// refusal: USAGE, exit 2, and no delegation listed.
	if r.code != 2 || !strings.Contains(r.stderr, "error USAGE:") || !strings.Contains(r.stderr, "nothing was sent") {
		t.Fatalf("export to an impostor: exit %d, want 2 and USAGE\n%s", r.code, r.stderr)
	}
	for _, d := range c.status() {
		if d.Peer == impostor.url {
			t.Errorf("the refused export to the impostor is listed: %+v", d)
		}
	}
	if strings.Contains(impostor.log.String(), "INVITE") {
		t.Fatalf("the impostor heard an INVITE:\n%s", impostor.log)
	}

	// A first contact: refused, with the key to compare and pin.
	r = c.run(append([]string{"export", ws, "--peer", x.url, "--prompt", "p"}, tokenArgs...)...)
	if r.code == 0 || !strings.Contains(r.stderr, "not trusted yet") || !strings.Contains(r.stderr, key) {
		t.Fatalf("a first contact: exit %d\n%s", r.code, r.stderr)
	}
	// Plain HTTP: the delegator refuses to speak it unless told; the
	// executor refuses to hear it unless told.
	plainURL := "http://" + x.addr
	r = c.run(append([]string{"export", ws, "--peer", plainURL, "--prompt", "p"}, tokenArgs...)...)
	if r.code == 0 || !strings.Contains(r.stderr, "in clear") || !strings.Contains(r.stderr, "--plain-http") {
		t.Fatalf("plain HTTP without --plain-http: exit %d\n%s", r.code, r.stderr)
	}
	r = c.run(append([]string{"export", ws, "--peer", plainURL, "--plain-http", "--prompt", "p"}, tokenArgs...)...)
	if r.code == 0 || !strings.Contains(r.stderr, "TLS only") {
		t.Fatalf("plain HTTP to a TLS-only executor: exit %d\n%s", r.code, r.stderr)
	}

	// Admission by key: y admits c's key without a token; a delegator of
	// another key is refused without a token and with a wrong one.
	self := c.run("peers", "self")
	authorized := filepath.Join(t.TempDir(), "authorized")
	os.WriteFile(authorized, []byte("# the delegators of this executor\n"+strings.SplitN(self.stdout, "\n", 2)[0]+" owner@laptop\n"), 0o600)
	y := startTLSExecutor(t, `echo by-key > bykey.txt`, "--token-file", tokenFile(t, token), "--authorized-delegators", authorized, "--transports", "archive")
	ykey := y.key(t)
	r = c.run("export", ws, "--peer", y.url, "--peer-key", ykey, "--prompt", "p", "--transport", "archive")
	if r.code != 0 {
		t.Fatalf("an authorized delegator without a token: exit %d\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(ws, "bykey.txt")); err != nil {
		t.Fatal("the authorized delegator's delegation did not run")
	}
	stranger := newCtl(t)
	stranger.tls = true
	for _, extra := range [][]string{nil, {"--token", "wrong"}} {
		r = stranger.run(append([]string{"export", ws, "--peer", y.url, "--peer-key", ykey, "--prompt", "p", "--transport", "archive"}, extra...)...)
		if r.code == 0 || !strings.Contains(r.stderr, "AUTH_FAILED") {
			t.Fatalf("a delegator of another key, %v: exit %d\n%s", extra, r.code, r.stderr)
		}
	}
}

// An authorized-delegators file that holds no key (a Secret left empty)
// would serve the executor open to anyone: awcp-fs refuses to start.
func TestEmptyAuthorizedDelegatorsRefused(t *testing.T) {
	parallel(t)
	empty := filepath.Join(t.TempDir(), "authorized")
	if err := os.WriteFile(empty, []byte("# keys go here\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a serve that started is killed
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "awcp-fs"), "serve", "--state-dir", t.TempDir(), "--work-root", t.TempDir(), "--listen", "0.0.0.0:0",
		"--agent-cmd", "true", "--authorized-delegators", empty)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "holds no key") {
		t.Fatalf("awcp-fs serve with an empty --authorized-delegators: %v\n%s", err, out)
	}
}

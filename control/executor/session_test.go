package executor_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/awcp/awcp/control"
	"github.com/awcp/awcp/control/executor"
	"github.com/awcp/awcp/control/executor/agent"
	"github.com/awcp/awcp/control/executor/executortest"
)

// echoSession is a session runner that answers each line of its channel
// with the line again, and ends the session when the channel closes,
// summing up how many lines it echoed.
type echoSession struct{}

func (echoSession) Session(ctx context.Context, t agent.Task, h agent.Hooks, channels <-chan control.SessionChannel, wait time.Duration) (*agent.Result, error) {
	var ch io.ReadWriteCloser
	select {
	case c := <-channels:
		ch = c.Conn
	case <-ctx.Done():
		return nil, agent.ErrKilled
	case <-time.After(wait):
		return &agent.Result{Failed: "no channel"}, nil
	}
	defer ch.Close()
	go func() { <-ctx.Done(); ch.Close() }()
	sc, n := bufio.NewScanner(ch), 0
	for sc.Scan() {
		n++
		fmt.Fprintf(ch, "echo %s\n", sc.Text())
	}
	if ctx.Err() != nil {
		return nil, agent.ErrKilled
	}
	return &agent.Result{Summary: fmt.Sprintf("echoed %d lines", n)}, nil
}

// openSession asks for delegation id's channel with key; the connection
// after 101, or the answer's status.
func openSession(t *testing.T, f *executortest.Fixture, id, key string) (net.Conn, *bufio.Reader, int) {
	t.Helper()
	u, _ := url.Parse(f.URL())
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	req := "GET /awcp/tasks/" + id + "/acp HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: " + control.SessionUpgrade + "\r\n"
	if key != "" {
		req += control.SessionKeyHeader + ": " + key + "\r\n"
	}
	io.WriteString(conn, req+"\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		conn.Close()
		return nil, nil, resp.StatusCode
	}
	return conn, br, resp.StatusCode
}

// A session delegation is granted in ACCEPT, and its channel opens only
// with the INVITE's key — not without one, not with another — once it
// runs, one at a time; the channel is the session, and its end is the
// delegation's done.
func TestSessionChannel(t *testing.T) {
	f := executortest.New(t, `true`, func(o *executor.Options) { o.Sessions = echoSession{} })
	inv := invite("dlg_session")
	inv.Session = control.NewSessionRequest()
	acc, err := peer(f, "").Invite(context.Background(), inv)
	if err != nil || acc.ExecutorConstraints == nil || acc.ExecutorConstraints.Session != control.SessionACP {
		t.Fatalf("ACCEPT of a session INVITE: %+v %v", acc, err)
	}
	// The card offers sessions, as the manifest does.
	resp, err := http.Get(f.URL() + "/.well-known/agent-card.json")
	if err != nil {
		t.Fatal(err)
	}
	card, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(card), `"sessions":["acp"]`) {
		t.Errorf("the agent card does not offer sessions: %s", card)
	}
	if _, _, code := openSession(t, f, "dlg_session", inv.Session.Key); code != http.StatusConflict {
		t.Fatalf("a channel before START: HTTP %d, want 409", code)
	}
	if err := peer(f, "").Start(context.Background(), start("dlg_session", workspace(t, map[string]string{"a": "1"}), time.Now().Add(time.Minute))); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"", strings.Repeat("0", 64)} {
		if _, _, code := openSession(t, f, "dlg_session", key); code != http.StatusUnauthorized {
			t.Errorf("key %q: HTTP %d, want 401", key, code)
		}
	}
	var conn net.Conn
	var br *bufio.Reader
	for deadline := time.Now().Add(10 * time.Second); conn == nil; time.Sleep(20 * time.Millisecond) {
		var code int
		if conn, br, code = openSession(t, f, "dlg_session", inv.Session.Key); conn == nil && (code != http.StatusConflict || time.Now().After(deadline)) {
			t.Fatalf("the channel: HTTP %d", code)
		}
	}
	for _, line := range []string{"one", "two"} {
		fmt.Fprintln(conn, line)
		if got, err := br.ReadString('\n'); err != nil || got != "echo "+line+"\n" {
			t.Fatalf("through the channel: %q %v", got, err)
		}
	}
	// A second channel is the gateway reconnecting: taken, for the session
	// to resume on (this one's runner never takes it), and closed at the
	// session's end.
	second, _, code := openSession(t, f, "dlg_session", inv.Session.Key)
	if second == nil {
		t.Fatalf("a second channel: HTTP %d", code)
	}
	conn.Close()
	if done := last(events(f, "dlg_session", 0)); done.Type != control.EventDone || done.Summary != "echoed 2 lines" {
		t.Fatalf("the session's end: %+v", done)
	}
	second.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := second.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("the channel never taken was not closed at the session's end: %v", err)
	}

	// An executor whose agent speaks no ACP refuses the session.
	plain := executortest.New(t, `true`, nil)
	inv = invite("dlg_nosession")
	inv.Session = control.NewSessionRequest()
	var pe *control.ProtocolError
	if _, err := peer(plain, "").Invite(context.Background(), inv); !errors.As(err, &pe) || pe.Code != control.CodeDepMissing {
		t.Fatalf("a session INVITE to an agent-cmd executor: %v", err)
	}
}

// A session's lease is renewed with its key, up to the executor's
// MaxTTL from now; no key, a wrong one, and a task's delegation are
// refused, and the lease stays as it was.
func TestSessionLeaseRenewal(t *testing.T) {
	f := executortest.New(t, `sleep 30`, func(o *executor.Options) { o.Sessions = echoSession{}; o.MaxTTL = 10 * time.Minute })
	inv := invite("dlg_renew")
	inv.Session = control.NewSessionRequest()
	if _, err := peer(f, "").Invite(context.Background(), inv); err != nil {
		t.Fatal(err)
	}
	first := time.Now().Add(time.Minute)
	if err := peer(f, "").Start(context.Background(), start("dlg_renew", workspace(t, map[string]string{"a": "1"}), first)); err != nil {
		t.Fatal(err)
	}
	renew := func(id, key string) (time.Time, error) {
		return peer(f, "").Renew(context.Background(), id, control.RenewRequest{SessionKey: key, TTLSeconds: 3600})
	}
	var pe *control.ProtocolError
	for _, key := range []string{"", strings.Repeat("0", 64)} {
		if _, err := renew("dlg_renew", key); !errors.As(err, &pe) || pe.Code != control.CodeAuthFailed {
			t.Errorf("renewal with key %q: %v, want AUTH_FAILED", key, err)
		}
	}
	delegate(f, "dlg_task", workspace(t, map[string]string{"b": "2"}))
	if _, err := renew("dlg_task", inv.Session.Key); err == nil || !strings.Contains(err.Error(), "only a session's lease is renewed") {
		t.Errorf("a task's renewal: %v", err)
	}
	before := time.Now()
	got, err := renew("dlg_renew", inv.Session.Key)
	if err != nil {
		t.Fatal(err)
	}
	if got.Before(before.Add(10*time.Minute-2*time.Second)) || got.After(time.Now().Add(10*time.Minute)) {
		t.Errorf("renewed until %s: want MaxTTL (10m) from now, not the hour asked", got)
	}
	a, err := f.Store.Assignment("dlg_renew")
	if err != nil || a.ExpiresAt.Sub(got).Abs() > time.Millisecond {
		t.Errorf("the assignment's end %v, want %v (%v)", a.ExpiresAt, got, err)
	}
}

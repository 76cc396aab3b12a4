package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// uiPage is `awcp-ctl ui` of c, running, and a headless Chromium on it.
type uiPage struct {
	url    string // with the token
	origin string
	token  string
	csrf   string          // what /api/session gives the page
	ctx    context.Context // the browser's tab
	shots  string          // where screenshots go
}

// startUI starts `awcp-ctl ui` in c and a headless Chromium (Debian's
// chromium; .ci/run installs it) that has opened the printed URL.
func startUI(t *testing.T, c *ctl) *uiPage {
	t.Helper()
	return startUIVia(t, c, false, "")
}

// startUIVia is startUI; with open, `ui --open [at]` is run, with an
// xdg-open that records what it was given, and the browser opens that.
func startUIVia(t *testing.T, c *ctl, open bool, at string) *uiPage {
	t.Helper()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("the page's tests need Debian's chromium (.ci/run installs it)")
	}
	args := []string{"ui", "--listen", "127.0.0.1:0", "--browse-interval", "1h"}
	var opened string // what xdg-open was given, one argument a line
	if open {
		bin := t.TempDir()
		opened = filepath.Join(bin, "opened")
		xdgOpen := "#!/bin/sh\nfor a in \"$0\" \"$@\"; do echo \"$a\"; done > " + opened + ".tmp && mv " + opened + ".tmp " + opened + "\n"
		if err := os.WriteFile(filepath.Join(bin, "xdg-open"), []byte(xdgOpen), 0o755); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--open")
		if at != "" {
			args = append(args, at)
		}
		c.env = append(c.env, "PATH="+bin+":"+os.Getenv("PATH"))
	}
	cmd := c.command(args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		if t.Failed() {
			t.Logf("awcp-ctl ui:\n%s", errb.String())
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "http://127.0.0.1:") {
		t.Fatalf("awcp-ctl ui printed %q, %v\n%s", line, err, errb.String())
	}
	p := &uiPage{url: strings.TrimSpace(line)}
	p.origin, p.token, _ = strings.Cut(p.url, "/#token=")
	p.shots = os.Getenv("AWCP_ARTIFACTS")
	if p.shots == "" {
		p.shots = filepath.Join(os.TempDir(), "awcp-e2e-artifacts")
	}
	if err := os.MkdirAll(p.shots, 0o755); err != nil {
		t.Fatal(err)
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.WindowSize(1280, 900), chromedp.Flag("disable-gpu", true))...)
	tab, cancelTab := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	p.ctx = tab
	// The first action on the tab's own context starts the browser (one
	// on a context with a timeout would stop it with the timeout).
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	visit := p.url
	if open {
		// xdg-open was given a file of the user's only, which leads to
		// the page: the token is on no command line.
		waitFor(t, opened)
		b, _ := os.ReadFile(opened)
		argv := strings.Split(strings.TrimSpace(string(b)), "\n")
		if strings.Contains(string(b), p.token) || len(argv) != 2 {
			t.Fatalf("xdg-open's command line: %q (the token is %s)", argv, p.token)
		}
		fi, err := os.Stat(argv[1])
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("the file --open hands the browser: %v %v", fi, err)
		}
		visit = "file://" + argv[1]
	}
	p.do(t, chromedp.Navigate(visit))
	for deadline := time.Now().Add(10 * time.Second); open; time.Sleep(50 * time.Millisecond) {
		// The file leads on: its document, then the page's, each
		// replacing the other's context while it is asked.
		loc, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](`location.protocol === "http:" && document.readyState === "complete" ? location.href : ""`))
		if err == nil && loc != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the file --open gave did not lead to the page: %q %v", loc, err)
		}
	}
	// The token went into the origin's storage and out of the address.
	want := p.origin + "/#/"
	if at != "" {
		want = p.origin + "/#/d/" + at
	}
	if loc := p.eval(t, `location.href`); loc != want {
		t.Fatalf("after the first visit the page is at %s", loc)
	}
	p.waitFor(t, "the page's CSRF token", `csrf !== ""`, 5*time.Second)
	p.csrf = p.eval(t, `csrf`)
	if p.csrf == "" {
		t.Fatal("the page has no CSRF token")
	}
	// Any alert (a script the agent slipped in) is recorded.
	p.eval(t, `window.__alerts = 0; window.alert = () => { window.__alerts++; }; window.__loaded = 1; "ok"`)
	return p
}

func (p *uiPage) do(t *testing.T, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("browser: %v", err)
	}
}

func (p *uiPage) eval(t *testing.T, js string) string {
	t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[any](js))
	if err != nil {
		t.Fatalf("browser: %s: %v", js, err)
	}
	return fmt.Sprint(v)
}

// click clicks the element sel selects, as a mouse does. The page
// re-renders what it shows when the stream says something changed: a
// node found may be replaced before the click lands, and is found again.
func (p *uiPage) click(t *testing.T, sel string) {
	t.Helper()
	var err error
	for range 5 {
		ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
		err = chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel)))
		cancel()
		if err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("click %s: %v", sel, err)
}

// waitFor waits until js is truthy in the page, within d.
func (p *uiPage) waitFor(t *testing.T, what, js string, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, d+5*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](js, chromedp.WithPollingTimeout(d), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		body, _ := chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("the page did not show %s within %s: %v\npage:\n%s", what, d, err, body)
	}
}

func (p *uiPage) screenshot(t *testing.T, name string) {
	t.Helper()
	png, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100)) // quality 100 is a PNG
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	f := filepath.Join(p.shots, name)
	if err := os.WriteFile(f, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", f)
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string { return fmt.Sprintf("%q", s) }

// TestUIOpenKeepsTheTokenOffCommandLines: `awcp-ctl ui --open` hands
// xdg-open (and so the browser, whose /proc/PID/cmdline every local user
// reads for its whole life) a file only its user may read, never the
// URL with the token; the browser, opening that file, lands on the page
// with its session (startUIVia checks each step).
func TestUIOpenKeepsTheTokenOffCommandLines(t *testing.T) {
	slow(t)
	parallel(t)
	c := newCtl(t)
	p := startUIVia(t, c, true, "")
	if got := p.eval(t, `location.href`); got != p.origin+"/#/" {
		t.Fatalf("the browser is at %s", got)
	}
	// `ui --open ID`: a browser with no token of this run opens one
	// delegation's view, the token and the route in one URL.
	x := startExecutor(t, "echo hi")
	r := c.run("export", t.TempDir(), "--peer", x.url, "--prompt", "a task to look at", "--transport", "archive")
	id := c.only().ID
	if r.code != 0 {
		t.Fatalf("export: exit %d\n%s", r.code, r.stderr)
	}
	q := startUIVia(t, c, true, id)
	q.waitFor(t, "the delegation's own view", `document.body.textContent.includes("a task to look at") && !document.body.textContent.includes("No access")`, 10*time.Second)
}

// TestUIInABrowser: `awcp-ctl ui` in a real browser (headless Chromium).
// A running delegation is listed within 2 s of its start and its state
// changes without a reload; a staged result's diff shows the agent's
// line, and a file named `<img src=x onerror=alert(1)>.txt` holding HTML
// is shown as text; a page of another origin on this machine gets nothing
// of the token and its POST is refused; clicking Apply changes the file on disk; a permission
// request answered from the page reaches the agent. Screenshots are kept.
func TestUIInABrowser(t *testing.T) {
	slow(t)
	parallel(t)
	const evil = `<img src=x onerror=alert(1)>.txt`
	x := startExecutor(t, `sleep 2; printf 'hello from the agent\n' > greeting.txt; printf '<b>bold</b><script>alert(2)</script>\n' > '`+evil+`'`)
	c := newCtl(t)
	p := startUI(t, c)
	ws := t.TempDir()

	r := c.run("export", ws, "--peer", x.url, "--prompt", "greet", "--snapshot", "staged", "--transport", "archive", "--background")
	started := time.Now()
	if r.code != 0 {
		t.Fatalf("export: %d\n%s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	row := `document.querySelector('tr[data-id=` + jsString(id) + `]')`
	p.waitFor(t, "the new delegation", row, 2*time.Second)
	t.Logf("listed %s after %s", id, time.Since(started).Round(time.Millisecond))
	p.waitFor(t, "the delegation completed, without a reload", row+` && `+row+`.querySelector('.state').textContent.startsWith('completed') && window.__loaded === 1`, 60*time.Second)
	p.screenshot(t, "ui-delegations.png")

	// Review: the diff, the evil name as text.
	p.click(t, `a[href="#/d/`+id+`"]`)
	// The staged result waiting for review is shown at once, no click.
	p.waitFor(t, "the agent's line in the diff", `document.querySelector('#diffs') && document.querySelector('#diffs').textContent.includes('+hello from the agent')`, 10*time.Second)
	if got := p.eval(t, `[document.querySelectorAll('img, b, script:not([src])').length, window.__alerts, document.body.textContent.includes(`+jsString(evil)+`), document.body.textContent.includes('+<b>bold</b><script>alert(2)</script>'), document.body.innerText.split('\n').includes('null')].join(' ')`); got != "0 0 true true false" {
		t.Fatalf("the agent's names and lines are not shown as text (elements made, alerts, name shown, content shown, a stray null): %s", got)
	}
	p.screenshot(t, "ui-review.png")

	// A page of another origin on this machine posts an apply: refused.
	// And the browser gave it nothing of the token (a cookie for
	// 127.0.0.1 would have gone to every port).
	var seen strings.Builder
	var seenMu sync.Mutex
	evilSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seenMu.Lock()
		fmt.Fprintf(&seen, "%s %v\n", r.URL, r.Header)
		seenMu.Unlock()
		// Two tries: a plain cross-origin POST with whatever the browser
		// attaches, and one that even holds the token and the CSRF token
		// (as if they had leaked): the second's preflight is refused.
		target := p.origin + "/api/delegations/" + id + "/apply"
		fmt.Fprintf(w, `<!doctype html><script>
const done = () => { document.title = (document.title || "") + "sent;" };
fetch(%q, {method: "POST", mode: "no-cors", credentials: "include", body: "{}"}).then(done, done);
fetch(%q, {method: "POST", credentials: "include", headers: {"Authorization": "Bearer " + %q, "X-AWCP-CSRF": %q, "Content-Type": "application/json"}, body: "{}"}).then(done, done);
</script>`, target, target, p.token, p.csrf)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go evilSrv.Serve(ln)
	defer evilSrv.Close()
	p.do(t, chromedp.Navigate("http://"+ln.Addr().String()+"/"))
	p.waitFor(t, "the other origin's posts", `document.title === "sent;sent;"`, 10*time.Second)
	if _, err := os.Stat(filepath.Join(ws, "greeting.txt")); err == nil {
		t.Fatal("a cross-origin POST applied the result")
	}
	seenMu.Lock()
	if got := seen.String(); strings.Contains(got, p.token) {
		t.Fatalf("the other origin's server was sent the token:\n%s", got)
	}
	seenMu.Unlock()
	if s := c.run("status", id); !strings.Contains(s.stdout, "pending review") {
		t.Fatalf("after the cross-origin POST the result is not pending:\n%s", s.stdout)
	}
	// Without the token, and with a wrong one: refused.
	for _, h := range []string{"", "Bearer wrong-token"} {
		req, _ := http.NewRequest(http.MethodGet, p.origin+"/api/delegations", nil)
		if h != "" {
			req.Header.Set("Authorization", h)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("GET /api/delegations with %q: HTTP %d", h, resp.StatusCode)
		}
	}

	// Apply from the page.
	p.do(t, chromedp.Navigate(p.origin+"/#/d/"+id))
	p.waitFor(t, "the apply button", `document.querySelector('#apply')`, 10*time.Second)
	p.click(t, `#apply`)
	p.waitFor(t, "the apply's report", `document.querySelector('#applied') && document.querySelector('#applied').textContent.includes('greeting.txt')`, 20*time.Second)
	// The apply changes the delegation, and the page is redrawn with its
	// new state: the report stays (it was once replaced by the error of
	// asking for a staged result no longer there).
	p.waitFor(t, "the page redrawn as applied", `document.querySelector('#state').textContent.includes('staged: applied')`, 20*time.Second)
	p.waitFor(t, "the apply's report after the redraw", `document.querySelector('#applied') && document.querySelector('#applied').textContent.includes('greeting.txt') && !document.querySelector('#review').textContent.includes('NOT_FOUND')`, 5*time.Second)
	if b, err := os.ReadFile(filepath.Join(ws, "greeting.txt")); err != nil || string(b) != "hello from the agent\n" {
		t.Fatalf("after Apply, greeting.txt = %q, %v", b, err)
	}

	// A permission request, answered from the page.
	ax := acpExecutor(t, "--permission", "forward")
	dir := sampleWorkspace(t)
	r = c.run("export", dir, "--peer", ax.url, "--prompt", "work on it", "--background")
	if r.code != 0 {
		t.Fatalf("export to the ACP agent: %d\n%s", r.code, r.stderr)
	}
	id2 := strings.TrimSpace(r.stdout)
	p.do(t, chromedp.Navigate(p.origin+"/#/d/"+id2))
	p.waitFor(t, "the permission request", `document.querySelector('button[data-option="allow"]')`, 30*time.Second)
	p.screenshot(t, "ui-permission.png")
	p.click(t, `button[data-option="allow"]`)
	done := c.run("output", id2, "--block", "--timeout", "60s")
	if done.code != 0 || !strings.Contains(done.stdout, "permission: allow") || !strings.Contains(done.stdout, "decided by delegator (user: awcp-ctl ui by ") {
		t.Fatalf("the agent did not get the page's answer: exit %d\n%s%s", done.code, done.stdout, done.stderr)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "docs/notes.md")); err != nil || !strings.HasPrefix(string(b), "notes from") {
		t.Fatalf("docs/notes.md after the page's allow: %q %v", b, err)
	}

	// Attempts side by side: two executors set x differently; "Apply this
	// one" on the second applies it and discards the first.
	var peers []string
	for _, v := range []string{"2", "3"} {
		ex := startExecutor(t, `sed -i 's/^x = 1$/x = `+v+`/' calc.txt; echo "x is `+v+`"`, "--transports", "archive")
		peers = append(peers, "--peer", ex.url)
	}
	calc := t.TempDir()
	writeFiles(t, calc, map[string]string{"calc.txt": "a\nx = 1\nz\n"})
	r = c.run(append([]string{"export", calc, "--prompt", "set x", "--transport", "archive", "--background"}, peers...)...)
	group := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(group, "grp-") {
		t.Fatalf("export to two peers: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	p.do(t, chromedp.Navigate(p.origin+"/#/"))
	p.waitFor(t, "the group's link", `document.querySelector('a[href="#/g/`+group+`"]')`, 10*time.Second)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if s := c.run("status", "--json"); strings.Count(s.stdout, `"completed"`) >= 4 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the attempts did not complete:\n%s", s.stdout)
		}
	}
	// The list names each by its task, the prompt's first line.
	if got := p.eval(t, `document.querySelector('tr[data-id] a[href^="#/d/"]').textContent`); got != "set x" {
		t.Errorf("the list names a delegation %q, not by its task", got)
	}
	// A delegation that failed says why in the list (and status the
	// reason's code).
	c.run("export", t.TempDir(), "--peer", "http://127.0.0.1:1", "--prompt", "an unreachable task", "--transport", "archive")
	p.waitFor(t, "the failed delegation's reason", `[...document.querySelectorAll('tr[data-id]')].some(r => r.textContent.includes('an unreachable task') && r.querySelector('.reason') && r.querySelector('.reason').textContent.includes(':'))`, 10*time.Second)
	if s := c.run("status"); !strings.Contains(firstLineWith(s.stdout, "an unreachable task"), "error (") {
		t.Errorf("status shows no reason code for the failed delegation:\n%s", s.stdout)
	}
	// A check run from the command line is the page's to show.
	if r := c.run("compare", group, "--check", `grep -q '^x = 2$' calc.txt`); r.code != 0 {
		t.Fatalf("compare --check: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	p.click(t, `a[href="#/g/`+group+`"]`)
	p.waitFor(t, "two attempts side by side", `document.querySelectorAll('.attempts section').length === 2 && document.querySelectorAll('.attempts section button').length === 2`, 10*time.Second)
	if got := p.eval(t, `document.querySelector('.attempts').textContent`); !strings.Contains(got, "1 file,") || strings.Contains(got, "1 files") ||
		!strings.Contains(got, "passed") || !strings.Contains(got, "FAILED (exit 1)") || strings.Contains(got, "not run") {
		t.Errorf("the attempts view (one file changed each; the check run before): %s", got)
	}
	p.screenshot(t, "ui-attempts.png")
	third := p.eval(t, `[...document.querySelectorAll('.attempts section')].findIndex(s => s.textContent.includes('x is 3'))`)
	if third != "0" && third != "1" {
		t.Fatalf("no attempt says x is 3 (%s)", third)
	}
	p.click(t, `.attempts section:nth-of-type(`+map[string]string{"0": "1", "1": "2"}[third]+`) button`)
	p.waitFor(t, "the attempt applied", `document.querySelector('#applied').textContent.includes('calc.txt')`, 20*time.Second)
	if b, _ := os.ReadFile(filepath.Join(calc, "calc.txt")); string(b) != "a\nx = 3\nz\n" {
		t.Fatalf("after Apply this one, calc.txt = %q", b)
	}
	if s := c.run("status"); !strings.Contains(s.stdout, "(staged, applied)") || !strings.Contains(s.stdout, "(staged, discarded)") {
		t.Fatalf("after Apply this one, the attempts are not applied and discarded:\n%s", s.stdout)
	}

	// Narrow: nothing wider than a phone's screen; the keyboard reaches
	// the views (g p: peers).
	p.do(t, chromedp.EmulateViewport(380, 800), chromedp.Navigate(p.origin+"/#/"))
	p.waitFor(t, "the list at 380 px", `document.querySelector('#delegations') && document.documentElement.scrollWidth <= 380`, 10*time.Second)
	p.screenshot(t, "ui-narrow.png")
	// One delegation's page too: its events table does not scroll
	// sideways (each event a card, as the list's rows).
	p.do(t, chromedp.Navigate(p.origin+"/#/d/"+id))
	p.waitFor(t, "a delegation's events at 380 px", `document.querySelector('#events') && document.querySelector('#events').closest('.scroll').scrollWidth <= document.querySelector('#events').closest('.scroll').clientWidth`, 10*time.Second)
	p.do(t, chromedp.Navigate(p.origin+"/#/"))
	p.do(t, chromedp.KeyEvent("g"), chromedp.KeyEvent("p"))
	p.waitFor(t, "the peers page from the keyboard", `location.hash === "#/peers" && document.querySelector('h2').textContent === "Peers"`, 5*time.Second)
}

// TestUIStopsAndClips: the page stops what runs — Cancel on a running
// delegation, Close on a session — with the same rule as Apply (a page of
// another origin cannot), and long text is two lines in the list, whole
// after a click. The page marks an ended delegation alike in the list and
// on its own page.
func TestUIStopsAndClips(t *testing.T) {
	slow(t)
	parallel(t)
	long := strings.Repeat("the agent's long complaint on stderr, line after line; ", 40)
	slow := startExecutor(t, `echo started; sleep 60`)
	failing := startExecutor(t, `printf '%s\n' "`+long+`" >&2; exit 3`)
	c := newCtl(t)
	p := startUI(t, c)

	// Cancel, from the delegation's page.
	r := c.run("export", t.TempDir(), "--peer", slow.url, "--prompt", "a long task", "--transport", "archive", "--background")
	if r.code != 0 {
		t.Fatalf("export: %d\n%s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	c.waitState(id, "running")
	p.do(t, chromedp.Navigate(p.origin+"/#/d/"+id))
	p.waitFor(t, "the Cancel button", `document.querySelector('#cancel')`, 10*time.Second)
	p.eval(t, `window.confirm = () => true; 1`)
	p.click(t, `#cancel`)
	p.waitFor(t, "the delegation cancelled, on its page", `document.querySelector('#state') && document.querySelector('#state').textContent.startsWith('cancelled') && !document.querySelector('#cancel')`, 30*time.Second)
	if s := c.status(); len(s) != 1 || s[0].State != "cancelled" {
		t.Fatalf("after the page's Cancel: %+v", s)
	}
	waitWorkRootEmpty(t, slow)
	// Ended, it is marked ○ here as in the list.
	if got := p.eval(t, `getComputedStyle(document.querySelector('#state'), '::before').content`); got != `"○ "` {
		t.Errorf("an ended delegation's page marks its state %s, not as the list does", got)
	}

	// A failure's whole stderr: two lines in the list, whole after a click.
	c.run("export", t.TempDir(), "--peer", failing.url, "--prompt", "a failing task", "--transport", "archive")
	p.do(t, chromedp.Navigate(p.origin+"/#/"))
	reason := `[...document.querySelectorAll('tr[data-id]')].find(r => r.textContent.includes('a failing task')).querySelector('.reason')`
	p.waitFor(t, "the failed delegation's reason", `[...document.querySelectorAll('tr[data-id]')].some(r => r.textContent.includes('a failing task') && r.querySelector('.reason'))`, 30*time.Second)
	lines := func() string {
		return p.eval(t, `(() => { const e = `+reason+`; return Math.round(e.getBoundingClientRect().height / parseFloat(getComputedStyle(e).lineHeight)) + " " + e.textContent.includes("line after line; the agent's long complaint"); })()`)
	}
	if got := lines(); got != "2 true" {
		t.Errorf("the reason's lines in the list, and the whole text in it: %s, want 2 true", got)
	}
	p.click(t, `tr[data-id] .reason`)
	if got := p.eval(t, `(() => { const e = `+reason+`; return String(e.getBoundingClientRect().height / parseFloat(getComputedStyle(e).lineHeight) > 4) + " " + e.getAttribute('aria-expanded'); })()`); got != "true true" {
		t.Errorf("after a click the reason is not whole: %s", got)
	}
	p.screenshot(t, "ui-clipped.png")

	// Close, of a session that waits for a permission decision.
	sx := sessionAgentExecutor(t)
	ws := sampleWorkspace(t)
	writeFiles(t, ws, map[string]string{"notes.txt": "on disk\n"})
	r = c.run("export", ws, "--peer", sx.url, "--prompt", "first", "--session", "new")
	m := regexp.MustCompile(`session (\S+) awaits a permission decision`).FindStringSubmatch(r.stderr)
	if r.code != 5 || m == nil {
		t.Fatalf("export --session new: exit %d\n%s", r.code, r.stderr)
	}
	sid := m[1]
	p.do(t, chromedp.Navigate(p.origin+"/#/d/"+sid))
	p.waitFor(t, "the Close session button", `document.querySelector('#close')`, 10*time.Second)
	p.eval(t, `window.confirm = () => true; 1`)
	p.click(t, `#close`)
	p.waitFor(t, "the session closed, on its page", `document.querySelector('#state') && document.querySelector('#state').textContent.startsWith('completed')`, 60*time.Second)
	if out := c.run("output", sid); !strings.Contains(out.stdout, "unanswered") {
		t.Errorf("a session closed with a permission pending does not say so:\n%s", out.stdout)
	}

	// Another origin cannot cancel: its POST is refused as an apply's is.
	r = c.run("export", t.TempDir(), "--peer", slow.url, "--prompt", "another long task", "--transport", "archive", "--background")
	other := strings.TrimSpace(r.stdout)
	c.waitState(other, "running")
	req, _ := http.NewRequest(http.MethodPost, p.origin+"/api/delegations/"+other+"/cancel", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+p.token)
	req.Header.Set("Origin", "http://127.0.0.1:1")
	req.Header.Set("X-AWCP-CSRF", p.csrf)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a cancel from another origin: HTTP %d", resp.StatusCode)
	}
	if s := c.run("status", other, "--json"); !strings.Contains(s.stdout, `"state": "running"`) {
		t.Errorf("the other origin's cancel stopped the delegation:\n%s", s.stdout)
	}
	c.run("cancel", other)
}

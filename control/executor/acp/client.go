package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/awcp/awcp/control/executor/agent"
	"github.com/awcp/awcp/internal/untrusted"
)

// Error codes beyond JSON-RPC's that ACP defines.
const codeResourceNotFound = -32002

// maxTextFile bounds what fs/read_text_file reads and returns.
const maxTextFile = 16 << 20

// client is the executor's side of one ACP connection: the callbacks the
// agent may call, confined to the task's work dir.
type client struct {
	askCtx    context.Context // ends with the task: pending asks answer cancelled
	task      agent.Task
	workDir   string   // absolute and clean
	root      *os.Root // the work dir; every file callback goes through it
	allowExec bool
	readOnly  bool
	hooks     agent.Hooks
	log       *slog.Logger

	mu        sync.Mutex // guards the fields below
	sid       acpsdk.SessionId
	message   strings.Builder   // the agent's text since its last tool call: the summary
	messageID string            // the message the last chunk of it belonged to, if the agent says
	pending   map[string]string // unfinished lines of the agent's text, by kind
	toolTitle map[acpsdk.ToolCallId]string
	failed    []string // the tool calls that failed, each its title and the agent's words
	terms     map[string]*terminal
	nextID    int
}

var _ acpsdk.Client = (*client)(nil)

func newClient(askCtx context.Context, t agent.Task, allowExec bool, h agent.Hooks, log *slog.Logger) (*client, error) {
	wd, err := filepath.Abs(t.WorkDir)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(wd)
	if err != nil {
		return nil, fmt.Errorf("open work dir: %w", err)
	}
	return &client{
		askCtx: askCtx, task: t, workDir: filepath.Clean(wd), root: root,
		allowExec: allowExec, readOnly: t.AccessMode == "ro", hooks: h, log: log,
		pending: map[string]string{}, toolTitle: map[acpsdk.ToolCallId]string{}, terms: map[string]*terminal{},
	}, nil
}

// turn is one delegation as ACP: initialize, session/new in the work dir,
// session/prompt with the task. It returns the turn's stop reason.
func (c *client) turn(ctx context.Context, conn *acpsdk.ClientSideConnection) (acpsdk.StopReason, error) {
	init, err := conn.Initialize(ctx, acpsdk.InitializeRequest{
		ProtocolVersion: acpsdk.ProtocolVersionNumber,
		// Only what is implemented here, and allowed for this delegation.
		ClientCapabilities: acpsdk.ClientCapabilities{
			Fs:       acpsdk.FileSystemCapabilities{ReadTextFile: true, WriteTextFile: !c.readOnly},
			Terminal: c.allowExec,
		},
		ClientInfo: &acpsdk.Implementation{Name: "awcp-fs", Version: "1"},
	})
	if err != nil {
		return "", fmt.Errorf("initialize: %w", err)
	}
	c.log.Info("ACP agent initialized", "protocolVersion", init.ProtocolVersion)
	sess, err := conn.NewSession(ctx, acpsdk.NewSessionRequest{Cwd: c.workDir, McpServers: []acpsdk.McpServer{}})
	if err != nil {
		return "", fmt.Errorf("session/new: %w", err)
	}
	c.mu.Lock()
	c.sid = sess.SessionId
	c.mu.Unlock()
	prompt := []acpsdk.ContentBlock{}
	if d := strings.TrimSpace(c.task.Description); d != "" && !strings.HasPrefix(c.task.Prompt, d) {
		prompt = append(prompt, acpsdk.TextBlock("Task: "+d))
	}
	prompt = append(prompt, acpsdk.TextBlock(c.task.Prompt))
	resp, err := conn.Prompt(ctx, acpsdk.PromptRequest{SessionId: sess.SessionId, Prompt: prompt})
	c.flush()
	if err != nil {
		return "", fmt.Errorf("session/prompt: %w", err)
	}
	return resp.StopReason, nil
}

func (c *client) session() (acpsdk.SessionId, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sid, c.sid != ""
}

// summary is the agent's final message.
func (c *client) summary() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := strings.TrimSpace(c.message.String())
	if len(c.failed) == 0 {
		return s
	}
	// A turn that ends well after its tool calls failed (a write the
	// agent was refused) did not do what its last words may say: the
	// summary says which failed, in the agent's words, so that nobody
	// reads "completed" as "done".
	if s != "" {
		s += "\n\n"
	}
	s += fmt.Sprintf("%d tool call(s) failed:", len(c.failed))
	for _, f := range c.failed {
		s += "\n- " + f
	}
	return s
}

// newTurn marks the start of the session's next turn: the summary so far
// is set apart from what the agent says in it by a blank line.
func (c *client) newTurn() {
	c.flush()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.message.Len() > 0 && !strings.HasSuffix(c.message.String(), "\n\n") {
		c.message.WriteString("\n\n")
	}
	c.messageID = ""
}

// maxFailedShown and maxFailedWords bound the failed tool calls a summary
// names, and the agent's words of each.
const (
	maxFailedShown = 8
	maxFailedWords = 300
)

// toolFailed records that tool call id failed, with what its content says.
func (c *client) toolFailed(id acpsdk.ToolCallId, content []acpsdk.ToolCallContent) {
	var words []string
	for _, tc := range content {
		if tc.Content != nil && tc.Content.Content.Text != nil {
			words = append(words, strings.TrimSpace(tc.Content.Content.Text.Text))
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.failed) >= maxFailedShown {
		return
	}
	title := c.toolTitle[id]
	if title == "" {
		title = string(id)
	}
	line := untrusted.Line(title, 120)
	if w := untrusted.Line(strings.Join(words, " "), maxFailedWords); w != "" {
		line += ": " + w
	}
	c.failed = append(c.failed, line)
}

// releaseAll kills and frees every terminal and closes the work dir (it
// may be a mount about to be unmounted).
func (c *client) releaseAll() {
	c.mu.Lock()
	terms := c.terms
	c.terms = map[string]*terminal{}
	c.mu.Unlock()
	for _, t := range terms {
		t.kill()
		t.wait()
	}
	c.root.Close()
}

// path maps an ACP path to a name inside the work dir: it must be
// absolute and lexically inside. os.Root refuses symlinks leading out.
func (c *client) path(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", acpsdk.NewInvalidParams(map[string]any{"path": p, "error": "the path must be absolute"})
	}
	rel, err := filepath.Rel(c.workDir, filepath.Clean(p))
	if err != nil || !filepath.IsLocal(rel) && rel != "." {
		return "", acpsdk.NewInvalidParams(map[string]any{"path": p, "error": "the path is outside the work directory " + c.workDir})
	}
	return rel, nil
}

// fileError turns a file system error into an ACP error without host
// details beyond the path asked for.
func fileError(p string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &acpsdk.RequestError{Code: codeResourceNotFound, Message: "Resource not found", Data: map[string]any{"path": p}}
	case errors.Is(err, fs.ErrPermission):
		return acpsdk.NewInvalidRequest(map[string]any{"path": p, "error": "permission denied"})
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err // "path escapes from parent", "is a directory", ...
	}
	return acpsdk.NewInvalidParams(map[string]any{"path": p, "error": err.Error()})
}

func (c *client) ReadTextFile(_ context.Context, p acpsdk.ReadTextFileRequest) (acpsdk.ReadTextFileResponse, error) {
	rel, err := c.path(p.Path)
	if err != nil {
		return acpsdk.ReadTextFileResponse{}, err
	}
	if p.Line != nil && *p.Line < 1 || p.Limit != nil && *p.Limit < 0 {
		return acpsdk.ReadTextFileResponse{}, acpsdk.NewInvalidParams(map[string]any{"error": "line is 1-based and limit not negative"})
	}
	f, err := c.root.Open(rel)
	if err != nil {
		return acpsdk.ReadTextFileResponse{}, fileError(p.Path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxTextFile+1))
	if err != nil {
		return acpsdk.ReadTextFileResponse{}, fileError(p.Path, err)
	}
	if len(data) > maxTextFile {
		return acpsdk.ReadTextFileResponse{}, acpsdk.NewInvalidParams(map[string]any{"path": p.Path,
			"error": fmt.Sprintf("the file is larger than %d bytes", maxTextFile)})
	}
	content := string(data)
	if p.Line != nil || p.Limit != nil {
		lines := strings.SplitAfter(content, "\n")
		start := 0
		if p.Line != nil {
			start = min(*p.Line-1, len(lines))
		}
		end := len(lines)
		if p.Limit != nil {
			end = min(start+*p.Limit, end)
		}
		content = strings.Join(lines[start:end], "")
	}
	return acpsdk.ReadTextFileResponse{Content: content}, nil
}

func (c *client) WriteTextFile(_ context.Context, p acpsdk.WriteTextFileRequest) (acpsdk.WriteTextFileResponse, error) {
	rel, err := c.path(p.Path)
	if err != nil {
		return acpsdk.WriteTextFileResponse{}, err
	}
	if c.readOnly {
		return acpsdk.WriteTextFileResponse{}, acpsdk.NewInvalidRequest(map[string]any{"path": p.Path, "error": "the delegation is read-only"})
	}
	made := c.missing(rel) // before they are made: to be the agent's
	if dir := filepath.Dir(rel); dir != "." {
		if err := c.root.MkdirAll(dir, 0o755); err != nil {
			return acpsdk.WriteTextFileResponse{}, fileError(p.Path, err)
		}
	}
	if err := c.root.WriteFile(rel, []byte(p.Content), 0o644); err != nil {
		return acpsdk.WriteTextFileResponse{}, fileError(p.Path, err)
	}
	if o := c.task.Owner; o != nil {
		for _, name := range made {
			if err := c.root.Lchown(name, o.UID, o.GID); err != nil {
				return acpsdk.WriteTextFileResponse{}, fileError(p.Path, err)
			}
		}
	}
	return acpsdk.WriteTextFileResponse{}, nil
}

// missing are rel and those of its parent directories that do not exist
// yet, outermost first; none where the agent runs as the daemon's user.
func (c *client) missing(rel string) []string {
	if c.task.Owner == nil {
		return nil
	}
	var out []string
	for p := rel; p != "." && p != "/"; p = filepath.Dir(p) {
		if _, err := c.root.Lstat(p); err == nil {
			break
		}
		out = append([]string{p}, out...)
	}
	return out
}

// RequestPermission asks the executor's policy (which may ask the
// delegator) and answers with its choice, or cancelled.
func (c *client) RequestPermission(ctx context.Context, p acpsdk.RequestPermissionRequest) (acpsdk.RequestPermissionResponse, error) {
	c.mu.Lock()
	c.nextID++
	id := "perm-" + strconv.Itoa(c.nextID)
	title := c.toolTitle[p.ToolCall.ToolCallId]
	c.mu.Unlock()
	if p.ToolCall.Title != nil {
		title = *p.ToolCall.Title
	}
	raw, _ := json.Marshal(p.ToolCall)
	req := agent.PermissionRequest{ID: id, Title: title, ToolCall: raw}
	for _, o := range p.Options {
		req.Options = append(req.Options, agent.PermissionOption{OptionID: string(o.OptionId), Name: o.Name, Kind: string(o.Kind)})
	}
	cancelled := acpsdk.RequestPermissionResponse{Outcome: acpsdk.NewRequestPermissionOutcomeCancelled()}
	if c.hooks.Permission == nil {
		return cancelled, nil
	}
	// The ask ends with the task or with the request (the agent cancelled
	// it), whichever comes first.
	actx, stop := context.WithCancel(ctx)
	defer stop()
	defer context.AfterFunc(c.askCtx, stop)()
	d := c.hooks.Permission(actx, req)
	if d.OptionID == "" {
		return cancelled, nil
	}
	return acpsdk.RequestPermissionResponse{Outcome: acpsdk.NewRequestPermissionOutcomeSelected(acpsdk.PermissionOptionId(d.OptionID))}, nil
}

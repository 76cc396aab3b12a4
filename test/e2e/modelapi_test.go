package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// scriptedModel answers the model APIs the real agents call — Anthropic's
// Messages (Claude Code), Google's Gemini API (Gemini CLI) and OpenAI's
// Responses (Codex), each streamed as the agent asks — with one scripted
// conversation: while the agent has sent no tool result it is asked to
// make the edit with its own tools (Claude reads the file first, as its
// Edit requires), then it is given the final words. A Claude Code that
// has awcp's MCP server is the delegator's side instead: it fetches the
// delegate tool (Claude Code defers MCP tools behind its ToolSearch),
// lends its working directory with delegatedPrompt, and answers with the
// tool's result. Requests that offer no edit tool (titles, classifiers,
// summaries) get a short text. No key is checked; nothing leaves
// loopback.
type scriptedModel struct {
	url  string
	edit modelEdit

	mu   sync.Mutex
	seen []string // "METHOD path", in order
	// toolErrors are the tool results the agents sent back marked as
	// errors, or whose text says the tool failed.
	toolErrors []string
}

// delegatedPrompt is the task a delegator's model gives awcp's delegate
// tool.
const delegatedPrompt = "Mark the notes reviewed."

// modelEdit is the edit the model asks for: file, relative to the agent's
// working directory, whose text old becomes new; then it says final.
type modelEdit struct {
	file, old, new, final string
}

func startScriptedModel(t *testing.T, edit modelEdit) *scriptedModel {
	t.Helper()
	m := &scriptedModel{edit: edit}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: m}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	m.url = "http://" + ln.Addr().String()
	return m
}

// requests is what the agents asked, "METHOD path" each.
func (m *scriptedModel) requests() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.seen...)
}

func (m *scriptedModel) errors() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.toolErrors...)
}

func (m *scriptedModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	m.mu.Lock()
	m.seen = append(m.seen, r.Method+" "+r.URL.Path)
	m.mu.Unlock()
	p := r.URL.Path
	switch {
	case strings.HasSuffix(p, "/messages/count_tokens"):
		writeJSON(w, map[string]any{"input_tokens": 100})
	case strings.HasSuffix(p, "/messages"):
		m.anthropic(w, body)
	case strings.Contains(p, ":countTokens"):
		writeJSON(w, map[string]any{"totalTokens": 100})
	case strings.Contains(p, ":streamGenerateContent"), strings.Contains(p, ":generateContent"):
		m.gemini(w, body, strings.Contains(p, ":stream"))
	case strings.HasSuffix(p, "/responses"):
		m.openai(w, body)
	case strings.HasSuffix(p, "/models"):
		writeJSON(w, map[string]any{"object": "list", "data": []any{}, "models": []any{}})
	default:
		http.Error(w, `{"error":{"message":"the scripted model serves no `+path.Base(p)+`"}}`, http.StatusNotFound)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// sse writes one server-sent event, named or not, and flushes it.
func sse(w http.ResponseWriter, event string, data any) {
	b, _ := json.Marshal(data)
	if event != "" {
		fmt.Fprintf(w, "event: %s\n", event)
	}
	fmt.Fprintf(w, "data: %s\n\n", b)
	w.(http.Flusher).Flush()
}

func (m *scriptedModel) noteToolError(s string) {
	m.mu.Lock()
	m.toolErrors = append(m.toolErrors, s)
	m.mu.Unlock()
}

// toolFailed says whether a tool result's text reads as a refusal or a
// failure.
func toolFailed(s string) bool {
	l := strings.ToLower(s)
	for _, w := range []string{"error", "denied", "refused", "not permitted", "failed", "cannot", "permission"} {
		if strings.Contains(l, w) {
			return true
		}
	}
	return false
}

// cwdPatterns find the agent's working directory in its own prompt, as
// the JSON of the request carries it (a path of the tests' has no space,
// quote or backslash).
var cwdPatterns = []*regexp.Regexp{
	regexp.MustCompile(`Primary working directory: ([^\s\\"]+)`),            // Claude Code
	regexp.MustCompile(`\*\*Workspace Directories:\*\*\\n\s+- ([^\s\\"]+)`), // Gemini CLI
	regexp.MustCompile(`<cwd>([^<]+)</cwd>`),                                // Codex
}

// workingDir is the agent's working directory, as its own prompt states it.
func workingDir(body []byte) string {
	for _, re := range cwdPatterns {
		if m := re.FindSubmatch(body); m != nil {
			return string(m[1])
		}
	}
	return ""
}

// --- Anthropic Messages ---

func (m *scriptedModel) anthropic(w http.ResponseWriter, body []byte) {
	var req struct {
		Stream   bool `json:"stream"`
		Tools    []struct{ Name string }
		Messages []struct {
			Content json.RawMessage
		}
	}
	json.Unmarshal(body, &req)
	offered := map[string]bool{}
	for _, t := range req.Tools {
		offered[t.Name] = true
	}
	// answered holds the results of the tool calls made, by id.
	answered := map[string]string{}
	results := 0
	for _, msg := range req.Messages {
		var blocks []struct {
			Type      string
			ToolUseID string `json:"tool_use_id"`
			IsError   bool   `json:"is_error"`
			Content   json.RawMessage
		}
		if json.Unmarshal(msg.Content, &blocks) != nil {
			continue
		}
		for _, b := range blocks {
			if b.Type == "tool_result" {
				results++
				answered[b.ToolUseID] = string(b.Content)
				if b.IsError {
					m.noteToolError("claude: " + string(b.Content))
				}
			}
		}
	}
	// awcp's MCP tool, as Claude Code names it; Claude Code lists an MCP
	// server's tools by name only, to be fetched with its ToolSearch.
	const delegate = "mcp__awcp__delegate"
	lends := bytes.Contains(body, []byte(delegate))
	file := path.Join(workingDir(body), m.edit.file)
	var block map[string]any
	switch {
	case lends && answered["toolu_awcp_delegate"] != "":
		block = map[string]any{"type": "text", "text": "The executor's agent answered: " + answered["toolu_awcp_delegate"]}
	case lends && offered[delegate]:
		// The delegator's side: the model lends its working directory
		// to the executor's agent with the task.
		block = map[string]any{"type": "tool_use", "id": "toolu_awcp_delegate", "name": delegate, "input": map[string]any{
			"description": "review the notes", "prompt": delegatedPrompt, "workspace_dir": workingDir(body)}}
	case lends && offered["ToolSearch"] && answered["toolu_awcp_search"] == "":
		block = map[string]any{"type": "tool_use", "id": "toolu_awcp_search", "name": "ToolSearch", "input": map[string]any{"query": "select:" + delegate}}
	case lends:
		block = map[string]any{"type": "text", "text": "The delegate tool was not offered."}
	case offered["Edit"] && results == 0:
		block = map[string]any{"type": "tool_use", "id": "toolu_awcp_read", "name": "Read", "input": map[string]any{"file_path": file}}
	case offered["Edit"] && results == 1:
		block = map[string]any{"type": "tool_use", "id": "toolu_awcp_edit", "name": "Edit",
			"input": map[string]any{"file_path": file, "old_string": m.edit.old, "new_string": m.edit.new}}
	case offered["Edit"]:
		block = map[string]any{"type": "text", "text": m.edit.final}
	default:
		block = map[string]any{"type": "text", "text": "Scripted"}
	}
	stop := "end_turn"
	if block["type"] == "tool_use" {
		stop = "tool_use"
	}
	usage := map[string]any{"input_tokens": 100, "output_tokens": 10}
	msg := map[string]any{"id": "msg_awcp", "type": "message", "role": "assistant", "model": "claude-scripted",
		"content": []any{block}, "stop_reason": stop, "stop_sequence": nil, "usage": usage}
	if !req.Stream {
		writeJSON(w, msg)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	start := map[string]any{}
	for k, v := range msg {
		start[k] = v
	}
	start["content"], start["stop_reason"] = []any{}, nil
	sse(w, "message_start", map[string]any{"type": "message_start", "message": start})
	if block["type"] == "tool_use" {
		input, _ := json.Marshal(block["input"])
		sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "tool_use", "id": block["id"], "name": block["name"], "input": map[string]any{}}})
		sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "input_json_delta", "partial_json": string(input)}})
	} else {
		sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "text", "text": ""}})
		sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "text_delta", "text": block["text"]}})
	}
	sse(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	sse(w, "message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": 10}})
	sse(w, "message_stop", map[string]any{"type": "message_stop"})
}

// --- Gemini API ---

func (m *scriptedModel) gemini(w http.ResponseWriter, body []byte, stream bool) {
	var req struct {
		Contents []struct {
			Parts []struct {
				FunctionResponse *struct {
					Name     string
					Response json.RawMessage
				} `json:"functionResponse"`
			}
		}
		Tools []struct {
			FunctionDeclarations []struct{ Name string } `json:"functionDeclarations"`
		}
		GenerationConfig struct {
			ResponseJSONSchema json.RawMessage `json:"responseJsonSchema"`
			ResponseMimeType   string          `json:"responseMimeType"`
		} `json:"generationConfig"`
	}
	json.Unmarshal(body, &req)
	offers := false
	for _, t := range req.Tools {
		for _, f := range t.FunctionDeclarations {
			offers = offers || f.Name == "replace"
		}
	}
	results := 0
	for _, c := range req.Contents {
		for _, p := range c.Parts {
			if p.FunctionResponse != nil {
				results++
				if s := string(p.FunctionResponse.Response); strings.Contains(s, `"error"`) {
					m.noteToolError("gemini: " + s)
				}
			}
		}
	}
	var part map[string]any
	switch {
	case offers && results == 0:
		part = map[string]any{"functionCall": map[string]any{"name": "replace", "args": map[string]any{
			"file_path": path.Join(workingDir(body), m.edit.file), "instruction": "make the scripted edit",
			"old_string": m.edit.old, "new_string": m.edit.new}}, "thoughtSignature": "c2NyaXB0ZWQ="}
	case offers:
		part = map[string]any{"text": m.edit.final}
	case req.GenerationConfig.ResponseMimeType == "application/json":
		// Gemini CLI's router asks how hard the prompt is, in a schema
		// of its own: an object of the schema's required fields.
		part = map[string]any{"text": schemaExample(req.GenerationConfig.ResponseJSONSchema)}
	default:
		part = map[string]any{"text": "Scripted"}
	}
	resp := map[string]any{
		"candidates":    []any{map[string]any{"content": map[string]any{"role": "model", "parts": []any{part}}, "finishReason": "STOP", "index": 0}},
		"usageMetadata": map[string]any{"promptTokenCount": 100, "candidatesTokenCount": 10, "totalTokenCount": 110},
		"modelVersion":  "gemini-scripted",
	}
	if !stream {
		writeJSON(w, resp)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	sse(w, "", resp)
}

// schemaExample is a JSON object holding each property of an object
// schema, a string "1" or the number 1.
func schemaExample(schema json.RawMessage) string {
	var s struct {
		Properties map[string]struct{ Type string }
	}
	json.Unmarshal(schema, &s)
	out := map[string]any{}
	for name, p := range s.Properties {
		switch strings.ToLower(p.Type) {
		case "integer", "number":
			out[name] = 1
		case "boolean":
			out[name] = false
		default:
			out[name] = "scripted"
		}
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// --- OpenAI Responses ---

func (m *scriptedModel) openai(w http.ResponseWriter, body []byte) {
	var req struct {
		Tools []struct {
			Type, Name string
		}
		Input json.RawMessage
	}
	json.Unmarshal(body, &req)
	var items []struct {
		Type   string
		Output json.RawMessage
	}
	json.Unmarshal(req.Input, &items)
	patch := false
	for _, t := range req.Tools {
		patch = patch || t.Name == "apply_patch"
	}
	results := 0
	for _, it := range items {
		if strings.HasSuffix(it.Type, "_call_output") {
			results++
			if toolFailed(string(it.Output)) {
				m.noteToolError("codex: " + string(it.Output))
			}
		}
	}
	var item map[string]any
	switch {
	case len(req.Tools) > 0 && results == 0 && patch:
		item = map[string]any{"type": "custom_tool_call", "id": "ctc_awcp", "call_id": "call_awcp", "name": "apply_patch", "status": "completed",
			"input": m.patch()}
	case len(req.Tools) > 0 && results == 0:
		args, _ := json.Marshal(map[string]any{"cmd": "apply_patch <<'EOF'\n" + m.patch() + "EOF\n", "workdir": workingDir(body)})
		item = map[string]any{"type": "function_call", "id": "fc_awcp", "call_id": "call_awcp", "name": "exec_command", "status": "completed",
			"arguments": string(args)}
	default:
		text := "Scripted"
		if len(req.Tools) > 0 {
			text = m.edit.final
		}
		item = map[string]any{"type": "message", "id": "msg_awcp", "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}}
	}
	resp := map[string]any{"id": "resp_awcp", "object": "response", "status": "in_progress", "model": "gpt-scripted", "output": []any{}}
	w.Header().Set("Content-Type", "text/event-stream")
	sse(w, "response.created", map[string]any{"type": "response.created", "response": resp})
	sse(w, "response.output_item.added", map[string]any{"type": "response.output_item.added", "output_index": 0, "item": item})
	if item["type"] == "message" {
		sse(w, "response.output_text.delta", map[string]any{"type": "response.output_text.delta", "item_id": "msg_awcp",
			"output_index": 0, "content_index": 0, "delta": item["content"].([]any)[0].(map[string]any)["text"]})
	}
	sse(w, "response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": 0, "item": item})
	resp["status"], resp["output"] = "completed", []any{item}
	resp["usage"] = map[string]any{"input_tokens": 100, "output_tokens": 10, "total_tokens": 110,
		"input_tokens_details": map[string]any{"cached_tokens": 0}, "output_tokens_details": map[string]any{"reasoning_tokens": 0}}
	sse(w, "response.completed", map[string]any{"type": "response.completed", "response": resp})
}

// patch is the edit in apply_patch's own format.
func (m *scriptedModel) patch() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*** Begin Patch\n*** Update File: %s\n@@\n", m.edit.file)
	for _, l := range strings.Split(strings.TrimSuffix(m.edit.old, "\n"), "\n") {
		fmt.Fprintf(&b, "-%s\n", l)
	}
	for _, l := range strings.Split(strings.TrimSuffix(m.edit.new, "\n"), "\n") {
		fmt.Fprintf(&b, "+%s\n", l)
	}
	b.WriteString("*** End Patch\n")
	return b.String()
}

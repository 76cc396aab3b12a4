package gateway

import (
	"encoding/json"
	"slices"

	"github.com/awcp/awcp/control"
)

// What the gateway reads of and writes into the ACP messages it relays.

// expired is the answer to a request for a session that is not (or no
// longer) open: session_expired, seed 003's.
func expired(id json.RawMessage) *control.RPCMessage {
	return control.RPCErrorResponse(id, -32002, "session_expired", map[string]any{
		"reason": "session_expired", "hint": "the session ended (closed, expired, or its delegation ended): start a new one"})
}

// capabilities lists what the editor declared in its initialize.
func capabilities(init json.RawMessage) []string {
	var p struct {
		ClientCapabilities struct {
			Fs struct {
				ReadTextFile  bool `json:"readTextFile"`
				WriteTextFile bool `json:"writeTextFile"`
			} `json:"fs"`
			Terminal bool `json:"terminal"`
		} `json:"clientCapabilities"`
	}
	json.Unmarshal(init, &p)
	out := []string{}
	c := p.ClientCapabilities
	for name, has := range map[string]bool{"fs.readTextFile": c.Fs.ReadTextFile, "fs.writeTextFile": c.Fs.WriteTextFile, "terminal": c.Terminal} {
		if has {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// withoutEditorWrites is an editor's initialize params with
// fs.writeTextFile declared false: a staged session's writes are the
// agent's own, made in the (staged) mount and kept for review, never the
// editor's, which would land in the project at once.
func withoutEditorWrites(init json.RawMessage) json.RawMessage {
	var p map[string]json.RawMessage
	if json.Unmarshal(init, &p) != nil {
		return init
	}
	var caps map[string]json.RawMessage
	json.Unmarshal(p["clientCapabilities"], &caps)
	if caps == nil {
		return init
	}
	var fs map[string]json.RawMessage
	json.Unmarshal(caps["fs"], &fs)
	if fs == nil {
		return init
	}
	fs["writeTextFile"] = json.RawMessage("false")
	caps["fs"], _ = json.Marshal(fs)
	p["clientCapabilities"], _ = json.Marshal(caps)
	out, err := json.Marshal(p)
	if err != nil {
		return init
	}
	return out
}

// permissionTitle is a permission request's tool call title.
func permissionTitle(params json.RawMessage) string {
	var p struct {
		ToolCall struct {
			Title      string `json:"title"`
			ToolCallID string `json:"toolCallId"`
		} `json:"toolCall"`
	}
	json.Unmarshal(params, &p)
	if p.ToolCall.Title != "" {
		return p.ToolCall.Title
	}
	return p.ToolCall.ToolCallID
}

// permissionOutcome is how the editor answered a permission request.
func permissionOutcome(m *control.RPCMessage) string {
	var r struct {
		Outcome struct {
			Outcome  string `json:"outcome"`
			OptionID string `json:"optionId"`
		} `json:"outcome"`
	}
	if len(m.Error) > 0 || json.Unmarshal(m.Result, &r) != nil {
		return "no answer"
	}
	if r.Outcome.OptionID != "" {
		return r.Outcome.Outcome + " " + r.Outcome.OptionID
	}
	return r.Outcome.Outcome
}

// shortID is the start of a delegation id, for a channel's.
func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// renameSession is params with sessionId from replaced by to: between the
// editor's id of a session and its agent's, where they differ.
func renameSession(params json.RawMessage, from, to string) json.RawMessage {
	if from == to || len(params) == 0 {
		return params
	}
	var p map[string]json.RawMessage
	if json.Unmarshal(params, &p) != nil {
		return params
	}
	var id string
	if json.Unmarshal(p["sessionId"], &id) != nil || id != from {
		return params
	}
	p["sessionId"], _ = json.Marshal(to)
	out, err := json.Marshal(p)
	if err != nil {
		return params
	}
	return out
}

// differs is a, or "" if it is b.
func differs(a, b string) string {
	if a == b {
		return ""
	}
	return a
}

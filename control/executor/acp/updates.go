package acp

import (
	"context"
	"fmt"
	"strings"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/awcp/awcp/control/executor/agent"
)

// maxLine bounds one progress line made of the agent's text.
const maxLine = 4 << 10

// SessionUpdate turns the agent's session/update notifications into
// readable progress: its message and thoughts line by line, tool calls and
// their status, and its plan with the fraction done.
func (c *client) SessionUpdate(_ context.Context, n acpsdk.SessionNotification) error {
	u := n.Update
	switch {
	case u.AgentMessageChunk != nil:
		if t := u.AgentMessageChunk.Content.Text; t != nil {
			id := u.AgentMessageChunk.MessageId
			c.mu.Lock()
			// Another message of the agent's begins (its messageId
			// changed): its words are not run on into the last one's.
			next := id != nil && c.messageID != "" && *id != c.messageID
			if id != nil {
				c.messageID = *id
			}
			if next && c.message.Len() > 0 {
				c.message.WriteString("\n\n")
			}
			c.message.WriteString(t.Text)
			c.mu.Unlock()
			if next {
				c.flush()
			}
			c.stream("agent", t.Text)
		}
	case u.AgentThoughtChunk != nil:
		if t := u.AgentThoughtChunk.Content.Text; t != nil {
			c.stream("thinking", t.Text)
		}
	case u.ToolCall != nil:
		tc := u.ToolCall
		c.flush()
		c.mu.Lock()
		c.message.Reset() // the summary is what the agent says after its last tool call
		c.toolTitle[tc.ToolCallId] = tc.Title
		c.mu.Unlock()
		msg := "tool: " + tc.Title
		if tc.Kind != "" || tc.Status != "" {
			msg += fmt.Sprintf(" (%s)", strings.Trim(string(tc.Kind)+", "+string(tc.Status), ", "))
		}
		if tc.Status == acpsdk.ToolCallStatusFailed {
			c.toolFailed(tc.ToolCallId, tc.Content)
		}
		c.emit(agent.Update{Message: msg})
	case u.ToolCallUpdate != nil:
		tc := u.ToolCallUpdate
		c.mu.Lock()
		if tc.Title != nil {
			c.toolTitle[tc.ToolCallId] = *tc.Title
		}
		title := c.toolTitle[tc.ToolCallId]
		c.mu.Unlock()
		if tc.Status != nil {
			if *tc.Status == acpsdk.ToolCallStatusFailed {
				c.toolFailed(tc.ToolCallId, tc.Content)
			}
			if title == "" {
				title = string(tc.ToolCallId)
			}
			c.emit(agent.Update{Message: fmt.Sprintf("tool: %s: %s", title, *tc.Status)})
		}
	case u.Plan != nil:
		c.flush()
		entries := u.Plan.Entries
		if len(entries) == 0 {
			return nil
		}
		done, now := 0, ""
		for _, e := range entries {
			switch e.Status {
			case acpsdk.PlanEntryStatusCompleted:
				done++
			case acpsdk.PlanEntryStatusInProgress:
				if now == "" {
					now = e.Content
				}
			}
		}
		frac := float64(done) / float64(len(entries))
		msg := fmt.Sprintf("plan: %d of %d done", done, len(entries))
		if now != "" {
			msg += "; now: " + now
		}
		c.emit(agent.Update{Message: msg, Progress: &frac})
	default:
		c.log.Debug("session update not shown", "update", n.Update)
	}
	return nil
}

// stream adds a chunk of the agent's text of one kind and emits each line
// it completes.
func (c *client) stream(kind, text string) {
	c.mu.Lock()
	rest := c.pending[kind] + text
	var lines []string
	for {
		line, after, ok := strings.Cut(rest, "\n")
		if !ok {
			break
		}
		lines, rest = append(lines, line), after
	}
	c.pending[kind] = rest
	c.mu.Unlock()
	for _, l := range lines {
		c.line(kind, l)
	}
}

// flush emits the unfinished line of every kind, thoughts first.
func (c *client) flush() {
	c.mu.Lock()
	thinking, said := c.pending["thinking"], c.pending["agent"]
	clear(c.pending)
	c.mu.Unlock()
	c.line("thinking", thinking)
	c.line("agent", said)
}

func (c *client) line(kind, l string) {
	l = strings.TrimRight(l, "\r ")
	if strings.TrimSpace(l) == "" {
		return
	}
	if len(l) > maxLine {
		l = l[:maxLine]
	}
	c.emit(agent.Update{Message: kind + ": " + l})
}

func (c *client) emit(u agent.Update) {
	if c.hooks.Update != nil {
		c.hooks.Update(u)
	}
}

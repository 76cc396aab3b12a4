package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/awcp/awcp/control"
)

// Registering the tools: schemas inferred from the arguments' types, and
// every failure a tool error with a spec code.

// result is what every tool returns: structured, readable, and a tool
// error when failed. refused is the result of a call refused with f before
// anything was done, in the tool's own type so that its structured content
// still matches the tool's output schema.
type result[R any] interface {
	failed() bool
	text() string
	refused(f *Failure) R
}

// schemaHint adds to an inferred property schema what struct tags cannot
// say: its default, its allowed values, its minimum.
type schemaHint struct {
	def  any
	enum []any
	min  *float64
}

func ptr[T any](v T) *T { return &v }

// addTool registers a tool whose arguments decode into In and whose result
// is Out. It does what mcp.AddTool does — schemas inferred from the types,
// structured content with a text fallback — but decodes and checks the
// arguments itself, so that every bad argument and every failure is a tool
// error carrying a spec code (mcp.AddTool reports schema violations as
// plain text). Defaults are applied by the handlers; hints only show them.
func addTool[In any, Out result[Out]](srv *mcp.Server, tool *mcp.Tool,
	h func(context.Context, *mcp.CallToolRequest, In) (Out, error), hints map[string]schemaHint) error {
	in, err := jsonschema.For[In](nil)
	if err != nil {
		return fmt.Errorf("tool %s: input schema: %w", tool.Name, err)
	}
	// A slice argument is inferred as ["null", "array"]: an argument left
	// out is null enough, and a type that is one type is what models and
	// clients read best.
	for _, p := range in.Properties {
		if len(p.Types) == 2 && slices.Contains(p.Types, "null") {
			other := p.Types[0]
			if other == "null" {
				other = p.Types[1]
			}
			p.Type, p.Types = other, nil
		}
	}
	for name, hint := range hints {
		p := in.Properties[name]
		if p == nil {
			return fmt.Errorf("tool %s: no argument %s", tool.Name, name)
		}
		if hint.def != nil {
			if p.Default, err = json.Marshal(hint.def); err != nil {
				return err
			}
		}
		p.Enum, p.Minimum = hint.enum, hint.min
	}
	out, err := jsonschema.For[Out](nil)
	if err != nil {
		return fmt.Errorf("tool %s: output schema: %w", tool.Name, err)
	}
	tool.InputSchema, tool.OutputSchema = in, out
	srv.AddTool(tool, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args In
		raw := req.Params.Arguments
		if len(raw) == 0 || string(raw) == "null" {
			raw = []byte("{}")
		}
		var o Out
		// The schema says additionalProperties: false, and means it: an
		// argument the tool does not take is refused, not ignored
		// (transport: "archive" ran over the live mount).
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&args); err != nil {
			o = o.refused(&Failure{Code: control.CodeUsage, Message: "bad arguments: " + err.Error(),
				Hint: "see the tool's input schema"})
		} else if o, err = h(ctx, req, args); err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return nil, err // the call was cancelled: nobody waits for an answer
			}
			o = o.refused(failureOf(err))
		}
		return &mcp.CallToolResult{
			Content:           []mcp.Content{&mcp.TextContent{Text: o.text()}},
			StructuredContent: o,
			IsError:           o.failed(),
		}, nil
	})
	return nil
}

package acp

import (
	"encoding/json"
	"strings"
)

// rewritePaths returns v with every string that is from, or a path
// beneath it, made the same path beneath to: how a relay translates
// between the agent's work directory and the editor's project
// directory. Anything that is not valid JSON is returned unchanged.
func rewritePaths(v json.RawMessage, from, to string) json.RawMessage {
	if len(v) == 0 || from == to || !strings.Contains(string(v), from) {
		return v
	}
	var x any
	if err := json.Unmarshal(v, &x); err != nil {
		return v
	}
	out, err := json.Marshal(rewriteValue(x, from, to))
	if err != nil {
		return v
	}
	return out
}

func rewriteValue(x any, from, to string) any {
	switch x := x.(type) {
	case string:
		return rewritePath(x, from, to)
	case []any:
		for i := range x {
			x[i] = rewriteValue(x[i], from, to)
		}
	case map[string]any:
		for k, e := range x {
			x[k] = rewriteValue(e, from, to)
		}
	}
	return x
}

// rewritePath is s beneath to if s is from or beneath it (as a path, or
// as a file URI), else s.
func rewritePath(s, from, to string) string {
	for _, prefix := range []string{"", "file://"} {
		p := prefix + from
		if s == p || strings.HasPrefix(s, p+"/") {
			return prefix + to + s[len(p):]
		}
	}
	return s
}

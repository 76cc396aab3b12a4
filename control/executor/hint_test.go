package executor

import (
	"strings"
	"testing"

	"github.com/awcp/awcp/internal/sandbox"
)

// The sandbox's hint names the paths an agent's error names, whole: not
// the tail of a package name ("@anthropic-ai/claude-agent-sdk" is no
// path "/claude-agent-sdk").
func TestSandboxHintNamesWholePaths(t *testing.T) {
	out := "Error: Cannot find module '@anthropic-ai/claude-agent-sdk'\nRequire stack:\n- /opt/agent/dist/index.js\nopen(\"/root/.claude/settings.json\"): permission denied"
	hint := sandboxHint(&sandbox.Policy{}, out)
	if strings.Contains(hint, "/claude-agent-sdk") || !strings.Contains(hint, "/root/.claude/settings.json") {
		t.Errorf("hint: %q", hint)
	}
}

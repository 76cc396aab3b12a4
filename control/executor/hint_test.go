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

// An agent that says it has no credentials is told what it lacks: its key
// by --agent-env, or its login granted; not a guess at the sandbox.
func TestCredentialHint(t *testing.T) {
	for _, words := range [][2]string{
		{"the ACP agent failed: session/prompt: Authentication required", "[session/create] phase=start\n[acp] debug"},
		{"the agent exited 1", "Not logged in · Please run /login"},
		{"the agent exited 1", "Error: no API key: set GEMINI_API_KEY\nENOENT: no such file /x"},
	} {
		if h := agentHint(&sandbox.Policy{}, words[0], words[1]); !strings.Contains(h, "--agent-env") || !strings.Contains(h, "--sandbox-allow ~/.claude:rw") {
			t.Errorf("%q / %q: hint %q", words[0], words[1], h)
		}
	}
	if h := agentHint(&sandbox.Policy{}, "the agent exited 1", "open(\"/etc/x\"): permission denied"); !strings.Contains(h, "sandbox may have refused it /etc/x") {
		t.Errorf("a refusal's hint: %q", h)
	}
}

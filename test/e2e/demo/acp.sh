#!/bin/sh
# make demo-acp: a session with an ACP agent, without an API key. The
# executor's agent is the test suite's ACP agent (Node.js, with the
# official ACP SDK from the npm registry); the delegator opens a session
# from the command line, answers the agent's permission request, says a
# second turn, and closes it. Needs the two binaries in $BIN (default
# ./bin), node and npm.
set -eu
BIN=${BIN:-$(pwd)/bin}
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/awcp-demo-acp.XXXXXX")
PORT=${AWCP_DEMO_PORT:-10298}
SDK=@agentclientprotocol/sdk@2.4.0
CTL() { "$BIN/awcp-ctl" --state-dir "$TMP/delegator-state" "$@"; }
cleanup() {
	"$BIN/awcp-ctl" --state-dir "$TMP/delegator-state" stop >/dev/null 2>&1 || true
	[ -n "${EXEC_PID:-}" ] && kill "$EXEC_PID" 2>/dev/null && wait "$EXEC_PID" 2>/dev/null
	rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

# AWCP_DEMO_AGENT_DIR: a directory whose node_modules has the SDK already
# (the tests' npm cache); else it is installed here.
AGENT=${AWCP_DEMO_AGENT_DIR:-$TMP/agent}
echo "== the agent: $SDK from the npm registry, and a scripted ACP agent"
if [ -z "${AWCP_DEMO_AGENT_DIR:-}" ]; then
	mkdir -p "$AGENT"
	(cd "$AGENT" && npm install --silent --no-audit --no-fund "$SDK" >/dev/null)
fi
cp "$HERE/../testdata/acp_session_agent.mjs" "$AGENT/"
cp -R "$HERE/workspace" "$TMP/workspace"
echo "notes of the demo" >"$TMP/workspace/notes.txt"

echo "== starting the executor: awcp-fs serve --agent-acp 'node acp_session_agent.mjs'"
"$BIN/awcp-fs" serve --state-dir "$TMP/executor-state" --work-root "$TMP/executor-work" \
	--listen "127.0.0.1:$PORT" --agent-acp "exec node '$AGENT/acp_session_agent.mjs'" \
	--sandbox-allow "$AGENT" >"$TMP/executor.log" 2>&1 &
EXEC_PID=$!
for _ in $(seq 50); do
	grep -q listening "$TMP/executor.log" 2>/dev/null && break
	sleep 0.1
done
KEY=$("$BIN/awcp-fs" id --state-dir "$TMP/executor-state" | head -n 1)

echo "== opening a session: awcp-ctl export workspace --session new --prompt 'first'"
CTL export "$TMP/workspace" --peer "https://127.0.0.1:$PORT" --peer-key "$KEY" --ssh-listen 127.0.0.1:0 \
	--session new --prompt "first" 2>"$TMP/open.err" || true
sed 's/^/   /' "$TMP/open.err"
ID=$(sed -n 's/.*session \([0-9a-f-]*\) awaits.*/\1/p' "$TMP/open.err" | head -n 1)
[ -n "$ID" ] || { echo "the session did not open"; exit 1; }

echo "== the agent asked a permission; allowing it: awcp-ctl answer $ID --option allow"
CTL answer "$ID" --option allow 2>&1 | sed 's/^/   /'
echo "== the next turn: awcp-ctl answer $ID 'second'"
CTL answer "$ID" "second" 2>&1 | sed 's/^/   /'
CTL answer "$ID" --option allow 2>&1 | sed 's/^/   /'
echo "== closing it: awcp-ctl close $ID"
CTL close "$ID" | sed 's/^/   /'
echo "== the workspace now holds what the agent wrote in its turns:"
(cd "$TMP/workspace" && ls direct-*.txt turn-*.txt 2>/dev/null | sed 's/^/   /')

#!/bin/sh
# make demo: an executor on loopback with the demo agent, a copy of the
# sample workspace delegated to it, and what changed. Needs only the two
# binaries in $BIN (default ./bin).
set -eu
BIN=${BIN:-$(pwd)/bin}
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/awcp-demo.XXXXXX")
PORT=${AWCP_DEMO_PORT:-10299}
cleanup() {
	[ -n "${EXEC_PID:-}" ] && kill "$EXEC_PID" 2>/dev/null && wait "$EXEC_PID" 2>/dev/null
	rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

cp -R "$HERE/workspace" "$TMP/workspace"
echo "== workspace before:"
(cd "$TMP/workspace" && find . -type f | sort | xargs ls -l | awk '{print "   " $1, $NF}')

echo "== starting the executor: awcp-fs serve --listen 127.0.0.1:$PORT"
"$BIN/awcp-fs" serve --state-dir "$TMP/executor-state" --work-root "$TMP/executor-work" \
	--listen "127.0.0.1:$PORT" --agent-cmd "sh $HERE/agent.sh" >"$TMP/executor.log" 2>&1 &
EXEC_PID=$!
for _ in $(seq 50); do
	grep -q listening "$TMP/executor.log" 2>/dev/null && break
	sleep 0.1
done

# Between the two, TLS: the executor's certificate is its identity key,
# which the delegator pins (--peer-key) — here read from the executor's
# state; on two machines, compare the fingerprint `awcp-fs id` prints.
KEY=$("$BIN/awcp-fs" id --state-dir "$TMP/executor-state" | head -n 1)
echo "== the executor's identity: $("$BIN/awcp-fs" id --state-dir "$TMP/executor-state" | sed -n 's/^fingerprint //p')"

# The default transport is the live mount; without FUSE it falls back to
# the archive transport by itself, and says so.
echo "== delegating: awcp-ctl export workspace --peer https://127.0.0.1:$PORT --peer-key '$KEY'"
"$BIN/awcp-ctl" --state-dir "$TMP/delegator-state" export "$TMP/workspace" \
	--peer "https://127.0.0.1:$PORT" --peer-key "$KEY" --ssh-listen 127.0.0.1:0 \
	--prompt "Make greet.sh executable, add a test for it, and close the TODO."

echo "== workspace after:"
(cd "$TMP/workspace" && find . -type f | sort | xargs ls -l | awk '{print "   " $1, $NF}')

# The hint above names `awcp-ctl audit`; the demo's state goes with it, so
# here is what it shows: every operation the executor made, as recorded by
# the delegator's SSH server.
ID=$("$BIN/awcp-ctl" --state-dir "$TMP/delegator-state" status --json | sed -n 's/^    "id": "\(.*\)",$/\1/p' | head -n 1)
echo "== what the executor did, operation by operation: awcp-ctl audit $ID"
"$BIN/awcp-ctl" --state-dir "$TMP/delegator-state" audit "$ID" | sed 's/^/   /'
echo "== (the demo removes its state now; outside the demo, audit and status keep working after the run)"

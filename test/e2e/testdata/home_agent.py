# A test ACP agent that, like Claude Code or Gemini CLI, reads its
# credentials from a directory in its HOME (~/.fakeagent/token) and
# refuses to start without them: at initialize it says so on stderr and
# exits. With them, it answers initialize, naming itself and where it
# found them, and a session's prompt with the token, its HOME and the
# method `authenticate` last ran (fake-login succeeds; hang-login never
# answers, as a login waiting for a browser; any other needs a browser and
# fails).
import json, os, sys

home = os.environ.get("HOME", "")
authenticated = "no"  # the method authenticate last ran, in this process
token_file = os.path.join(home, ".fakeagent", "token")

def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()

for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    method, mid = msg.get("method"), msg.get("id")
    if method == "initialize":
        try:
            with open(token_file) as f:
                token = f.readline().strip()
        except OSError as e:
            sys.stderr.write("Error: not logged in: %s (%s)\n" % (token_file, e.strerror))
            sys.exit(1)
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": 1, "agentCapabilities": {},
              "agentInfo": {"name": "home-agent", "version": token},
              "authMethods": [{"id": "fake-login", "name": "Log in", "description": "reads ~/.fakeagent/token"}]}})
    elif method == "authenticate":
        how = (msg.get("params") or {}).get("methodId")
        if how == "hang-login":
            continue  # waits for a browser that never comes: no answer
        if how == "fake-login":
            authenticated = how
            send({"jsonrpc": "2.0", "id": mid, "result": {}})
        else:
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32000, "message": "%s needs a browser, and there is none here" % how}})
    elif method == "session/new":
        send({"jsonrpc": "2.0", "id": mid, "result": {"sessionId": "home-1"}})
    elif method == "session/prompt":
        with open(token_file) as f:
            token = f.readline().strip()
        text = "logged in as %s, HOME %s, authenticated %s" % (token, home, authenticated)
        send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "home-1",
              "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}})
        send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "end_turn"}})
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "Method not found"}})

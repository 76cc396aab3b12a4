// A test ACP agent, on the official ACP TypeScript SDK, that holds one
// session over many turns. Each turn it reads notes.txt (fs/read_text_file),
// writes turn-N.txt (fs/write_text_file) and direct-N.txt (on its own, into
// the mount), asks permission, and says what it saw and how many turns its
// process has had. A prompt saying "hang" waits for session/cancel and ends
// the turn cancelled; one saying "fail-auth" is answered with ACP's
// auth_required error, as a real agent without credentials answers.
import * as acp from "@agentclientprotocol/sdk";
import { Readable, Writable } from "node:stream";
import { writeFileSync } from "node:fs";
import { join } from "node:path";

// A line that is not ACP, which the relay must survive (as a task's does).
process.stdout.write("this line is not ACP\n");

const app = acp.agent({ name: "awcp-session-agent" });
// This process, told apart from another (in a PID namespace of its own,
// each agent may have the same pid; its session ids, made of it, collide
// too, as another agent's may anyway).
const PROC = String(100000 + Math.floor(Math.random() * 900000));
const sessions = new Map();

app.onRequest(acp.methods.agent.initialize, async () => ({
  protocolVersion: acp.PROTOCOL_VERSION,
  agentCapabilities: { loadSession: false },
  agentInfo: { name: "awcp-session-agent", version: "1" },
  authMethods: [],
}));

app.onRequest(acp.methods.agent.session.new, async ({ params }) => {
  const sessionId = "sess-" + process.pid + "-" + (sessions.size + 1);
  sessions.set(sessionId, { cwd: params.cwd, turns: 0, abort: null });
  return { sessionId };
});

app.onNotification(acp.methods.agent.session.cancel, async ({ params }) => {
  sessions.get(params.sessionId)?.abort?.();
});

app.onRequest(acp.methods.agent.session.prompt, async ({ params, client }) => {
  const sessionId = params.sessionId;
  const s = sessions.get(sessionId);
  const text = params.prompt.map((b) => b.text ?? "").join("\n");
  const say = (t) => client.notify(acp.methods.client.session.update, { sessionId, update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text: t + "\n" } } });
  s.turns++;
  if (text.includes("slow")) {
    await say(`slow turn ${s.turns} started`);
    await new Promise((r) => setTimeout(r, 3000));
    await say(`slow turn ${s.turns} done`);
    return { stopReason: "end_turn" };
  }
  if (text.includes("fail-auth")) {
    await say("checking credentials");
    throw acp.RequestError.authRequired(undefined, "no API key: set ANTHROPIC_API_KEY");
  }
  if (text.includes("hang")) {
    await say("hanging until cancelled");
    await new Promise((resolve) => (s.abort = resolve));
    return { stopReason: "cancelled" };
  }
  const n = s.turns;
  writeFileSync(join(s.cwd, `direct-${n}.txt`), `the agent's own write in turn ${n}\n`);
  const read = await client.request(acp.methods.client.fs.readTextFile, { sessionId, path: join(s.cwd, "notes.txt") });
  await client.request(acp.methods.client.fs.writeTextFile, { sessionId, path: join(s.cwd, `turn-${n}.txt`), content: `written through the editor in turn ${n}\n` });
  let outside = "ok";
  try {
    await client.request(acp.methods.client.fs.readTextFile, { sessionId, path: "/etc/hostname" });
  } catch (e) {
    outside = String(e.code);
  }
  const perm = await client.request(acp.methods.client.session.requestPermission, {
    sessionId,
    toolCall: { toolCallId: "edit-" + n, title: "Edit main.go", kind: "edit", locations: [{ path: join(s.cwd, "main.go") }] },
    options: [
      { optionId: "allow", name: "Allow", kind: "allow_once" },
      { optionId: "reject", name: "Reject", kind: "reject_once" },
    ],
  });
  await client.notify(acp.methods.client.session.update, {
    sessionId,
    update: { sessionUpdate: "tool_call", toolCallId: "test-" + n, title: "Run the tests", kind: "execute", status: "completed" },
  });
  await say(`turn ${n} of process ${PROC}: ${text}; read ${JSON.stringify(read.content)}; outside ${outside}; permission ${perm.outcome.optionId ?? perm.outcome.outcome}`);
  return { stopReason: "end_turn" };
});

app.connect(acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));

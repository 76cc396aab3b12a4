// A test ACP agent built on the official ACP TypeScript SDK. What it does
// depends on the prompt:
//   "work"   — plan, thought, fs/read_text_file (line/limit), a refused read
//              outside the work dir, a permission request, fs/write_text_file
//              if allowed, two terminals (one with outputByteLimit), end_turn;
//   "slow"   — waits for session/cancel, then ends the turn cancelled;
//   "crash"  — writes to stderr and exits mid-turn;
//   "refuse" — ends the turn with stopReason refusal.
// It also writes one line that is not JSON to stdout, which the client must
// survive. With $ACP_MARKER_DIR set it leaves files there when the slow
// turn starts ("prompted") and when it is cancelled ("cancelled").
import * as acp from "@agentclientprotocol/sdk";
import { Readable, Writable } from "node:stream";
import { writeFileSync } from "node:fs";
import { join } from "node:path";

process.stdout.write("this line is not ACP\n");

const app = acp.agent({ name: "awcp-test-agent" });
const sessions = new Map(); // sessionId -> {cwd, abort}

app.onRequest(acp.methods.agent.initialize, async ({ params }) => {
  sessions.caps = params.clientCapabilities;
  return {
    protocolVersion: acp.PROTOCOL_VERSION,
    agentCapabilities: { loadSession: false },
    authMethods: [],
  };
});

app.onRequest(acp.methods.agent.session.new, async ({ params }) => {
  const sessionId = "s" + (sessions.size + 1);
  sessions.set(sessionId, { cwd: params.cwd, abort: null });
  return { sessionId };
});

app.onNotification(acp.methods.agent.session.cancel, async ({ params }) => {
  sessions.get(params.sessionId)?.abort?.();
});

app.onRequest(acp.methods.agent.session.prompt, async ({ params, client }) => {
  const s = sessions.get(params.sessionId);
  const text = params.prompt.map((b) => b.text ?? "").join("\n");
  const sessionId = params.sessionId;
  const update = (u) => client.notify(acp.methods.client.session.update, { sessionId, update: u });
  const say = (t) => update({ sessionUpdate: "agent_message_chunk", content: { type: "text", text: t } });

  if (text.includes("slow")) {
    await say("waiting for a cancel\n");
    if (process.env.ACP_MARKER_DIR) writeFileSync(join(process.env.ACP_MARKER_DIR, "prompted"), sessionId);
    await new Promise((resolve) => (s.abort = resolve));
    if (process.env.ACP_MARKER_DIR) writeFileSync(join(process.env.ACP_MARKER_DIR, "cancelled"), sessionId);
    return { stopReason: "cancelled" };
  }
  if (text.includes("crash")) {
    await say("about to fall over\n");
    process.stderr.write("boom: the test agent crashed on purpose\n");
    setTimeout(() => process.exit(3), 50);
    return new Promise(() => {});
  }
  if (text.includes("refuse")) {
    await say("I will not do that.");
    return { stopReason: "refusal" };
  }

  const report = [];
  const codeOf = async (p) => {
    try {
      await p;
      return "ok";
    } catch (e) {
      return String(e.code);
    }
  };
  await update({
    sessionUpdate: "plan",
    entries: [
      { content: "read the README", priority: "high", status: "completed" },
      { content: "write notes", priority: "medium", status: "in_progress" },
      { content: "run a command", priority: "low", status: "pending" },
    ],
  });
  await update({ sessionUpdate: "agent_thought_chunk", content: { type: "text", text: "thinking about the task\n" } });

  const first = await client.request(acp.methods.client.fs.readTextFile, {
    sessionId, path: join(s.cwd, "README.md"), line: 1, limit: 1,
  });
  report.push("first line: " + first.content.trim());
  report.push("outside: " + (await codeOf(client.request(acp.methods.client.fs.readTextFile, { sessionId, path: "/etc/hostname" }))));
  report.push("relative: " + (await codeOf(client.request(acp.methods.client.fs.readTextFile, { sessionId, path: "README.md" }))));
  report.push("dotdot: " + (await codeOf(client.request(acp.methods.client.fs.readTextFile, { sessionId, path: join(s.cwd, "..", "x") }))));

  await update({ sessionUpdate: "tool_call", toolCallId: "t1", title: "Write notes.md", kind: "edit", status: "pending" });
  // The reject option comes first: a policy must not pick blindly the first.
  const perm = await client.request(acp.methods.client.session.requestPermission, {
    sessionId,
    toolCall: { toolCallId: "t1", title: "Write notes.md", kind: "edit", status: "pending" },
    options: [
      { optionId: "reject", name: "Reject", kind: "reject_once" },
      { optionId: "allow", name: "Allow", kind: "allow_once" },
    ],
  });
  const outcome = perm.outcome.outcome === "selected" ? perm.outcome.optionId : perm.outcome.outcome;
  report.push("permission: " + outcome);
  if (outcome === "allow") {
    await client.request(acp.methods.client.fs.writeTextFile, {
      sessionId, path: join(s.cwd, "docs", "notes.md"), content: "notes from " + first.content,
    });
    await update({ sessionUpdate: "tool_call_update", toolCallId: "t1", status: "completed" });
  } else {
    await update({ sessionUpdate: "tool_call_update", toolCallId: "t1", status: "failed" });
  }

  if (sessions.caps?.terminal) {
    await update({ sessionUpdate: "tool_call", toolCallId: "t2", title: "Run a command", kind: "execute", status: "in_progress" });
    const term = await client.request(acp.methods.client.terminal.create, {
      sessionId, command: "sh", args: ["-c", "echo from-terminal > term.txt; echo $0", "$(not-expanded)"],
    });
    const exit = await client.request(acp.methods.client.terminal.waitForExit, { sessionId, terminalId: term.terminalId });
    const out = await client.request(acp.methods.client.terminal.output, { sessionId, terminalId: term.terminalId });
    await client.request(acp.methods.client.terminal.release, { sessionId, terminalId: term.terminalId });
    report.push(`terminal: exit ${exit.exitCode} output ${out.output.trim()}`);
    // Five bytes of two-byte characters: kept whole, from the end.
    const small = await client.request(acp.methods.client.terminal.create, {
      sessionId, command: "printf", args: ["%s", "abαβγ"], outputByteLimit: 5,
    });
    await client.request(acp.methods.client.terminal.waitForExit, { sessionId, terminalId: small.terminalId });
    const so = await client.request(acp.methods.client.terminal.output, { sessionId, terminalId: small.terminalId });
    report.push(`limited: ${so.output} truncated ${so.truncated}`);
    report.push("cwd outside: " + (await codeOf(client.request(acp.methods.client.terminal.create, { sessionId, command: "true", cwd: "/tmp" }))));
    await update({ sessionUpdate: "tool_call_update", toolCallId: "t2", status: "completed" });
  } else {
    report.push("terminal: not offered");
  }

  await say("All done.\n");
  await say(report.join("\n"));
  return { stopReason: "end_turn" };
});

app.connect(acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));

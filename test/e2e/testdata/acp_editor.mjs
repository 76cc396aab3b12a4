// An editor on the official ACP TypeScript SDK's client: it starts
// `awcp-ctl acp` as its agent, as Zed would, and holds one session in
// $WS: four turns, a cancelled hanging turn and one more, then it closes
// the agent's stdin. Its buffer of notes.txt differs from the disk; it
// does the agent's writes itself, and allows what it is asked. It prints
// a transcript as JSON.
import * as acp from "@agentclientprotocol/sdk";
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";

const env = process.env;
const out = { reads: [], writes: [], permissions: [], text: "", turns: [], directSeenInTurn: [] };
const child = spawn(env.AWCP_CTL, ["acp", "--peer", env.PEER, "--transport", "sshfs", "--ssh-listen", "127.0.0.1:0", "--log-level", "info"], {
  env: { ...process.env, AWCP_STATE_DIR: env.STATE },
  stdio: ["pipe", "pipe", "pipe"],
});
let stderr = "";
child.stderr.on("data", (d) => (stderr += d));
const exited = new Promise((resolve) => child.on("exit", (code) => resolve(code)));

const app = acp.client({ name: "awcp-test-editor" });
app.onRequest(acp.methods.client.fs.readTextFile, async ({ params }) => {
  out.reads.push(params.path);
  if (params.path === join(env.WS, "notes.txt")) return { content: "the editor's unsaved buffer" };
  return { content: readFileSync(params.path, "utf8") };
});
app.onRequest(acp.methods.client.fs.writeTextFile, async ({ params }) => {
  out.writes.push(params.path);
  if (!params.path.startsWith(env.WS + "/") && !(env.WS2 && params.path.startsWith(env.WS2 + "/"))) throw new Error("outside the projects: " + params.path);
  writeFileSync(params.path, params.content);
  return {};
});
app.onRequest(acp.methods.client.session.requestPermission, async ({ params }) => {
  out.permissions.push(params.toolCall.locations?.[0]?.path ?? "");
  const n = params.toolCall.toolCallId.split("-")[1]; // edit-N: the agent's turn N
  const project = dirname(params.toolCall.locations[0].path); // the session's own
  out.directSeenInTurn.push(existsSync(join(project, `direct-${n}.txt`)));
  return { outcome: { outcome: "selected", optionId: "allow" } };
});
app.onNotification(acp.methods.client.session.update, async ({ params }) => {
  const c = params.update.content;
  if (params.update.sessionUpdate === "agent_message_chunk" && c?.type === "text") {
    out.text += c.text;
    // The test cuts the channel while this turn runs.
    if (env.MARK && c.text.includes("slow turn") && c.text.includes("started")) writeFileSync(join(env.MARK, "slow-started"), "");
  }
});

try {
  await app.connectWith(acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout)), async (ctx) => {
    out.init = await ctx.request(acp.methods.agent.initialize, {
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: { fs: { readTextFile: true, writeTextFile: true }, terminal: false },
    });
    const { sessionId } = await ctx.request(acp.methods.agent.session.new, { cwd: env.WS, mcpServers: [] });
    out.sessionId = sessionId;
    for (let i = 1; i <= 4; i++) {
      const r = await ctx.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "task " + i }] });
      out.turns.push(r.stopReason);
    }
    const hang = ctx.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "hang" }] });
    for (let i = 0; i < 200 && !out.text.includes("hanging until cancelled"); i++) await new Promise((r) => setTimeout(r, 50));
    const t0 = Date.now();
    await ctx.notify(acp.methods.agent.session.cancel, { sessionId });
    out.cancelled = (await hang).stopReason;
    out.cancelMs = Date.now() - t0;
    out.turns.push((await ctx.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "after the cancel" }] })).stopReason);
    // A turn during which the test cuts every connection to the
    // executor, at both ends: it ends once, and the next turn follows it.
    if (env.MARK) {
      out.slow = (await ctx.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "slow" }] })).stopReason;
      out.afterSlow = (await ctx.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "after the cut" }] })).stopReason;
    }
    // A second session at once, in another project: its own delegation,
    // its own agent process; both answer while both are open.
    if (env.WS2) {
      const second = await ctx.request(acp.methods.agent.session.new, { cwd: env.WS2, mcpServers: [] });
      out.secondSessionId = second.sessionId;
      const [a, b] = await Promise.all([
        ctx.request(acp.methods.agent.session.prompt, { sessionId: second.sessionId, prompt: [{ type: "text", text: "in the second project" }] }),
        ctx.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "in the first project again" }] }),
      ]);
      out.parallel = [a.stopReason, b.stopReason];
      await ctx.request("session/close", { sessionId: second.sessionId });
      try {
        await ctx.request(acp.methods.agent.session.prompt, { sessionId: second.sessionId, prompt: [{ type: "text", text: "after its close" }] });
      } catch (e) {
        out.closedSession = e.message ?? String(e);
      }
    }
    try {
      await ctx.request(acp.methods.agent.session.prompt, { sessionId: "no-such-session", prompt: [{ type: "text", text: "x" }] });
    } catch (e) {
      out.unknownSession = e.message ?? String(e);
    }
  });
} catch (e) {
  out.exception = String(e?.stack ?? e) + " data: " + JSON.stringify(e?.data);
}
const t1 = Date.now();
child.stdin.end();
const timer = setTimeout(() => child.kill("SIGKILL"), 60000);
out.exitCode = await exited;
clearTimeout(timer);
out.exitMs = Date.now() - t1;
out.stderr = stderr;
process.stdout.write(JSON.stringify(out));
process.exit(0);

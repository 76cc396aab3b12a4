// An editor on the official ACP TypeScript SDK's client whose agent
// command (`awcp-ctl acp`) dies mid-turn and is started again: the
// restarted one takes the session over with session/load. It prints a
// transcript as JSON: the first gateway's turn, what the second one
// answered and relayed — the running turn's later output, a further turn
// — and how it ended.
//
// Environment: AWCP_CTL, STATE, PEER, WS, SSH (the live mount's SSH
// address, the same for both gateways: the mount connects to it again).
import * as acp from "@agentclientprotocol/sdk";
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";

const env = process.env;
const out = { text: ["", ""], stderr: ["", ""] };

function gateway(n) {
  const child = spawn(env.AWCP_CTL, ["acp", "--peer", env.PEER, "--transport", "sshfs", "--ssh-listen", env.SSH, "--log-level", "info"], {
    env: { ...process.env, AWCP_STATE_DIR: env.STATE },
    stdio: ["pipe", "pipe", "pipe"],
  });
  child.stderr.on("data", (d) => (out.stderr[n] += d));
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve(code ?? signal)));
  const app = acp.client({ name: "awcp-reload-editor" });
  app.onRequest(acp.methods.client.session.requestPermission, async () => ({ outcome: { outcome: "selected", optionId: "allow" } }));
  app.onNotification(acp.methods.client.session.update, async ({ params }) => {
    const c = params.update.content;
    if (params.update.sessionUpdate === "agent_message_chunk" && c?.type === "text") out.text[n] += c.text;
  });
  const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  return { child, exited, app, stream };
}

const waitFor = async (f, ms) => {
  for (let i = 0; i < ms / 50 && !f(); i++) await new Promise((r) => setTimeout(r, 50));
  return f();
};

try {
  const first = gateway(0);
  let sessionId;
  first.app
    .connectWith(first.stream, async (ctx) => {
      await ctx.request(acp.methods.agent.initialize, { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
      sessionId = (await ctx.request(acp.methods.agent.session.new, { cwd: env.WS, mcpServers: [] })).sessionId;
      out.firstTurn = (await ctx.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "before" }] })).stopReason;
      ctx.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "slow" }] }).catch(() => {});
      await waitFor(() => out.text[0].includes("slow turn 2 started"), 10000);
      first.child.kill("SIGKILL"); // the gateway dies mid-turn
      await first.exited;
    })
    .catch(() => {});
  out.firstExit = await first.exited;

  const second = gateway(1);
  await second.app.connectWith(second.stream, async (ctx) => {
    out.init = await ctx.request(acp.methods.agent.initialize, { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
    try {
      await ctx.request("session/resume", { sessionId: "no-such-session", cwd: env.WS, mcpServers: [] });
    } catch (e) {
      out.unknownLoad = e.message ?? String(e);
    }
    out.load = await ctx.request("session/load", { sessionId, cwd: env.WS, mcpServers: [] });
    // The slow turn ran on at the executor: its end reaches this editor.
    out.slowEndSeen = await waitFor(() => out.text[1].includes("slow turn 2 done"), 10000);
    out.afterTurn = (await ctx.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "after" }] })).stopReason;
  });
  second.child.stdin.end();
  out.secondExit = await second.exited;
} catch (e) {
  out.exception = String(e?.stack ?? e) + " data: " + JSON.stringify(e?.data);
}
process.stdout.write(JSON.stringify(out));
process.exit(0);

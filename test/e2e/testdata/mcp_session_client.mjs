// An MCP client on the official TypeScript SDK that holds a session with a
// remote ACP agent through `awcp-ctl mcp` (seed 003 §5.5): delegate with
// session: true returns when the agent awaits — a permission, then its
// next prompt — and delegate_answer and delegate with session_id go on.
// It prints one JSON object with every answer; the Go test judges them.
//
// Environment: AWCP_CTL, STATE, PEER, WS (the workspace).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { existsSync } from "node:fs";
import { join } from "node:path";

const env = process.env;
const transport = new StdioClientTransport({
  command: env.AWCP_CTL,
  args: ["mcp", "--peers", env.PEER, "--state-dir", env.STATE, "--log-level", "info"],
  env: { PATH: env.PATH, HOME: env.HOME, ...(env.AWCP_PLAIN_HTTP ? { AWCP_PLAIN_HTTP: env.AWCP_PLAIN_HTTP } : {}) },
  stderr: "pipe",
});
let stderr = "";
transport.stderr.on("data", (d) => (stderr += d));
const client = new Client({ name: "awcp-session-e2e", version: "1.0.0" });
const out = { steps: [] };
const call = async (name, args) => {
  const r = await client.callTool({ name, arguments: args }, undefined, { timeout: 120000 });
  out.steps.push({ name, args, result: r.structuredContent, isError: !!r.isError, text: r.content?.[0]?.text });
  return r.structuredContent;
};

try {
  await client.connect(transport);
  out.tools = (await client.listTools()).tools.map((t) => t.name);
  const first = await call("delegate", { description: "a session", prompt: "first", workspace_dir: env.WS, session: true });
  const id = first.delegation_id;
  // Awaiting its permission, mid-turn: the agent's writes of the turn are
  // in the workspace already.
  out.duringTurn = { direct: existsSync(join(env.WS, "direct-1.txt")), written: existsSync(join(env.WS, "turn-1.txt")) };
  await call("delegate_answer", { delegation_id: id, option_id: "allow" });
  await call("delegate", { description: "follow-up", prompt: "second", session_id: id });
  await call("delegate_answer", { delegation_id: id, answer: "Allow" });
  await call("delegate_answer", { delegation_id: id, answer: "third" });
  await call("delegate_answer", { delegation_id: id, option_id: "reject" });
  await call("delegate_output", { delegation_id: id });
  await call("delegate_close_session", { delegation_id: id });
  await call("delegate", { description: "too late", prompt: "fourth", session_id: id });
} catch (e) {
  out.exception = String(e && e.stack ? e.stack : e);
} finally {
  await client.close();
  out.stderr = stderr;
  process.stdout.write(JSON.stringify(out) + "\n");
}

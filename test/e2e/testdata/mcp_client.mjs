// An MCP client built on the official TypeScript SDK, driving `awcp-ctl mcp`
// over stdio the way Claude Desktop or an IDE agent would. It prints one JSON
// object with every answer; the Go test judges them. The SDK itself checks
// each structured result against the tool's output schema and throws if it
// does not match.
//
// Environment: AWCP_CTL (binary), STATE (state dir), PEER (executor URL),
// WS (workspace), WS_SLOW (second workspace), MISSING (a path that does not
// exist), MODE: "full" or "daemon" (only delegate + output).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const env = process.env;
const transport = new StdioClientTransport({
  command: env.AWCP_CTL,
  args: ["mcp", "--peers", env.PEER, "--state-dir", env.STATE, "--log-level", "info"],
  env: { PATH: env.PATH, HOME: env.HOME, ...(env.AWCP_PLAIN_HTTP ? { AWCP_PLAIN_HTTP: env.AWCP_PLAIN_HTTP } : {}) },
  stderr: "pipe",
});
let stderr = "";
transport.stderr.on("data", (d) => (stderr += d));
const transportErrors = [];
transport.onerror = (e) => transportErrors.push(String(e));

const client = new Client({ name: "awcp-e2e", version: "1.0.0" });
const out = { transportErrors, progress: [] };
const call = (name, args, opts) =>
  client.callTool({ name, arguments: args }, undefined, { timeout: 120000, ...opts });

try {
  await client.connect(transport);
  out.server = client.getServerVersion();
  out.tools = (await client.listTools()).tools;

  out.delegate = await call("delegate", {
    description: "greet",
    prompt: "add a greeting",
    workspace_dir: env.WS,
    background: true,
  });
  const id = out.delegate.structuredContent.delegation_id;
  out.output = await call(
    "delegate_output",
    { delegation_id: id, block: true, timeout: 60 },
    { onprogress: (p) => out.progress.push(p) },
  );

  if (env.MODE === "full") {
    out.slow = await call("delegate", {
      description: "slow",
      prompt: "slow: wait for the cancel",
      workspace_dir: env.WS_SLOW,
      background: true,
      ttl_seconds: 120,
    });
    const slowId = out.slow.structuredContent.delegation_id;
    out.cancel = await call("delegate_cancel", { delegation_id: slowId });
    out.cancelledOutput = await call("delegate_output", { delegation_id: slowId });
    out.missing = await call("delegate", {
      description: "nothing there",
      prompt: "work on a directory that is not there",
      workspace_dir: env.MISSING,
    });
    out.status = await call("delegate_status", {});
    // Left running when the client goes away: the server cancels it.
    out.abandoned = await call("delegate", {
      description: "abandoned",
      prompt: "slow: the client leaves",
      workspace_dir: env.WS_SLOW,
      background: true,
    });
  }
} catch (e) {
  out.exception = String(e && e.stack ? e.stack : e);
} finally {
  await client.close();
  out.stderr = stderr;
  process.stdout.write(JSON.stringify(out) + "\n");
}

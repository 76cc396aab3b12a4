// An MCP client on the official TypeScript SDK driving `awcp-ctl mcp` with
// staged results, in two runs of the server (PHASE first, then second), as
// a client that restarted its server would: the first starts a staged
// delegation in the background and goes away; the second recovers it,
// waits for its end, lists its snapshots, applies one, and discards the
// result of another delegation. It prints one JSON object with every
// answer; the Go test judges them.
//
// Environment: AWCP_CTL, STATE, PEER, WS, WS2, PHASE, ID (second phase).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const env = process.env;
const transport = new StdioClientTransport({
  command: env.AWCP_CTL,
  args: ["mcp", "--peers", env.PEER, "--state-dir", env.STATE, "--transport", "archive", "--log-level", "info"],
  env: { PATH: env.PATH, HOME: env.HOME, ...(env.AWCP_PLAIN_HTTP ? { AWCP_PLAIN_HTTP: env.AWCP_PLAIN_HTTP } : {}) },
  stderr: "pipe",
});
let stderr = "";
transport.stderr.on("data", (d) => (stderr += d));
const client = new Client({ name: "awcp-e2e-snapshots", version: "1.0.0" });
const out = {};
const call = (name, args) => client.callTool({ name, arguments: args }, undefined, { timeout: 120000 });

try {
  await client.connect(transport);
  out.tools = (await client.listTools()).tools.map((t) => t.name);
  if (env.PHASE === "first") {
    out.delegate = await call("delegate", {
      description: "staged work",
      prompt: "wait, then work",
      workspace_dir: env.WS,
      background: true,
      snapshot_mode: "staged",
    });
  } else {
    out.recover = await call("delegate_recover", { delegation_id: env.ID, peer_url: env.PEER });
    out.wrongPeer = await call("delegate_recover", { delegation_id: env.ID, peer_url: "http://127.0.0.1:9/elsewhere" });
    out.output = await call("delegate_output", { delegation_id: env.ID, block: true, timeout: 60 });
    out.snapshots = await call("delegate_snapshots", { delegation_id: env.ID });
    const snap = out.snapshots.structuredContent.snapshots[0];
    out.apply = await call("delegate_apply_snapshot", { delegation_id: env.ID, snapshot_id: snap ? snap.id : "none" });
    out.applyAgain = await call("delegate_apply_snapshot", { delegation_id: env.ID, snapshot_id: snap ? snap.id : "none" });
    out.second = await call("delegate", {
      description: "to discard",
      prompt: "work",
      workspace_dir: env.WS2,
      snapshot_mode: "staged",
    });
    const id2 = out.second.structuredContent.delegation_id;
    const snaps2 = await call("delegate_snapshots", { delegation_id: id2 });
    const snap2 = snaps2.structuredContent.snapshots[0];
    out.discard = await call("delegate_discard_snapshot", { delegation_id: id2, snapshot_id: snap2 ? snap2.id : "none" });
    out.applyDiscarded = await call("delegate_apply_snapshot", { delegation_id: id2, snapshot_id: snap2 ? snap2.id : "none" });
  }
} catch (e) {
  out.exception = String(e && e.stack ? e.stack : e);
}
await client.close().catch(() => {});
out.stderr = stderr;
console.log(JSON.stringify(out));

// An A2A agent nobody at awcp wrote the server of: the official JavaScript
// SDK's own server classes (DefaultRequestHandler, its Express JSON-RPC
// handler and agent card handler) as that SDK makes them by default: A2A
// 1.0 alone. With A2A_VERSIONS=0.3 its card lists 0.3 alone and its v0.3
// compatibility layer is on (an agent still on 0.3). A scripted agent:
//   a prompt with "notes": working, then an artifact with a notes.md that
//     quotes the workspace's README.md, a file named "../escape.txt", a
//     file by URI, and a data part removing old.txt; then completed;
//   "fail": working, then failed with the agent's own words.
// Its last words name the A2A-Version its caller sent ("none" without).
// It wants `Authorization: Bearer $A2A_TOKEN` when that is set. It prints
// "listening on PORT" once it listens on 127.0.0.1 ($PORT, or any).
import express from "express";
import { DefaultRequestHandler, InMemoryTaskStore, AgentEvent } from "@a2a-js/sdk/server";
import { jsonRpcHandler, agentCardHandler, UserBuilder } from "@a2a-js/sdk/server/express";
import { TaskState } from "@a2a-js/sdk";
import zlib from "node:zlib";

const token = process.env.A2A_TOKEN ?? "";
const legacy = process.env.A2A_VERSIONS === "0.3";
let lastVersion = "none"; // the A2A-Version header of the last request

// The workspace ZIP's README.md, read without a ZIP library: found in the
// central directory (sizes there are right even when the local header
// defers them to a data descriptor), stored or deflated.
function readmeOf(zip) {
  for (let i = zip.length - 46; i >= 0; i--) {
    if (zip.readUInt32LE(i) !== 0x02014b50) continue;
    const method = zip.readUInt16LE(i + 10);
    const csize = zip.readUInt32LE(i + 20);
    const nlen = zip.readUInt16LE(i + 28);
    const at = zip.readUInt32LE(i + 42);
    const name = zip.subarray(i + 46, i + 46 + nlen).toString();
    if (name !== "README.md") continue;
    const start = at + 30 + zip.readUInt16LE(at + 26) + zip.readUInt16LE(at + 28);
    const data = zip.subarray(start, start + csize);
    return method === 8 ? zlib.inflateRawSync(data).toString() : data.toString();
  }
  return "(no README.md)";
}

const text = (s) => ({ content: { $case: "text", value: s }, metadata: undefined, filename: "", mediaType: "text/plain" });
const status = (taskId, contextId, state, words) =>
  AgentEvent.statusUpdate({
    taskId, contextId, metadata: undefined,
    status: { state, timestamp: new Date().toISOString(), message: words ? {
      messageId: crypto.randomUUID(), contextId, taskId, role: 2, parts: [text(words)], metadata: undefined, extensions: [], referenceTaskIds: [],
    } : undefined },
  });

const agent = {
  async execute(rc, bus) {
    const { taskId, contextId } = rc;
    const msg = rc.userMessage;
    const prompt = msg.parts.filter((p) => p.content?.$case === "text").map((p) => p.content.value).join("\n");
    const ws = msg.parts.find((p) => p.content?.$case === "raw");
    bus.publish(AgentEvent.task({ id: taskId, contextId, status: { state: TaskState.TASK_STATE_SUBMITTED, message: undefined, timestamp: undefined }, artifacts: [], history: [msg], metadata: undefined }));
    bus.publish(status(taskId, contextId, TaskState.TASK_STATE_WORKING, "reading the workspace"));
    if (prompt.includes("fail")) {
      bus.publish(status(taskId, contextId, TaskState.TASK_STATE_FAILED, "the scripted agent gives up: quota exceeded"));
      bus.finished();
      return;
    }
    const readme = ws ? readmeOf(Buffer.from(ws.content.value)) : "(no workspace)";
    bus.publish(AgentEvent.artifactUpdate({
      taskId, contextId, append: false, lastChunk: true, metadata: undefined,
      artifact: {
        artifactId: "a1", name: "result", description: "the agent's files", metadata: undefined, extensions: [],
        parts: [
          { content: { $case: "raw", value: Buffer.from("notes on: " + readme) }, metadata: undefined, filename: "notes.md", mediaType: "text/markdown" },
          { content: { $case: "raw", value: Buffer.from("pwned\n") }, metadata: undefined, filename: "../escape.txt", mediaType: "text/plain" },
          { content: { $case: "url", value: "https://example.invalid/big.bin" }, metadata: undefined, filename: "big.bin", mediaType: "application/octet-stream" },
          { content: { $case: "data", value: { removed: ["old.txt"] } }, metadata: undefined, filename: "", mediaType: "application/json" },
          text("Wrote notes.md."),
        ],
      },
    }));
    bus.publish(status(taskId, contextId, TaskState.TASK_STATE_COMPLETED, "done: notes written (A2A-Version " + lastVersion + ")"));
    bus.finished();
  },
  async cancelTask(taskId, bus) {
    bus.publish(status(taskId, "", TaskState.TASK_STATE_CANCELED, "cancelled"));
    bus.finished();
  },
};

const app = express();
let url = "";
const card = async () => ({
  name: "scripted-notes-agent",
  description: "A scripted agent on the official JS SDK's server classes",
  supportedInterfaces: [{ url, protocolBinding: "JSONRPC", tenant: "", protocolVersion: legacy ? "0.3" : "1.0" }],
  provider: undefined,
  version: "1.0.0",
  capabilities: { streaming: true, pushNotifications: false, extensions: [] },
  securitySchemes: {},
  securityRequirements: [],
  defaultInputModes: ["text/plain", "application/zip"],
  defaultOutputModes: ["text/plain"],
  skills: [{ id: "notes", name: "notes", description: "writes notes", tags: ["notes"], examples: [], inputModes: [], outputModes: [], securityRequirements: [] }],
  signatures: [],
});
const handler = new DefaultRequestHandler(await (async () => { url = "http://placeholder"; return card(); })(), new InMemoryTaskStore(), agent);
app.use((req, res, next) => {
  if (req.path.startsWith("/a2a")) lastVersion = req.headers["a2a-version"] ?? "none";
  if (token && req.path !== "/.well-known/agent-card.json" && req.headers.authorization !== "Bearer " + token) {
    res.status(401).json({ jsonrpc: "2.0", id: null, error: { code: -32001, message: "the scripted agent wants its token" } });
    return;
  }
  next();
});
app.use("/.well-known/agent-card.json", agentCardHandler({ agentCardProvider: card, ...(legacy ? { legacyCompat: { enabled: true } } : {}) }));
app.use("/a2a", express.json({ limit: "64mb" }), jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication, ...(legacy ? { legacyCompat: { enabled: true } } : {}) }));
const server = app.listen(Number(process.env.PORT ?? 0), "127.0.0.1", () => {
  url = `http://127.0.0.1:${server.address().port}/a2a`;
  console.log("listening on " + server.address().port);
});

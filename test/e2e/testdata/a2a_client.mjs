// An A2A client built on the official JavaScript SDK (@a2a-js/sdk), as
// that SDK makes one by default (A2A 1.0), or with its v0.3 compatibility
// layer on ($A2A_LEGACY=1): it finds the executor's A2A face from the
// agent card at $A2A_URL, sends a task with the workspace ZIP ($A2A_ZIP,
// base64; $A2A_SUM its SHA-256) and streams it to the end; sends a second
// ("hold on"), cancels it once it works, and reads it back; answers a
// permission if one is asked ($A2A_ANSWER); tries a wrong token; and, with
// $A2A_OTHER_TOKEN (another valid token of the executor's), reads and
// cancels the first task and lists the tasks as that other client would
// (the first client lists its own too). It prints one JSON object of
// what it saw.
import {
  ClientFactory,
  JsonRpcTransportFactory,
  DefaultAgentCardResolver,
} from "@a2a-js/sdk/client";
import { TaskState } from "@a2a-js/sdk";

const base = process.env.A2A_URL;
const token = process.env.A2A_TOKEN ?? "";
const legacy = process.env.A2A_LEGACY === "1" ? { legacyCompat: { enabled: true } } : {};

function clientFor(tok) {
  const fetchImpl = (url, init = {}) => {
    const headers = new Headers(init.headers ?? {});
    if (tok) headers.set("Authorization", "Bearer " + tok);
    return fetch(url, { ...init, headers });
  };
  const factory = new ClientFactory({
    transports: [new JsonRpcTransportFactory({ fetchImpl, ...legacy })],
    cardResolver: new DefaultAgentCardResolver({ fetchImpl, ...legacy }),
  });
  return factory.createFromUrl(base);
}

const stateName = (s) => (typeof s === "number" ? TaskState[s] : String(s));
const textOf = (msg) =>
  (msg?.parts ?? []).filter((p) => p.content?.$case === "text").map((p) => p.content.value).join("");

function message(text, extraParts = [], taskId = "") {
  return {
    message: {
      messageId: crypto.randomUUID(),
      contextId: "",
      taskId,
      role: 1, // ROLE_USER
      parts: [
        ...(text ? [{ content: { $case: "text", value: text }, metadata: undefined, filename: "", mediaType: "text/plain" }] : []),
        ...extraParts,
      ],
      metadata: undefined,
      extensions: [],
      referenceTaskIds: [],
    },
    configuration: undefined,
    metadata: undefined,
    tenant: "",
  };
}

const workspace = {
  content: { $case: "raw", value: Buffer.from(process.env.A2A_ZIP ?? "", "base64") },
  metadata: { sha256: process.env.A2A_SUM },
  filename: "workspace.zip",
  mediaType: "application/zip",
};

async function stream(client, req, onWorking) {
  const seen = { states: [], artifacts: {}, last: "", lastState: "", taskId: "", delegationId: "", asked: null };
  for await (const ev of client.sendMessageStream(req)) {
    const p = ev.payload;
    if (!p) continue;
    if (p.$case === "task") {
      seen.taskId = p.value.id;
      seen.states.push(stateName(p.value.status?.state));
    } else if (p.$case === "statusUpdate") {
      const st = stateName(p.value.status?.state);
      seen.taskId = p.value.taskId;
      if (seen.states.at(-1) !== st) seen.states.push(st);
      seen.lastState = st;
      seen.last = textOf(p.value.status?.message);
      seen.delegationId = p.value.metadata?.["awcp.delegationId"] ?? seen.delegationId;
      const data = (p.value.status?.message?.parts ?? []).find((q) => q.content?.$case === "data");
      if (data) seen.asked = data.content.value;
      if (st === "TASK_STATE_WORKING" && onWorking) {
        const f = onWorking;
        onWorking = null;
        await f(seen.taskId);
      }
    } else if (p.$case === "artifactUpdate") {
      const a = p.value.artifact;
      seen.artifacts[a.name] = a.parts.map((q) => {
        const c = q.content;
        if (c?.$case === "raw") return { file: q.filename, text: Buffer.from(c.value).toString("utf8") };
        if (c?.$case === "text") return { text: c.value };
        if (c?.$case === "data") return { data: c.value };
        return { other: c?.$case };
      });
    }
  }
  return seen;
}

const out = {};
const client = await clientFor(token);
out.done = await stream(client, message("tidy the files", [workspace]));
if (process.env.A2A_ANSWER && out.done.lastState === "TASK_STATE_INPUT_REQUIRED") {
  out.answered = await stream(
    client,
    message("", [{ content: { $case: "data", value: { optionId: process.env.A2A_ANSWER } }, metadata: undefined, filename: "", mediaType: "application/json" }], out.done.taskId),
  );
}
if (!process.env.A2A_ANSWER) {
  let cancelled = null;
  out.held = await stream(client, message("hold on", [workspace]), async (id) => {
    cancelled = await client.cancelTask({ id, tenant: "", metadata: undefined });
  });
  out.cancelState = stateName(cancelled?.status?.state);
  const again = await client.getTask({ id: out.held.taskId, tenant: "" });
  out.heldState = stateName(again.status?.state);
  try {
    const bad = await clientFor("not-the-token");
    await bad.sendMessage(message("should not run", [workspace]));
    out.wrongToken = "accepted";
  } catch (e) {
    out.wrongToken = String(e?.message ?? e);
  }
}
const listed = async (c) => {
  try {
    const r = await c.listTasks({ tenant: "", contextId: "", status: 0, pageToken: "" });
    return (r.tasks ?? []).map((t) => t.id);
  } catch (e) {
    return ["refused: " + String(e?.message ?? e)];
  }
};
if (!legacy.legacyCompat) out.ownList = await listed(client);
if (process.env.A2A_OTHER_TOKEN) {
  const other = await clientFor(process.env.A2A_OTHER_TOKEN);
  const tryAs = async (f) => {
    try {
      const t = await f();
      return "taken: " + stateName(t?.status?.state) + ", " + (t?.artifacts?.length ?? 0) + " artifacts";
    } catch (e) {
      return "refused: " + String(e?.message ?? e);
    }
  };
  out.otherGet = await tryAs(() => other.getTask({ id: out.done.taskId, tenant: "" }));
  out.otherCancel = await tryAs(() => other.cancelTask({ id: out.held?.taskId ?? out.done.taskId, tenant: "", metadata: undefined }));
  if (!legacy.legacyCompat) out.otherList = await listed(other);
}
process.stdout.write(JSON.stringify(out));

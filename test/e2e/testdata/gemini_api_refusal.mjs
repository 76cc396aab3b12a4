// What the Gemini API answers a key it does not know, served on this
// machine: Gemini CLI's A2A server is pointed here (GOOGLE_GEMINI_BASE_URL)
// so that its own code meets an authentication error without any traffic
// leaving the test's network namespace. Every request gets Google's
// answer to an invalid API key. Prints "listening on PORT".
import http from "node:http";

const server = http.createServer((req, res) => {
  req.resume();
  res.writeHead(400, { "Content-Type": "application/json" });
  res.end(JSON.stringify({
    error: {
      code: 400,
      message: "API key not valid. Please pass a valid API key.",
      status: "INVALID_ARGUMENT",
      details: [{ "@type": "type.googleapis.com/google.rpc.ErrorInfo", reason: "API_KEY_INVALID", domain: "googleapis.com" }],
    },
  }));
});
server.listen(Number(process.env.PORT ?? 0), "127.0.0.1", () => console.log("listening on " + server.address().port));

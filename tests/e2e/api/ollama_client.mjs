// The official `ollama` JavaScript client against the server's Ollama API, as Node apps use it:
// list, show, a streamed chat and a whole generate. Prints one JSON object on stdout with each
// case's result (or {"error": ...}), which tests/e2e/ollama.rs asserts on.
//
//     node ollama_client.mjs --modules DIR --base http://127.0.0.1:PORT --key TOKEN --model NAME
//
// DIR is the node_modules folder the client was installed into (scripts/peers:
// target/peers/npm/node_modules).

import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import path from "node:path";

const args = {};
for (let i = 2; i < process.argv.length; i += 2) {
  args[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
}
const require = createRequire(path.join(args.modules, "placeholder.js"));
const entry = require.resolve("ollama").replace(/index\.cjs$/, "index.mjs");
const { Ollama } = await import(pathToFileURL(entry).href);

const client = new Ollama({
  host: args.base,
  headers: { Authorization: `Bearer ${args.key}` },
});
const QUESTION = "What is the capital of France?";

const cases = {
  async list() {
    const r = await client.list();
    return { names: r.models.map((m) => m.name), first: r.models[0] };
  },
  async show() {
    const r = await client.show({ model: args.model });
    return { capabilities: r.capabilities, details: r.details, model_info: r.model_info };
  },
  async chat_stream() {
    const stream = await client.chat({
      model: args.model,
      messages: [{ role: "user", content: "In one sentence: " + QUESTION }],
      options: { temperature: 0, num_predict: 48 },
      stream: true,
    });
    const chunks = [];
    let last = null;
    for await (const part of stream) {
      if (!part.done && part.message.content) chunks.push(part.message.content);
      last = part;
    }
    return { chunks, last };
  },
  async generate() {
    const r = await client.generate({
      model: args.model,
      prompt: QUESTION,
      options: { temperature: 0, num_predict: 48 },
      stream: false,
    });
    return r;
  },
};

const results = {};
for (const [name, run] of Object.entries(cases)) {
  try {
    results[name] = await run();
  } catch (e) {
    results[name] = { error: { message: String(e && e.message), status: e && e.status_code } };
  }
}
process.stdout.write(JSON.stringify(results) + "\n");

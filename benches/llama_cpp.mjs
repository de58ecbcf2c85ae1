// The reference for the local_model bench: llama.cpp (through node-llama-cpp's prebuilt CPU
// build) on the same GGUF file, the same two prompts and greedy decoding. Prints one JSON object
// per run: load seconds, time to first token (ms) for each prompt, prompt and decode tokens/s.
// Usage: node benches/llama_cpp.mjs DIR MODEL.gguf RUNS, DIR holding node_modules/node-llama-cpp.
import { createRequire } from "node:module";
import { availableParallelism } from "node:os";
import { pathToFileURL } from "node:url";

const [dir, modelPath, runsArg] = process.argv.slice(2);
const entry = createRequire(`${dir}/`).resolve("node-llama-cpp");
const { getLlama, LlamaLogLevel } = await import(pathToFileURL(entry).href);
const runs = Number(runsArg ?? 3);
const system = "You are a helpful assistant. Answer clearly and correctly.";
const long = `<|im_start|>system\n${system}<|im_end|>\n<|im_start|>user\n` +
  "The quick brown fox jumps over the lazy dog near the river bank at dawn. ".repeat(12) +
  "\nSummarise the text above in detail.<|im_end|>\n<|im_start|>assistant\n";
const question = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n" +
  "What is the capital of France?<|im_end|>\n<|im_start|>assistant\n";

// About 4,000 tokens of varied English, as benches/local_model.rs writes it.
const words = ["river", "mountain", "city", "garden", "winter", "market", "engine", "letter",
  "harbour", "forest", "bridge", "station", "music", "number", "window", "paper"];
let filler = "";
for (let i = 0; i < 3950; i++) {
  filler += words[(i * 7 + Math.floor(i / 3)) % words.length] + (i % 12 === 11 ? "." : " ");
}
const huge = `<|im_start|>system\n${system}<|im_end|>\n<|im_start|>user\n${filler}\n` +
  "What is this text about?<|im_end|>\n<|im_start|>assistant\n";

const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const threads = Math.max(1, availableParallelism());

async function generate(model, text, max) {
  const context = await model.createContext({ contextSize: 4608, threads, sequences: 1 });
  const sequence = context.getSequence();
  const tokens = model.tokenize(text, true);
  const started = performance.now();
  let first = null;
  let n = 0;
  for await (const token of sequence.evaluate(tokens, { temperature: 0 })) {
    n += 1;
    if (first === null) first = performance.now();
    if (n >= max || model.isEogToken(token)) break;
  }
  const total = performance.now();
  await context.dispose();
  const ttft = (first ?? total) - started;
  return {
    ttft_ms: ttft,
    prompt_tokens: tokens.length,
    prompt_tps: tokens.length / (ttft / 1000),
    decode_tps: Math.max(0, n - 1) / Math.max(1e-9, (total - (first ?? total)) / 1000),
  };
}

for (let i = 0; i < runs; i++) {
  const started = performance.now();
  const model = await llama.loadModel({ modelPath });
  const load_s = (performance.now() - started) / 1000;
  const l = await generate(model, long, 64);
  const q = await generate(model, question, 32);
  const h = process.env.BENCH_ONLY?.includes("long") ? await generate(model, huge, 1) : null;
  console.log(JSON.stringify({ load_s, long: l, question: q, huge: h }));
  await model.dispose();
}

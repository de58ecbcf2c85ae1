#!/usr/bin/env node
// Starts the agent-as-model binary that npm installed with this package: one optional
// dependency per platform carries it (@agent-as-model/<platform>-<arch>), and npm installs
// only the one matching this machine. Nothing is downloaded at install time or at start.
// stdin, stdout and stderr are the binary's own (an MCP host talks to it over stdio); signals
// are passed on, and the exit status is the binary's.
"use strict";

const { spawn } = require("node:child_process");

const target = `${process.platform}-${process.arch}`;
const pkg = `@agent-as-model/${target}`;
const exe = process.platform === "win32" ? "agent-as-model.exe" : "agent-as-model";

let binary;
try {
  binary = require.resolve(`${pkg}/bin/${exe}`);
} catch {
  process.stderr.write(
    `agent-as-model: no prebuilt binary for ${target}: the package ${pkg} is not installed.\n` +
      "Prebuilt: linux-x64, linux-arm64, darwin-x64, darwin-arm64, win32-x64. Reinstall without\n" +
      "--no-optional, or install another way: `uvx agent-as-model` or `cargo install agent-as-model`.\n",
  );
  process.exit(1);
}

const child = spawn(binary, process.argv.slice(2), { stdio: "inherit" });
const forwarded = ["SIGINT", "SIGTERM", "SIGHUP"];
for (const signal of forwarded) {
  process.on(signal, () => child.kill(signal));
}
child.on("error", (error) => {
  process.stderr.write(`agent-as-model: cannot start ${binary}: ${error.message}\n`);
  process.exit(1);
});
child.on("exit", (code, signal) => {
  if (signal) {
    for (const s of forwarded) process.removeAllListeners(s);
    process.kill(process.pid, signal);
    return;
  }
  process.exit(code === null ? 1 : code);
});

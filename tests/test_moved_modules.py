"""The old import paths of what moved to rocm-gate in 0.2.0 (pytest_rocm/moved.py): the same module
objects as the new names, `python -m pytest_rocm.cli` still the command, and without rocm-gate an
import error naming what to install."""

import subprocess
import sys
import warnings

import pytest
from conftest import REPO

from pytest_rocm import moved


def test_an_old_name_is_the_new_module_itself_with_a_warning():
    for name in [m for m in sys.modules if m.startswith("pytest_rocm.trunk")]:
        del sys.modules[
            name
        ]  # an alias an earlier test made: the warning comes on the first import
    with pytest.warns(DeprecationWarning, match=r"pytest_rocm\.trunk moved to rocm_gate\.trunk"):
        from pytest_rocm.trunk import judgement as old
    from rocm_gate.trunk import judgement as new

    assert old is new
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import pytest_rocm.github.api
    import rocm_gate.github.api

    assert pytest_rocm.github.api is rocm_gate.github.api  # loaded once, not a second copy
    assert sys.modules["pytest_rocm.github.api"] is rocm_gate.github.api


@pytest.mark.parametrize(
    "old, new",
    [
        ("pytest_rocm.cli", "rocm_gate.cli"),
        ("pytest_rocm.preflight.readers.dmesg", "rocm_gate.preflight.readers.dmesg"),
        ("pytest_rocm.plugin.hooks", None),  # the plugin stayed
        ("pytest_rocm", None),
        ("pytest_rocmx.cli", None),
    ],
)
def test_which_names_moved(old, new):
    assert moved.new_name(old) == new


def test_the_old_command_module_runs_the_command(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "pytest_rocm.cli", "verdict", str(tmp_path / "none")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "is not a folder of records" in done.stderr, done.stderr


def test_without_rocm_gate_an_old_name_says_what_to_install():
    # -S: no site-packages, so no rocm-gate; pytest_rocm from the checkout
    code = "import pytest_rocm.github.checks"
    done = subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        cwd=REPO,
    )
    assert done.returncode == 1
    assert "ModuleNotFoundError: pytest_rocm.github moved to rocm_gate.github" in done.stderr
    assert "pip install ./rocm-gate" in done.stderr


def test_the_moved_list_is_rocm_gates_packages():
    import pkgutil

    import rocm_gate

    packages = {m.name for m in pkgutil.iter_modules(rocm_gate.__path__) if m.ispkg}
    assert moved.MOVED == packages

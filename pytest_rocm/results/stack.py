"""Whether the framework the tests imported is the checkout under test.

A run of vLLM's (or SGLang's) tests judges a change only when the tests ran against that change's
code: the checkout itself, an editable install of it, or a build of its very commit (vLLM's images
build the checkout and move the source aside). An installed release or an older build that differs
from the checkout (the normal state of a developer's box) makes import errors and wrong behaviour
that are the machine's, not the change's: the run is incomplete, naming both and the fix
(`results/conclusion.py`).

The process that runs tests records what it imported when its collection ends (`imported`, in the
collection record: a module's file and version, and the checkout's commit); `mismatch` decides from
that record alone, so `rocm-gate verdict` decides the same.
"""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path, PurePath

# module -> (its name in messages, where its package sits in its own checkout)
FRAMEWORKS = {"vllm": ("vLLM", "vllm"), "sglang": ("SGLang", "python/sglang")}
# setuptools_scm's local version of a build from a commit: `0.11.1.dev40+g1a2b3c4d.rocm700`
_COMMIT_IN_VERSION = re.compile(r"\+(?:.*\.)?g([0-9a-f]{7,40})\b")
# `git describe --tags --always` past a tag: `v0.11.0-95-g8e4ca4d14`
_PAST_TAG = re.compile(r"^(.+)-\d+-g[0-9a-f]+$")
FIX = (
    "install the checkout under test (`pip install -e .` in it, as its docs say for a build from "
    "source), or check out the commit the installed build was made from"
)


def _git(top: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(top), *args], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def imported(rootdir: Path) -> dict:
    """What the tests of this process imported of each framework, and the checkout `rootdir` is in:
    {"checkout": {"top", "commit", "describe"} | None, "<module>": {"path", "version"}, ...}. Only
    frameworks the tests imported are listed (nothing to judge otherwise)."""
    found: dict = {}
    for name in FRAMEWORKS:
        module = sys.modules.get(name)
        where = getattr(module, "__file__", None) if module is not None else None
        if not where:
            continue
        version = getattr(module, "__version__", None)
        if not isinstance(version, str):
            dists = metadata.packages_distributions().get(name) or []
            version = next((metadata.version(d) for d in dists), None)
        found[name] = {"path": str(Path(where).resolve().parent), "version": version}
    if not found:
        return {}
    top = _git(rootdir, "rev-parse", "--show-toplevel")
    found["checkout"] = (
        None
        if top is None
        else {
            "top": str(Path(top).resolve()),
            "commit": _git(Path(top), "rev-parse", "HEAD"),
            "describe": _git(Path(top), "describe", "--tags", "--always"),
            # the frameworks this checkout is a checkout of (it holds their package)
            "holds": [
                m
                for m, (_, package) in FRAMEWORKS.items()
                if (Path(top) / package / "__init__.py").is_file()
            ],
        }
    )
    return found


def mismatch(found: dict | None) -> str | None:
    """Why the imported framework is not the checkout under test, naming both and the fix; None where
    it is, where the checkout is no checkout of that framework, or where nothing tells (a release
    build against a checkout without tags)."""
    if not isinstance(found, dict) or not isinstance(found.get("checkout"), dict):
        return None
    checkout = found["checkout"]
    top, commit, describe = checkout.get("top"), checkout.get("commit"), checkout.get("describe")
    if not isinstance(top, str) or not isinstance(commit, str):
        return None
    for module, (label, _) in FRAMEWORKS.items():
        entry = found.get(module)
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            continue
        if module not in (checkout.get("holds") or ()):
            continue  # the tree under test is no checkout of this framework
        if PurePath(entry["path"]).is_relative_to(top):
            continue  # the checkout's own code (or an editable install of it)
        version = entry.get("version")
        if not isinstance(version, str) or _same_code(version, commit, describe) is not False:
            continue
        return (
            f"set-up problem: the tests imported the installed {label} {version} ({entry['path']}), "
            f"not the checkout under test ({top} at {commit[:12]}"
            + (f", {describe}" if _tag(describe, commit) else "")
            + f"): {FIX}"
        )
    return None


def _same_code(version: str, commit: str, describe: str | None) -> bool | None:
    """Whether an installed build of `version` is the checkout at `commit` (`git describe --tags
    --always` of it): a build names its commit (`+g<sha>`); a release is its tag, so a checkout
    exactly at that tag, and at no other commit. None where nothing tells (a release, and a checkout
    without tags, as a shallow clone is)."""
    built = _COMMIT_IN_VERSION.search(version)
    if built is not None:
        return commit.startswith(built.group(1))
    tag = _tag(describe, commit)
    if tag is None:
        return None
    return tag == describe and tag.removeprefix("v") == version.split("+")[0]


def _tag(describe: str | None, commit: str) -> str | None:
    """The tag `git describe --tags --always` names (at or before the commit); None for a bare
    commit (the checkout has no tag)."""
    if not describe or commit.startswith(describe):
        return None
    past = _PAST_TAG.match(describe)
    return past.group(1) if past else describe

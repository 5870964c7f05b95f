"""Test identity: JUnit `classname` + `name` back to a pytest node id, and aligning two runs' roots.

pytest writes `tests/kernels/attention/test_x.py::TestY::test_z[bf16-128]` as
classname `tests.kernels.attention.test_x.TestY` and name `test_z[bf16-128]`.
Parameters stay inside the name, so dots, slashes and brackets in them are safe;
only the classname is split. Class names start with a capital letter (pytest's
default `Test*`), so the trailing capitalised parts are classes and the rest is
the module path. A `file` attribute (xunit1) settles the module path outright; where the classname
is not that path (GoogleTest: suite `AttnTest`, file `kernel_test.cc`), it follows the file.
"""

from __future__ import annotations

from functools import lru_cache

MAX_STRIP = 4  # path components tried when aligning the roots of two runs


@lru_cache(maxsize=65536)
def _module_and_classes(classname: str, file: str | None) -> tuple[str, tuple[str, ...]]:
    parts = classname.split(".") if classname else []
    if file:
        module = file[:-3] if file.endswith(".py") else file
        dotted = module.replace("/", ".").split(".")
        path = file if file.endswith(".py") or "." in file.rsplit("/", 1)[-1] else file + ".py"
        # The classname may carry a prefix (junit_prefix) before the module path.
        for start in range(len(parts)):
            if parts[start : start + len(dotted)] == dotted:
                return path, tuple(parts[start + len(dotted) :])
        # Another producer's classname (GoogleTest's suite `AttnTest` in `kernel_test.cc`): it
        # names the test as much as the file does; dropped, two suites' `Large` were one test.
        return path, tuple(parts)
    split = len(parts)
    while split > 1 and parts[split - 1][:1].isupper():
        split -= 1
    module = "/".join(parts[:split])
    return (module + ".py" if module else ""), tuple(parts[split:])


@lru_cache(maxsize=65536)
def nodeid_prefix(classname: str, file: str | None = None) -> str:
    """What goes before the test name: 'tests/x.py::TestY::' (computed once per class)."""
    if not classname:
        return ""
    module, classes = _module_and_classes(classname, file)
    return "".join(part + "::" for part in ([module] if module else []) + list(classes))


def nodeid_from_junit(classname: str, name: str, file: str | None = None) -> str:
    if not classname:
        # pytest's collection errors: classname "" and name "tests.test_x" (the dotted module)
        return name if "/" in name or "::" in name else name.replace(".", "/") + ".py"
    return nodeid_prefix(classname, file) + name


def strip_prefix(nodeid: str, prefix: str) -> str:
    return nodeid[len(prefix) :] if prefix and nodeid.startswith(prefix) else nodeid


def _leading(path: str, count: int) -> str | None:
    parts = path.split("/")
    return "/".join(parts[:count]) + "/" if 0 < count < len(parts) else ("" if count == 0 else None)


def detect_prefixes(reference: dict, candidate: dict) -> tuple[str, str]:
    """Find the leading folders to strip on each side (e.g. '/vllm-workspace/' against '') so the
    most test files line up. Returns ('', '') when the roots already agree."""
    if len(reference.keys() & candidate.keys()) * 2 >= min(len(reference), len(candidate)):
        # most ids already match: the roots agree (decided without splitting 100,000s of ids)
        return ("", "")
    ref_files = {n.partition("::")[0] for n in reference}
    cand_files = {n.partition("::")[0] for n in candidate}
    best = (len(ref_files & cand_files), 0, "", "")
    for side_is_ref in (True, False):
        files, other = (ref_files, cand_files) if side_is_ref else (cand_files, ref_files)
        prefixes: dict[str, set[str]] = {}
        for path in files:
            for count in range(1, MAX_STRIP + 1):
                lead = _leading(path, count)
                if lead:
                    prefixes.setdefault(lead, set()).add(path[len(lead) :])
        for lead, stripped in prefixes.items():
            overlap = len(stripped & other)
            if overlap > best[0] or (overlap == best[0] and overlap and lead.count("/") < best[1]):
                best = (
                    overlap,
                    lead.count("/"),
                    lead if side_is_ref else "",
                    "" if side_is_ref else lead,
                )
    return best[2], best[3]

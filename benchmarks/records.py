"""Records written and read back, and the gate report's JSON text: this tree's code (plain json)
against a commit's (HEAD unless `--against`: the plain pass's codec generated as Python source,
and the report's entries written from templates), side by side in one run.

The records are what a run of the plugin writes (`--tests`, default 50,000, over `--workers`
processes' files): each process's collection record naming its tests, then mostly plain passes
(one `setup+call+teardown` line each), a test in 20 a record per phase (a server named, or GPUs),
one in 50 failed (its failure text and output tails), one in 50 skipped, and an end-of-run record
in the controller's file. Both writers must write the same bytes and both readers must read the
same records (checked first, with hostile lines too); then each timing is the median of `--reps`
repetitions, the old and the new alternating, in CPU seconds of this process.

    .venv/bin/python benchmarks/records.py [--tests 50000] [--workers 4] [--reps 7]
        [--against GIT_REF]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from json.encoder import encode_basestring
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pytest_rocm.results import records as new_records  # noqa: E402
from pytest_rocm.results import report as new_report  # noqa: E402

GROUPS = ("attention", "engine", "api", "distributed_moe", "spec_decode", "lora", "quantization")
FAILURE = (
    "def test_x():\n>       assert logits.allclose(reference, atol=1e-3)\nE       AssertionError\n"
) * 20
HOSTILE = (
    "[" * 100_000 + "]" * 100_000,
    '{"nodeid":"t.py::test_a","when":"setup","outcome":"passed","duration":NaN,"t":1.0,'
    '"schema":"pytest-rocm/record/3","worker":"gw0"}',
    '{"nodeid":"t.py::test_a","when":"setup+call+teardown","outcome":"passed",'
    '"durations":[0.1,Infinity,0.2],"t":1.0,"schema":"pytest-rocm/record/3","worker":"gw0"}',
    '{"nodeid":7,"when":"call","outcome":"passed","t":1.0,"schema":"pytest-rocm/record/3"}',
    '{"nodeid":"t.py::test_a","when":"call","outcome":"passed","t":"soon",'
    '"schema":"pytest-rocm/record/3"}',
    '{"nodeid":"t.py::test_a","when":"call","schema":"pytest-rocm/record/9"}',
    "not json at all",
    '{"nodeid":"t.py::test_a","when":"setup+call+teardown","outcome":"passed","durations":[0.1,',
)


def load_old(ref: str, folder: Path, name: str, module: str):
    """`name` (a path in the repository) as it was at `ref`, imported as `module`."""
    source = subprocess.run(
        ["git", "show", f"{ref}:{name}"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    path = folder / f"{module}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(module, path)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[module] = loaded
    spec.loader.exec_module(loaded)
    return loaded


def spec_fields(index: int) -> str:
    """A test's fields as the plugin encodes them (`encoded_fields`: json.dumps's separators)."""
    fields: dict = {"group": GROUPS[index % len(GROUPS)], "blocking": index % 9 != 0, "gate": True}
    if index % 10 == 0:
        fields["requires"] = {"sku": [], "arch": [], "gpus": 1, "min_memory_gb": 40.0}
    return "," + json.dumps(fields, ensure_ascii=False)[1:-1]


def write_run(module, folder: Path, tests: int, workers: int) -> None:
    """A run's records as `module`'s writer writes them (the same seed: the same run)."""
    rng = random.Random(64)
    writers = [module.RecordWriter(folder, f"gw{w}") for w in range(workers)]
    t = 1_796_000_000.0
    nodeids = [
        f"tests/{GROUPS[i % 7]}/test_m{i // 500}.py::test_case[{i}-bf16]" for i in range(tests)
    ]
    for w, writer in enumerate(writers):
        mine = nodeids[w::workers]
        specs = {
            n: {"group": GROUPS[i % 7], "blocking": True, "gate": True} for i, n in enumerate(mine)
        }
        writer.write({"kind": "collection", "nodeid": "", "tests": len(mine), "specs": specs}, t=t)
    for index, nodeid in enumerate(nodeids):
        writer = writers[index % workers]
        encoded, spec = encode_basestring(nodeid), spec_fields(index)
        setup, call, teardown = rng.random() * 1e-3, rng.random() * 0.5, rng.random() * 1e-3
        t += 0.01
        kind = index % 50
        if kind < 2:  # a test in 20 in three phase records (`kind` 0, 1 and below)
            for when, seconds in (("setup", setup), ("call", call), ("teardown", teardown)):
                writer.write_phase(encoded, when, seconds, t, spec)
        elif kind == 2:
            writer.write_phase(encoded, "setup", setup, t, spec)
            record = {"nodeid": nodeid, "when": "call", "outcome": "failed", "duration": call}
            record |= {"failure": FAILURE, "message": "AssertionError", "stdout_tail": "x" * 300}
            writer.write(record, spec, t=t + 0.001)
            writer.write_phase(encoded, "teardown", teardown, t + 0.002, spec)
        elif kind == 3:
            record = {"nodeid": nodeid, "when": "setup", "outcome": "skipped", "duration": setup}
            writer.write(record | {"skip_reason": "not applicable here"}, spec, t=t)
            writer.write_phase(encoded, "teardown", teardown, t + 0.001, spec)
        else:
            writer.write_plain_pass(encoded, setup, call, teardown, t, spec)
    writers[0].write({"kind": "session", "nodeid": "", "exitstatus": 0}, t=t + 1)
    for writer in writers:
        writer.close()


def cpu(action) -> float:
    start = time.process_time()
    action()
    return time.process_time() - start


def fresh(folder: Path) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def check_same(old, new, scratch: Path, tests: int, workers: int) -> None:
    """Both writers write the same bytes; both readers read the same records and name the same
    problems, hostile lines among them."""
    write_run(old, fresh(scratch / "old"), tests, workers)
    write_run(new, fresh(scratch / "new"), tests, workers)
    for path in sorted((scratch / "old").glob("records-*.jsonl")):
        assert path.read_bytes() == (scratch / "new" / path.name).read_bytes(), path.name
    hostile = scratch / "hostile"
    shutil.copytree(scratch / "new", hostile)
    with (hostile / "records-gw0.jsonl").open("a", encoding="utf-8") as handle:
        handle.write("\n".join(HOSTILE))  # the last one cut short
    a, b = old.read_records(hostile), new.read_records(hostile)
    assert a.records == b.records and [list(r) for r in a.records] == [list(r) for r in b.records]
    assert a.problems == b.problems and len(b.problems) == len(HOSTILE), b.problems
    print(f"same bytes written, same records read; {len(b.problems)} hostile lines named:")
    for problem in b.problems:
        print(f"  {problem.replace(str(hostile) + '/', '')[:150]}")


def measure(pairs: dict, reps: int) -> None:
    """name -> (old action, new action): the median CPU seconds of each, and new / old."""
    print(f"\n{'':34}{'old (s)':>10}{'new (s)':>10}{'new/old':>9}   (median of {reps})")
    for name, (old, new) in pairs.items():
        times: dict[str, list[float]] = {"old": [], "new": []}
        for rep in range(reps):
            order = (("old", old), ("new", new)) if rep % 2 == 0 else (("new", new), ("old", old))
            for which, action in order:
                times[which].append(cpu(action))
        o, n = statistics.median(times["old"]), statistics.median(times["new"])
        spread = max(times["new"]) / min(times["new"]) if min(times["new"]) else float("nan")
        print(f"{name:34}{o:10.4f}{n:10.4f}{n / o:9.3f}   (new's max/min {spread:.2f})")


def stages(folder: Path, report: dict, reps: int) -> None:
    """Where the new reader's and report text's time goes: each stage alone (median CPU seconds)."""
    paths = sorted(folder.glob("records-*.jsonl"))
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in paths]
    lines = [line for text in texts for line in text.split("\n") if line.strip()]
    parsed = [json.loads(line) for line in lines]
    tests = report["tests"]
    rest = {k: v for k, v in report.items() if k != "tests"}
    dumps = new_report.gate_report_json
    steps = {
        "read the files' text, split lines": lambda: [
            p.read_text(encoding="utf-8", errors="replace").split("\n") for p in paths
        ],
        "json.loads each line": lambda: [json.loads(line) for line in lines],
        "record_problem each record": lambda: [new_records.record_problem(r) for r in parsed],
        "json.dumps the report's tests": lambda: dumps(tests),
        "json.dumps the rest of the report": lambda: dumps(rest),
    }
    print(f"\nthe new code's stages{'':14}{'(s)':>8}   (median of {reps})")
    for name, action in steps.items():
        print(f"  {name:40}{statistics.median(cpu(action) for _ in range(reps)):8.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", type=int, default=50_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--against", default="HEAD")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="records-bench-"))
    try:
        old = load_old(args.against, scratch, "pytest_rocm/results/records.py", "old_records")
        old_report = load_old(args.against, scratch, "pytest_rocm/results/report.py", "old_report")
        check_same(old, new_records, scratch, args.tests, args.workers)
        folder = scratch / "new"
        loaded = new_records.read_records(folder)
        lines = sum(len(r) for r in loaded.by_file.values())
        size = sum(p.stat().st_size for p in folder.glob("records-*.jsonl"))
        print(f"\n{args.tests} tests, {lines} records in {args.workers} files, {size / 1e6:.1f} MB")
        report = new_report.build_gate_report(loaded.records, {"runner": None}, loaded.problems)
        assert old_report.gate_report_json(report) == new_report.gate_report_json(report)
        print(f"gate report: {len(report['tests'])} tests, the same text from both")
        measure(
            {
                "write the records": (
                    lambda: write_run(old, fresh(scratch / "w"), args.tests, args.workers),
                    lambda: write_run(new_records, fresh(scratch / "w"), args.tests, args.workers),
                ),
                "read the records (read_records)": (
                    lambda: old.read_records(folder),
                    lambda: new_records.read_records(folder),
                ),
                "gate report text (gate_report_json)": (
                    lambda: old_report.gate_report_json(report),
                    lambda: new_report.gate_report_json(report),
                ),
            },
            args.reps,
        )
        stages(folder, report, args.reps)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()

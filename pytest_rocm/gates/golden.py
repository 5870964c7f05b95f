"""Golden gates: token ids and top-k logprobs recorded on a reference platform, compared by one of
two rules.

- Same platform (the reference's platform key and dtype equal the run's): the tokens must be exactly the
  reference's, and every logprob both sides list at a position within LOGPROB_ATOL of the reference's. A
  greedy sampler that takes the second-best token, or logprobs scaled by 0.9, fail here.
- Cross-platform (a CUDA reference against a ROCm run, or another dtype): vLLM's `check_logprobs_close`,
  which walks both token sequences to the first mismatch, where each side's token must be in the other side's
  top-k logprobs; numerics legitimately differ between platforms.

The measurement in the gate report names the rule that applied.

`check_live` compares with a reference computed in the run instead of a file (transformers' greedy
tokens on the same weights), by vLLM's rule, which is how vLLM compares itself with transformers:
two implementations may break a near-tie differently. Its measurement also says where the tokens
first differ at all, so the gate report can set the frameworks side by side against the same
reference.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from pytest_rocm.gates.checks import GateContext
from pytest_rocm.schemas.artifacts import schema, write_json_atomic

GOLDEN_SCHEMA = schema("golden")
# Same platform, same dtype: the engine is deterministic, and a CPU of another microarchitecture
# moved logprobs of the tiny model by under 1e-4; a logprob off by this much is a changed
# computation. Tight enough to see a logprob rounded to bfloat16 (up to 0.016 off: issue 50, the
# `top1-logprob-bf16` injection of benchmarks/gate_strength.py), which 0.02 let through.
LOGPROB_ATOL = 0.002
SAME_PLATFORM = f"same platform: exact tokens, logprobs within {LOGPROB_ATOL}"
CROSS_PLATFORM = "cross-platform: vLLM's check_logprobs_close (top-k)"
LIVE_REFERENCE = "another implementation: vLLM's check_logprobs_close (top-k)"


def golden_path(folder: Path, nodeid: str, name: str) -> Path:
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid)[-80:]
    digest = hashlib.sha1(nodeid.encode()).hexdigest()[:10]
    return folder / f"{readable}-{digest}" / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}.json"


def first_divergence(reference: dict, measured: dict) -> str | None:
    """vLLM's check_logprobs_close: walk both token sequences to the first mismatch; there each
    side's token must be in the other side's top-k. Returns the failure message, or None when
    close."""
    for index, (ref_ids, got_ids) in enumerate(
        zip(reference["token_ids"], measured["token_ids"], strict=True)
    ):
        for position, (ref_token, got_token) in enumerate(zip(ref_ids, got_ids)):
            if ref_token == got_token:
                continue
            ref_top = dict(map(tuple, reference["logprobs"][index][position]))
            got_top = dict(map(tuple, measured["logprobs"][index][position]))
            problems = []
            if got_token not in ref_top:
                problems.append(f"{got_token} is not in the reference's top-{len(ref_top)}")
            if ref_token not in got_top:
                problems.append(f"{ref_token} is not in this run's top-{len(got_top)}")
            if problems:
                return (
                    f"sequence {index} diverges at position {position}: this run chose token {got_token} "
                    f"(logprob {got_top.get(got_token, float('nan')):.4f}), the reference chose {ref_token} "
                    f"(logprob {ref_top.get(ref_token, float('nan')):.4f}); " + "; ".join(problems)
                )
            break  # close enough at the first mismatch; the sequences differ from here on
    return None


def exact_divergence(reference: dict, measured: dict, atol: float = LOGPROB_ATOL) -> str | None:
    """The same-platform rule: the first token that differs, or the first logprob further than
    `atol` from the reference's (of the tokens both sides list at that position)."""
    for index, (ref_ids, got_ids) in enumerate(
        zip(reference["token_ids"], measured["token_ids"], strict=True)
    ):
        for position, (ref_token, got_token) in enumerate(zip(ref_ids, got_ids)):
            ref_top = dict(map(tuple, reference["logprobs"][index][position]))
            got_top = dict(map(tuple, measured["logprobs"][index][position]))
            if ref_token != got_token:
                return (
                    f"sequence {index} diverges at position {position}: this run chose token {got_token} "
                    f"(logprob {got_top.get(got_token, float('nan')):.4f}), the reference chose {ref_token} "
                    f"(logprob {ref_top.get(ref_token, float('nan')):.4f})"
                )
            for token in sorted(set(ref_top) & set(got_top)):
                if abs(got_top[token] - ref_top[token]) > atol:
                    return (
                        f"sequence {index} position {position}: token {token} has logprob {got_top[token]:.4f}, "
                        f"the reference {ref_top[token]:.4f} (more than {atol:g} apart)"
                    )
        if len(ref_ids) != len(got_ids):
            return f"sequence {index}: {len(got_ids)} tokens, the reference has {len(ref_ids)}"
    return None


class GoldenGate:
    def __init__(
        self, context: GateContext, compare_dir: Path | None, record_dir: Path | None, platform: str
    ):
        self.context = context
        self.compare_dir = compare_dir
        self.record_dir = record_dir
        self.platform = platform

    def check(
        self,
        name: str,
        token_ids: list[list[int]],
        logprobs: list[list[dict[int, float]]],
        dtype: str | None = None,
    ) -> None:
        """Record (with --rocm-golden-record DIR) or compare token ids with their top-k logprobs.
        `dtype`: the served dtype; with the platform key it decides which rule compares (module
        docstring)."""
        if len(token_ids) != len(logprobs) or any(
            len(t) != len(lp) for t, lp in zip(token_ids, logprobs, strict=True)
        ):
            pytest.fail(
                f"golden {name!r}: token_ids and logprobs must have the same shape", pytrace=False
            )
        measured = {
            "schema": GOLDEN_SCHEMA,
            "test": self.context.nodeid,
            "name": name,
            "platform": self.platform,
            "platform_key": self.context.platform_keys[0] if self.context.platform_keys else None,
            "dtype": dtype,
            **as_golden(token_ids, logprobs),
        }
        if self.record_dir is not None:
            path = write_json_atomic(
                golden_path(self.record_dir, self.context.nodeid, name), measured
            )
            self.context.measurements.append(
                {"kind": "golden", "metric": name, "recorded": str(path), "passed": True}
            )
            return
        if self.compare_dir is None:
            pytest.fail(
                f"golden {name!r}: no golden folder given: compare with --rocm-golden DIR (ini rocm_golden_dir), "
                "or record on the reference platform with --rocm-golden-record DIR",
                pytrace=False,
            )
        path = golden_path(self.compare_dir, self.context.nodeid, name)
        if not path.is_file():
            pytest.fail(
                f"golden {name!r}: {path} does not exist; record it on the reference platform with "
                f"--rocm-golden-record {self.compare_dir}",
                pytrace=False,
            )
        reference = read_golden(path, name, self.compare_dir)
        if len(reference["token_ids"]) != len(measured["token_ids"]):
            pytest.fail(
                f"golden {name!r}: {len(measured['token_ids'])} sequences, the reference has "
                f"{len(reference['token_ids'])} ({path})",
                pytrace=False,
            )
        same = (
            reference.get("platform_key") is not None
            and reference.get("platform_key") == measured["platform_key"]
            and reference.get("dtype") is not None
            and reference.get("dtype") == dtype
        )
        rule = SAME_PLATFORM if same else CROSS_PLATFORM
        problem = (
            exact_divergence(reference, measured) if same else first_divergence(reference, measured)
        )
        self.context.measurements.append(
            {
                "kind": "golden",
                "metric": name,
                "reference": str(path),
                "reference_platform": reference.get("platform"),
                "rule": rule,
                "passed": problem is None,
                "divergence": problem,
            }
        )
        if problem is not None:
            pytest.fail(
                f"golden {name!r} ({rule}): {problem} (reference recorded on {reference.get('platform')}"
                f"{', ' + reference['dtype'] if reference.get('dtype') else ''}, {path})",
                pytrace=False,
            )

    def check_live(
        self, name: str, reference: dict, measured: dict, *, reference_name: str, framework: str
    ) -> None:
        """Compare `measured` (as_golden) with a reference computed in this run, by vLLM's rule;
        record both that verdict and the first difference of any size, for the side-by-side
        comparison of frameworks."""
        if len(reference["token_ids"]) != len(measured["token_ids"]):
            pytest.fail(
                f"golden {name!r}: {len(measured['token_ids'])} sequences, {reference_name} gave "
                f"{len(reference['token_ids'])}",
                pytrace=False,
            )
        problem = first_divergence(reference, measured)
        self.context.measurements.append(
            {
                "kind": "golden",
                "metric": name,
                "reference": reference_name,
                "framework": framework,
                "rule": LIVE_REFERENCE,
                "passed": problem is None,
                "divergence": problem,
                "first_difference": exact_divergence(reference, measured),
                "sequences": len(measured["token_ids"]),
                "tokens": sum(len(seq) for seq in reference["token_ids"]),
                "agreeing_tokens": agreeing_tokens(reference, measured),
            }
        )
        if problem is not None:
            pytest.fail(
                f"golden {name!r} against {reference_name} ({LIVE_REFERENCE}), served by {framework}: {problem}",
                pytrace=False,
            )


def read_golden(path: Path, name: str, folder: Path) -> dict:
    """A recorded golden file, checked enough to compare with: else the test fails naming the file
    and the fix (record it again), never with a traceback from inside the comparison."""

    def refuse(why: str):
        pytest.fail(
            f"golden {name!r}: {path} {why}; record it again on the reference platform with "
            f"--rocm-golden-record {folder} (or restore the file from the reference run)",
            pytrace=False,
        )

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        refuse(f"is not UTF-8 text (byte {exc.start})")
    except json.JSONDecodeError as exc:
        refuse(
            f"is not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}): it is damaged or cut short"
        )
    except OSError as exc:
        refuse(f"cannot be read ({exc.strerror or exc})")
    if not isinstance(data, dict):
        refuse(f"is not a golden file (a JSON {type(data).__name__}, not an object)")
    if data.get("schema") not in (None, GOLDEN_SCHEMA):
        refuse(f"is a {data.get('schema')!r} file, not a {GOLDEN_SCHEMA} one")
    token_ids, logprobs = data.get("token_ids"), data.get("logprobs")
    if token_ids is None or logprobs is None:
        missing = " and ".join(k for k in ("token_ids", "logprobs") if data.get(k) is None)
        refuse(f"has no `{missing}`: a golden file holds the token ids and their top-k logprobs")
    if not isinstance(token_ids, list) or not all(
        isinstance(seq, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in seq)
        for seq in token_ids
    ):
        refuse("has `token_ids` that are not lists of token ids (whole numbers)")
    if not isinstance(logprobs, list) or len(logprobs) != len(token_ids):
        refuse(
            f"has `logprobs` for {len(logprobs) if isinstance(logprobs, list) else 'no'} sequence(s) and "
            f"`token_ids` for {len(token_ids)}"
        )
    for index, (ids, tops) in enumerate(zip(token_ids, logprobs)):
        if not isinstance(tops, list) or len(tops) != len(ids):
            refuse(
                f"has `logprobs` of sequence {index} that do not give one top-k list per token "
                f"({len(ids)} tokens)"
            )
        for position, top in enumerate(tops):
            if not isinstance(top, list) or not all(
                isinstance(pair, list)
                and len(pair) == 2
                and isinstance(pair[0], int)
                and isinstance(pair[1], (int, float))
                and not isinstance(pair[1], bool)
                for pair in top
            ):
                refuse(
                    f"has `logprobs` at sequence {index} position {position} that are not [token, logprob] "
                    "pairs"
                )
    return data


def agreeing_tokens(reference: dict, measured: dict) -> int:
    """How many tokens, over all sequences, equal the reference's before each sequence's first
    difference."""
    total = 0
    for ref_ids, got_ids in zip(reference["token_ids"], measured["token_ids"], strict=True):
        same = 0
        for ref_token, got_token in zip(ref_ids, got_ids):
            if ref_token != got_token:
                break
            same += 1
        total += same
    return total


def as_golden(token_ids: list[list[int]], logprobs: list[list[dict[int, float]]]) -> dict:
    """Token ids and per-position {token: logprob} in the golden file's layout (top-k sorted, best
    first)."""
    return {
        "token_ids": [list(map(int, seq)) for seq in token_ids],
        "logprobs": [
            [
                sorted(((int(t), float(lp)) for t, lp in top.items()), key=lambda x: -x[1])
                for top in seq
            ]
            for seq in logprobs
        ],
    }

"""Failure fingerprints (results/fingerprint.py): the whole message with the noise masked, and when two
are one failure. A PR's failure that is main's own does not block it; one that only looks like it
(the same first line, another token list, a value far worse) does."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_rocm.results.fingerprint import fingerprint, same_failure


def same(a: str, b: str) -> bool:
    return same_failure(fingerprint(a), fingerprint(b))


# vLLM's check_outputs_equal / check_logprobs_close messages: their first line is the same for every
# failure ("Test0:"), what differs follows
VLLM_A = (
    "AssertionError: Test0:\nMatched tokens:\t[791, 6460]\nhf:\t' the quick'\nvllm:\t' the slow'"
)
VLLM_B = "AssertionError: Test0:\nMatched tokens:\t[791]\nhf:\t' a dog'\nvllm:\t' a cat'"


@pytest.mark.parametrize(
    "main,pr,one",
    [
        # what changes from run to run is noise
        (
            "OSError: /tmp/pytest-of-ci/pytest-3/x.bin missing",
            "OSError: /tmp/pytest-of-me/pytest-9/x.bin missing",
            True,
        ),
        ("tensor at 0x7f3a2b1c0d10 is stale", "tensor at 0x55e1aa00ff08 is stale", True),
        ("server on 127.0.0.1:43567 refused", "server on 127.0.0.1:51002 refused", True),
        (
            "gave up after 12.5 s at 2026-12-05T10:00:01Z",
            "gave up after 30.0 s at 2026-12-06T11:02:03Z",
            True,
        ),
        ("worker gw0 (pid 1234) died", "worker gw3 (pid 987) died", True),
        ("E in tests/test_x.py:120", "E in tests/test_x.py:131", True),
        # a measured value close to main's is main's failure; far worse is new
        ("assert 0.61 >= 0.7", "assert 0.58 >= 0.7", True),
        ("assert 0.69 < 0.7", "assert 0.05 < 0.7", False),
        ("throughput 612.5 TFLOP/s < 700.0", "throughput 300.1 TFLOP/s < 700.0", False),
        # integers carry meaning: a token id, a count
        ("diverged at token 3", "diverged at token 4", False),
        # the whole message counts: the same first line, another comparison
        (VLLM_A, VLLM_B, False),
        (VLLM_A, VLLM_A.replace("' the slow'", "' the slow'"), True),
        ("KeyError: 'rope_scaling'", "KeyError: 'rope_theta'", False),
    ],
)
def test_what_one_failure_is(main, pr, one):
    assert same(main, pr) is one, (fingerprint(main), fingerprint(pr))


def test_the_fingerprint_reads_the_reason_when_there_is_no_message():
    assert fingerprint("", "reproduced on 0") == "reproduced on 0"
    assert fingerprint(None, None) == ""


messages = st.text(st.characters(blacklist_categories=("Cs",)), max_size=200)


@settings(max_examples=300, deadline=None)
@given(messages, messages)
def test_one_failure_is_reflexive_and_symmetric(a, b):
    assert same(a, a)
    assert same(a, b) == same(b, a)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(["tensor", "at", "0.5", "7", "token", "|", "=", "x"]), max_size=12),
    st.floats(0.01, 1e6),
)
def test_a_measured_value_is_the_same_failure_exactly_within_ten_percent(words, value):
    """The oracle: the same words, every integer equal, each measured value within 10% of main's
    (or 0.01 near zero)."""
    text = " ".join(words)
    close, far = value * 1.05, value * 1.5 + 0.02
    assert same(f"{text} measured {value:.4f}", f"{text} measured {close:.4f}")
    assert not same(f"{text} measured {value:.4f}", f"{text} measured {far:.4f}")


@pytest.mark.parametrize(
    "main,pr,one",
    [
        # pytest's rewritten ordering assertion: its integers are measured values
        ("assert 431 <= 400", "assert 429 <= 400", True),
        (
            "AssertionError: assert 431 <= 400 | + where 431 = len(out)",
            "AssertionError: assert 437 <= 400 | + where 437 = len(out)",
            True,
        ),
        ("assert 431 <= 400", "assert 4310 <= 400", False),
        # an equality compares identities: token ids stay exact
        ("assert [7, 3] == [7, 4]", "assert [7, 3] == [7, 5]", False),
        ("diverged at token 3 < 4", "diverged at token 3 < 4", True),
    ],
)
def test_an_ordering_assertion_compares_values(main, pr, one):
    assert same(main, pr) is one, (fingerprint(main), fingerprint(pr))


def test_what_varies_between_mains_own_failures_is_noise_for_that_test():
    """Main failed a test twice, printing another seed each time: a PR failing the same way with a
    third seed is main's failure; one failing at another token is not. One failure of main's
    teaches nothing."""
    from pytest_rocm.results.fingerprint import among

    main = [fingerprint(f"seed {seed}: output diverged at token 12") for seed in (1234, 99)]
    assert among(fingerprint("seed 5: output diverged at token 12"), main)
    assert not among(fingerprint("seed 5: output diverged at token 13"), main)
    assert not among(fingerprint("seed 5: output diverged at token 12"), main[:1])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 10**6), min_size=2, max_size=5, unique=True),
    st.integers(0, 10**6),
    st.integers(0, 50),
)
def test_learned_noise_oracle(seeds, mine, token):
    """The oracle: with two or more of main's failures differing only in the seed, any seed matches
    and the token must be the same; with the token varying too, both are noise."""
    from pytest_rocm.results.fingerprint import among

    main = [fingerprint(f"seed {s} token {token}") for s in seeds]
    assert among(fingerprint(f"seed {mine} token {token}"), main)
    assert not among(fingerprint(f"seed {mine} token {token + 1}"), main)

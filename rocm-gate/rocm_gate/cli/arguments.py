"""Argument types shared by the `rocm-gate` commands: each turns a bad value into argparse's usage
error, saying what was expected. The numbers are pytest_rocm/schemas/values.py's validators (one per
kind of value, for every command and the plugin alike)."""

from __future__ import annotations

import argparse

from pytest_rocm.schemas import values

# the largest whole number an option takes where it names no bound of its own: a count past it is
# a typo (10**30 commits, GPUs or shards), not a request
MOST = 1_000_000


def whole_number(minimum: int, too_small: str, maximum: int = MOST) -> values.Option:
    """An argparse `type`: a whole number from `minimum` to `maximum`, written in digits;
    `too_small` is the message for one below the minimum, with `{value}` for the number given."""
    return values.Option(values.whole, low=minimum, high=maximum, too_small=too_small)


def sku(value: str) -> str:
    """An argparse `type`: a GPU SKU the SKU table knows ('mi300x' -> 'MI300X')."""
    from pytest_rocm.hw.skus import ALL_SKUS, normalise_sku

    if normalise_sku(value) is None:
        raise argparse.ArgumentTypeError(f"unknown SKU {value!r}; use one of {', '.join(ALL_SKUS)}")
    return normalise_sku(value)


def tool_file(names: tuple[str, ...], noun: str):
    """An argparse `type` for `TOOL=FILE` (`--source` of doctor and preflight): (tool, path), the
    tool one of `names`; `noun` is what the message calls the tool ("source", "tool")."""

    def parse(value: str) -> tuple[str, str]:
        name, sep, path = value.partition("=")
        if not sep or not path:
            raise argparse.ArgumentTypeError(f"expected TOOL=FILE, got {value!r}")
        if name not in names:
            raise argparse.ArgumentTypeError(
                f"unknown {noun} {name!r}; use one of {', '.join(names)}"
            )
        return name, path

    return parse


def map_file(value: str):
    """An argparse `type`: a map file, or a map shipped with pytest-rocm by name (`vllm`,
    `pytest_rocm:vllm`)."""
    from pytest_rocm import maps

    try:
        return maps.resolve(value)
    except maps.UnknownMapError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None

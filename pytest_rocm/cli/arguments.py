"""Argument types shared by the `rocm-gate` commands: each turns a bad value into argparse's usage error, saying
what was expected."""

from __future__ import annotations

import argparse


def whole_number(minimum: int, too_small: str):
    """An argparse `type`: a whole number of at least `minimum`; `too_small` is the message for one below it,
    with `{value}` for the number given."""
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
        if number < minimum:
            raise argparse.ArgumentTypeError(too_small.format(value=number))
        return number

    return parse

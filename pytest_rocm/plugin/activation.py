"""Whether a run asked for pytest-rocm: installed, the plugin stays inert until it is.

It always registers its markers and options (pytest needs them to parse a command line or a marker).
Everything else it does only for a run that asks: one that gives a `--rocm-*` option or a `rocm_*`
ini setting (`asked`, known at configure time), or, from the moment it is collected, a test that
carries one of its markers (`marked`). What each costs an unasked run:

- asked: hardware detection, the health probe before any test (with a report folder), the report folder,
  the platform's JUnit properties, the GPU scheduler, the group table of `--collect-only`;
- marked (no setting): what the marked tests need (their hardware check, reruns of blocking gates, device
  locks for the `gpus` fixture), their JUnit properties, and the platform's once per JUnit file.

A run of a project with neither is plain pytest: no subprocess, no file, no property, no line of
output. README, "When the plugin acts".
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_rocm.plugin.markers import MARKER_HELP
from pytest_rocm.plugin.options import INI_SETTINGS

PLUGIN_MARKERS = frozenset(MARKER_HELP)
# option dest -> its default, from the parser (`remember_options`)
_OPTION_DEFAULTS: dict[str, object] = {}


def remember_options(parser: pytest.Parser) -> None:
    """Called after the options are added: what each one's value is when nobody gives it."""
    for argument in parser.getgroup("rocm").options:
        _OPTION_DEFAULTS[argument.dest] = argument.default


def setting_given(config: pytest.Config) -> str | None:
    """The first rocm option or ini setting this run gives (command line, addopts or ini), or
    None."""
    for dest, default in _OPTION_DEFAULTS.items():
        if config.getoption(dest, default) != default:
            return "--" + dest.replace("_", "-")
    for name in sorted(INI_SETTINGS):
        if config.getini(name):
            return name
    from pytest_rocm.plugin.internals import unknown_ini_keys

    # a misspelt setting asks too: the settings' check then names it (`options._check_ini_keys`)
    # (`ROCM_RERUNS` and `rocm-reruns` too: ours but for case and separators)
    return next(
        (
            key
            for key in sorted(unknown_ini_keys(config))
            if key.lower().replace("-", "_").startswith("rocm_")
        ),
        None,
    )


def carries_marker(keywords: Any) -> bool:
    """A test's keywords (an item's, or a report's: xdist sends them to the controller) name one of
    our markers."""
    return not PLUGIN_MARKERS.isdisjoint(keywords)


class Activation:
    """Asked at configure time, or marked once a test with one of the markers is collected or
    reported."""

    def __init__(self, config: pytest.Config) -> None:
        self.reason = setting_given(config)  # what asked, for the README's rule and the tests
        self.marked = False

    @property
    def asked(self) -> bool:
        return self.reason is not None

    @property
    def active(self) -> bool:
        return self.asked or self.marked

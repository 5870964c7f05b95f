"""What every process of a run shares: its settings, its name, the run's id, the group map and the
platform.

The controller (or the only process) names the run and detects the platform;
xdist workers and rerun subprocesses receive both (`workerinput`), so every
process agrees on them and locks the same devices.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_rocm.catalog import groups as groups_mod
from pytest_rocm.hw.model import Platform
from pytest_rocm.plugin.activation import Activation
from pytest_rocm.plugin.options import Settings, read_settings
from pytest_rocm.plugin.rules import command_line_value


def rerun_helper_input(config: pytest.Config) -> dict[str, Any] | None:
    """`--rocm-rerun-helper SESSION:NAME:PLATFORM_FILE`: this process reruns a test for a run's
    controller, like one of its workers (the run's device locks, its platform, records of its
    own). Read from the process's own command line only: in an ini file's `addopts` it would make
    a run's own process a helper, which writes no report."""
    value = command_line_value(config, "--rocm-rerun-helper")
    if not value:
        return None
    session, name, platform_file = value.split(":", 2)
    return {
        "workerid": name,
        "rocm_session": session,
        "rocm_platform": json.loads(Path(platform_file).read_text(encoding="utf-8")),
    }


if TYPE_CHECKING:
    from pytest_rocm.gates.baselines import Baseline


class RunContext:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.settings: Settings = read_settings(config)
        self.activation = Activation(config)
        self.workerinput: dict[str, Any] | None = getattr(
            config, "workerinput", None
        ) or rerun_helper_input(config)
        # a fresh process the controller started (plugin/fresh.py), not an xdist worker
        self.rerun_helper = not hasattr(config, "workerinput") and self.workerinput is not None
        self.worker = self.workerinput["workerid"] if self.workerinput else "controller"
        self.session_id = (
            self.workerinput["rocm_session"] if self.workerinput else uuid.uuid4().hex[:12]
        )
        self.started = datetime.now(UTC).isoformat(timespec="seconds")
        self.group_map = self._load_group_map()
        self.baselines = self._load_baselines()
        self._platform: Platform | None = None

    @property
    def is_worker(self) -> bool:
        """An xdist worker or a rerun subprocess: it runs tests for a controller elsewhere."""
        return self.workerinput is not None

    def _load_group_map(self) -> groups_mod.GroupMap | None:
        path = self.settings.group_map_path
        if path is None:
            return None
        try:
            return groups_mod.cached_group_map(str(path), self.settings.allowed_groups)
        except groups_mod.GroupMapError as exc:
            raise pytest.UsageError(str(exc)) from exc

    def _load_baselines(self) -> dict[tuple[str, str, str], Baseline]:
        """Every baseline file, checked before any test runs (a bad one is a usage error, not a
        failed gate)."""
        if not self.settings.baseline_files:
            return {}
        from pytest_rocm.gates import baselines as baselines_mod

        try:
            return baselines_mod.load(self.settings.baseline_files)
        except baselines_mod.BaselineError as exc:
            raise pytest.UsageError(str(exc)) from exc

    def group_of(self, nodeid: str) -> str | None:
        return self.group_map.group_of(nodeid) if self.group_map else None

    @property
    def platform(self) -> Platform:
        """Detected on first use; workers take the controller's so every process agrees."""
        if self._platform is None:
            if self.workerinput and "rocm_platform" in self.workerinput:
                self._platform = Platform.from_dict(self.workerinput["rocm_platform"])
            else:
                from pytest_rocm.hw import detect as detect_mod

                try:
                    self._platform = detect_mod.detect(self.config.getoption("rocm_platform"))
                # The class of the module that raised: a pytester run in this process restores
                # sys.modules afterwards, and a fresh import of profiles would give a class the
                # raise never matches.
                except detect_mod.profiles.ProfileError as exc:
                    raise pytest.UsageError(str(exc)) from exc
        return self._platform

"""The catalog of tests: the groups, the maps that sort upstream test paths into them, the tests that can
never apply to ROCm, and test identity (JUnit names back to node ids). Shared by the plugin, parity and
(coming) test selection."""

__all__ = ["groups", "applicability", "identity"]

"""The catalog of tests: the groups, the maps that sort upstream test paths into them, the tests
that can never apply to ROCm, test identity (JUnit names back to node ids), how a tree sorts into
groups, and reading a tree's paths. Shared by the plugin, parity, selection and the `groups` and
`shard` commands."""

__all__ = ["groups", "applicability", "identity", "tree", "sources"]

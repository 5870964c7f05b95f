"""CUDA parity: JUnit and gate-report inputs, the comparison per group, its markdown, and SGLang's
declared AMD coverage from its CI registrations."""

__all__ = ["junit", "inputs", "compare", "markdown", "sglang_registry"]

"""pytest-rocm: gate upstream LLM frameworks on AMD Instinct GPUs.

The pytest plugin is `pytest_rocm.plugin.hooks` (entry point `rocm`); the `rocm-gate` command is
`pytest_rocm.cli`. DESIGN.md in the project's shared folder describes the parts and formats.
"""

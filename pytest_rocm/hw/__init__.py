"""Hardware: platform detection (one parser per tool), the SKU table, simulated profiles, GPU allocation."""

# The sources `rocm-gate doctor --source NAME=FILE` reads (defined here so the CLI can offer them
# without importing the detection machinery).
SOURCE_NAMES = (
    "amd-smi",
    "amd-smi-version",
    "rocminfo",
    "rocm-smi",
    "nvidia-smi",
    "collect-env",
    "sysfs",
)

__all__ = [
    "SOURCE_NAMES",
    "model",
    "detect",
    "profiles",
    "skus",
    "expectations",
    "allocation",
    "parsers",
]

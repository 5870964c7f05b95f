"""A stand-in for the vllm package: only what the fixture tree's tests import."""

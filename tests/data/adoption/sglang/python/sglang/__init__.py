"""A stand-in for the sglang package: only what the fixture tree's tests import."""

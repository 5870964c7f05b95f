"""The pytest side of pytest-rocm: options, collection and markers, recording where tests run, the
controller role (reruns, crashes, the report at the end), fixtures and hang handling. `hooks` is the
entry point (`rocm`); `activation` says when the plugin acts at all; every use of xdist or pytest
internals is in `internals`."""

__all__ = ["hooks"]

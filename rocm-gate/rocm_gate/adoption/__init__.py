"""What an upstream tree changes to take the plugin: registering pytest-rocm's markers in its own
pytest configuration, so lanes that run without the plugin accept them (no warning, no error under
--strict-markers). `rocm-gate register-markers` is the command (docs/adoption.md, step 2)."""

__all__ = ["markers"]

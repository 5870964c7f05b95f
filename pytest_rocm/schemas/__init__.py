"""The shapes of the project's files: reading and checking configuration TOML (one validation helper for
every file), the schema names and atomic writes of the JSON artifacts, and their JSON Schemas."""

__all__ = ["config", "artifacts"]

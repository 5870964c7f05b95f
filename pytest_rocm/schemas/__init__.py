"""The shapes of the project's files: reading and checking configuration TOML (one validation helper
for every file), the schema names and atomic writes of the JSON artifacts and their JSON Schemas,
the strict loader of artifacts a PR's code wrote (`loader`), and the one way their text becomes
markdown (`markdown`)."""

__all__ = ["artifacts", "config", "loader", "markdown"]

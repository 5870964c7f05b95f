"""Results of a run: records (written as tests run), verdicts, rerun planning, the health probe, the
manifest, the gate report and the terminal summary. Everything here works from records alone, so
`rocm-gate verdict` rebuilds the same report offline."""

__all__ = ["records", "verdicts", "reruns", "health_probe", "manifest", "report", "summary"]

"""Results of a run: records (written as tests run), verdicts, rerun planning, the health probe, the
manifest, the gate report, the terminal summary and a failure's fingerprint (what it says, noise
masked; when two are one failure). Everything here works from records alone, so
`rocm-gate verdict` rebuilds the same report offline."""

__all__ = [
    "records",
    "verdicts",
    "reruns",
    "health_probe",
    "manifest",
    "report",
    "summary",
    "fingerprint",
]

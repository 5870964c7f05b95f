"""Results of a run: records (written as tests run), verdicts, rerun planning, the health probe, the
manifest, the gate report, the terminal summary, a failure's fingerprint (what it says, noise
masked; when two are one failure) and the catalog of GPU fault texts node acceptance reads too. Everything here works from records alone, so
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
    "gpu_faults",
]

"""Blame by experiment: a PR's blocking failures run again on the PR's base, in the gate job
(docs/architecture.md, "Blame by experiment: the base run").

Where main's state cannot say whose failure it is (main untested since the PR's base, a fingerprint
that differs, a test new to history, a base main never ran), the base's own behaviour can: this
package owns choosing the base and its second git work tree (`base`), running a command in a process
group of its own within a deadline (`processes`), the attempts of the failing tests in fresh pytest
processes and their outcomes (`attempts`), the experiment within its budget (`experiment`) and the
base-check.json it writes (`document`). It decides nothing: the one decision (trunk/judgement.py)
reads the file.
"""

from rocm_gate.blame.document import BASE_CHECK_SCHEMA, FILE_NAME, on_base
from rocm_gate.blame.experiment import Plan, blocking, run

__all__ = ["BASE_CHECK_SCHEMA", "FILE_NAME", "Plan", "blocking", "on_base", "run"]

"""The exit statuses of every `rocm-gate` command: one scheme, one place (docs/reference.md, "Exit
statuses").

A caller (a workflow step, a runner's hook) reads the same number the same way whatever the command:

  0 OK         done, and the answer is yes: healthy, accepted, kept, trusted, published, within the minimum
  1 FAILURE    `verdict` only: the run concluded `failure` (its exit follows the conclusion table below)
  2 BAD_INPUT  the command could not read what it was given; the message names the file, option or key and the
               fix (argparse's own usage errors are 2 too)
  3 NO         done, and the answer is no: a check the command makes did not pass (refused, drain, mismatch,
               loosened, below the minimum parity, map problems under --strict)
  4 NOT_DONE   the command could not finish for a reason outside its input: GitHub unreachable, nothing
               published, no GPU to check, a layer not proven; running it again may help
  5 SKIPPED    `verdict` only: no blocking gate ran
  128+N        stopped by signal N (130 Ctrl-C, 143 SIGTERM); it concluded nothing

`rocm-gate verdict` exits by the run's conclusion, as pytest does with --rocm-exit-by-conclusion: 0
success or neutral, 1 failure, 3 incomplete, 5 skipped (`results.conclusion.EXIT_BY_CONCLUSION`).
"""

OK = 0
FAILURE = 1
BAD_INPUT = 2
NO = 3
NOT_DONE = 4
SKIPPED = 5

__all__ = ["OK", "FAILURE", "BAD_INPUT", "NO", "NOT_DONE", "SKIPPED"]

"""`python -m rocm_gate.cli`: the same as the `rocm-gate` command."""

import sys

from rocm_gate.cli import main

sys.exit(main())

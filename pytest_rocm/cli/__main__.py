"""`python -m pytest_rocm.cli`: the same as the `rocm-gate` command."""

import sys

from pytest_rocm.cli import main

sys.exit(main())

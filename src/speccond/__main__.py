"""``python -m speccond ...`` (and ``torchrun -m speccond train ...``): the command line."""
from speccond.harness.cli import main

raise SystemExit(main())

"""``python -m speccond ...`` (and ``torchrun -m speccond train ...``): the command line."""
from speccond.cli import main

raise SystemExit(main())

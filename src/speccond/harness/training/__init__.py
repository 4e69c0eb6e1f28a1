"""One training run: the loop (train.py), its run directory, checkpoints, timing and lock, the optimiser,
the arithmetic (precision.py), torchrun data parallelism and the checks made before anything is written."""

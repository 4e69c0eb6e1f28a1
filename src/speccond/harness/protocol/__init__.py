"""Comparisons: `speccond compare` (compare.py), the tuning protocol of `speccond tune` (tuning.py), where
its runs train (engines.py), and the finished runs kept in the repository (kept_runs.py)."""

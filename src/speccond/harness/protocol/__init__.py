"""Comparisons: `speccond compare` (compare.py), the tuning protocol of `speccond tune` (tuning.py), where
its runs train (engines.py), the finished runs kept in the repository (kept_runs.py), and the published
protocols as config functions run by `speccond protocol` (experiments/)."""

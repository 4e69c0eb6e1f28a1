"""The tasks a run trains on: every task by name (registry.py, one file each in catalogue/), how each reads its
prepared dataset (datasets.py), masked-language modelling (mlm.py) and detection (detection/, loaded by the
import path its task names: nothing else in the harness imports it)."""

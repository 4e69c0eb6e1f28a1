"""The tasks a run trains on: how each reads its prepared dataset (datasets.py), what the training loop asks
of a task (training_tasks.py, with its registry), masked-language modelling (mlm.py) and detection
(detection/, loaded by name from the registry: nothing else in the harness imports it)."""

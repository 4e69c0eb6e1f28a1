"""The tasks, one file each (or one per family of tasks that share a dataset), each listed by one line of
harness/tasks/registry.py: its name, dataset, reading, presets and model family."""

"""The run config: TrainConfig (train_config.py), its dict and key=value round trips (fields.py), and the
presets of `speccond compare` (presets.py)."""

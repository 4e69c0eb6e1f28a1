"""The experiment harness: everything `speccond compare`, `tune`, `train` and `report` run, in rooms that
import downwards only (README, Development):

    cli.py, demo.py        the command line
    protocol/              comparisons, tuning, where runs train, kept runs
    reporting/             tables and plots from run directories
    training/              one run: the loop, checkpoints, run directory
    models/ tasks/         what a run trains, and on what (tasks/detection/ loaded by name only)
    methods.py             the methods a comparison trains (one registry)
    config/                TrainConfig and its presets

Nothing in the library imports this package. Its public surface, PUBLIC below, is what scripts/ import
(``from speccond.harness import TrainConfig, final_table``), never a room by path."""

# The public surface that scripts/ and other callers import (``from speccond.harness import TrainConfig``):
# each name and the module that defines it, imported when the name is first read, so that
# ``import speccond.harness`` stays as light as before (PEP 562).
PUBLIC = {
    "TrainConfig": "speccond.harness.config.train_config",
    "preset": "speccond.harness.config.presets",
    "form_1_arguments": "speccond.harness.config.forms",
    "load_task": "speccond.harness.tasks.datasets",
    "task_shape": "speccond.harness.tasks.datasets",
    "IMAGE_MEAN": "speccond.harness.tasks.detection.model",
    "IMAGE_STD": "speccond.harness.tasks.detection.model",
    "build_model": "speccond.harness.models.run_model",
    "model_for": "speccond.harness.models.run_model",
    "latest_checkpoint": ("speccond.harness.training.checkpoint", "latest"),
    "load_model": "speccond.harness.training.runs",
    "read_run": "speccond.harness.training.runs",
    "read_timing": "speccond.harness.training.timing",
    "TIMING_FILE": ("speccond.harness.training.timing", "FILE"),
    "write_report": "speccond.harness.reporting.report",
    "shared_reading": "speccond.harness.reporting.report",
    "final_table": "speccond.harness.reporting.final_table",
    "write_final_table": "speccond.harness.reporting.final_table",
    "write_final_record": "speccond.harness.reporting.final_table",
    "read_final_table": "speccond.harness.reporting.final_table",
    "lr_text": "speccond.harness.reporting.final_table",
    "METRIC_NAMES": "speccond.harness.reporting.numbers",
    "Interval": "speccond.harness.reporting.stats",
    "mean_interval": "speccond.harness.reporting.stats",
    "paired_difference": "speccond.harness.reporting.stats",
    "family": "speccond.harness.reporting.stats",
    "holm": "speccond.harness.reporting.stats",
    "verdict": "speccond.harness.reporting.stats",
    "ARM_NAMES": "speccond.harness.protocol.tuning",
    "PEERS": "speccond.harness.protocol.tuning",
    "best_peer": "speccond.harness.protocol.tuning",
    "read_choice": "speccond.harness.protocol.tuning",
    "validation_leads": "speccond.harness.protocol.tuning",
    "outcome": "speccond.harness.protocol.tuning",
    "table_of_choice": "speccond.harness.protocol.tuning_table",
    "opened_kept": ("speccond.harness.protocol.kept_runs", "opened"),
    "speccond_main": ("speccond.harness.cli", "main"),
}
__all__ = sorted(PUBLIC)


def __getattr__(name: str):
    if name not in PUBLIC:
        raise AttributeError(f"module 'speccond.harness' has no attribute {name!r}; its public names: "
                             f"{', '.join(__all__)}")
    import importlib

    module, attribute = PUBLIC[name] if isinstance(PUBLIC[name], tuple) else (PUBLIC[name], name)
    return getattr(importlib.import_module(module), attribute)

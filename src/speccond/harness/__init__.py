"""The experiment harness: everything `speccond compare`, `tune`, `train` and `report` run, in rooms that
import downwards only (README, Development):

    cli.py, demo.py        the command line
    protocol/              comparisons, tuning, where runs train, kept runs
    reporting/             tables and plots from run directories
    training/              one run: the loop, checkpoints, run directory
    models/ tasks/         what a run trains, and on what (tasks/detection/ loaded by name only)
    methods.py             the methods a comparison trains (one registry)
    config/                TrainConfig and its presets

Nothing in the library imports this package."""

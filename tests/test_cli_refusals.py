"""Issue 32: every bad input of compare, tune, train, report and inspect is a one-line error, exit 2,
naming the value, before anything is written.

Unlike test_cli_inputs.py (numbers refused by argparse or TrainConfig), these cases need more than the
flags to be refused: the folder's earlier runs (one task per comparison folder), what each command owns
(seeds, methods, lrs), the model a config builds and the sizes of the task's data (the real digits data
set, prepared once), the files a command reads (config.json) or writes (--out). ``train`` is a tripwire:
a case that got past validation fails loudly instead of training. Each case compares the whole working
folder before and after: nothing may be created, changed or removed.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from speccond.harness.cli import main

SMALL = ["--set", "depth=1", "--set", "epochs=1", "--set", "train_size=64", "--set", "test_size=50"]


class _Reached(Exception):
    """Raised by the tripwire: the command got past validation to training."""


@pytest.fixture
def workdir(tmp_path, monkeypatch, digits_home):
    import speccond.harness.protocol.compare
    import speccond.harness.protocol.tuning

    def reached(*args, **kwargs):
        raise _Reached(f"validation let the command through to training: {args[:2]}")

    monkeypatch.setenv("SPECCOND_DATA", str(digits_home))
    monkeypatch.setattr(speccond.harness.protocol.compare, "train", reached)
    monkeypatch.setattr(speccond.harness.protocol.tuning, "run_jobs", reached)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _digits_run(folder: Path, **fields) -> None:
    """A run directory started by ``speccond compare --task digits`` (its config.json, as train writes it)."""
    from speccond.harness.config.train_config import TrainConfig
    from speccond.harness.training.run_dir import write_config

    write_config(folder, TrainConfig(task="digits", method="baseline", **fields))


def _setups(root: Path) -> dict:
    """Named folder states a case starts from."""
    (root / "a-file").write_text("not a folder\n")
    _digits_run(root / "cmp" / "baseline" / "seed-0")
    truncated = root / "truncated"
    _digits_run(truncated)
    text = (truncated / "config.json").read_text()
    (truncated / "config.json").write_text(text[: len(text) // 2])
    listed = root / "listed"
    listed.mkdir()
    (listed / "config.json").write_text(json.dumps([1, 2, 3]))
    return {}


# (arguments, regex the one-line error must match). Paths are relative to the working folder, which holds
# a-file (a file), cmp/ (a digits comparison), truncated/ (a run whose config.json is cut short) and
# listed/ (a run whose config.json holds a list).
CASES = [
    # a comparison folder holds one task (item 2)
    (["compare", "--task", "fashion-mnist", "--methods", "qk-norm", "--out", "cmp"],
     r"cmp holds runs of task 'digits' .*baseline/seed-0.*; a comparison folder holds one task"),
    (["compare", "--task", "digits", "--set", "test_size=40", "--out", "cmp"],
     r"cmp holds runs with test_size=0 .*baseline/seed-0.*, not test_size=40"),
    # every --set / --sweep key is applied or refused (item 3)
    (["compare", "--task", "digits", "--set", "seed=5", "--out", "new"], r"--set seed=5: .*use --seeds"),
    (["compare", "--task", "digits", "--sweep", "seed=1,2", "--out", "new"], r"--sweep seed=1,2: .*use --seeds"),
    (["compare", "--task", "digits", "--sweep", "method=baseline,qk-norm", "--out", "new"],
     r"--sweep method=baseline,qk-norm: .*use --methods"),
    (["compare", "--task", "digits", "--set", "method=qk-norm", "--out", "new"], r"--set method=qk-norm: .*use --methods"),
    (["tune", "--task", "digits", "--val-size", "100", "--arms", "", "--out", "new"], r"--arms '' names no arms"),
    (["tune", "--task", "digits", "--val-size", "100", "--arms", ",", "--out", "new"], r"--arms ',' names no arms"),
    (["tune", "--task", "digits", "--val-size", "100", "--arms", "baseline,baseline", "--out", "new"],
     r"--arms names 'baseline' twice"),
    (["tune", "--task", "digits", "--val-size", "100", "--lrs", "1e-3,1e-3", "--out", "new"], r"--lrs names 0.001 twice"),
    (["tune", "--task", "digits", "--val-size", "100", "--set", "seed=3", "--out", "new"],
     r"--set seed=3: .*--tuning-seeds"),
    (["tune", "--task", "digits", "--val-size", "100", "--set", "lr=0.01", "--out", "new"], r"--set lr=0.01: .*use --lrs"),
    (["tune", "--task", "digits", "--val-size", "100", "--set", "val_size=50", "--out", "new"],
     r"--set val_size=50: .*use --val-size"),
    (["tune", "--task", "digits", "--val-size", "100", "--set", "method=baseline", "--out", "new"],
     r"--set method=baseline: .*use --arms"),
    # the config is validated end to end before anything is written (item 8)
    (["compare", "--task", "digits", *SMALL, "--set", "patch_size=3", "--out", "new"],
     r"patch_size 3 does not divide image_size 8"),
    (["compare", "--task", "digits", *SMALL, "--set", "model=bert", "--out", "new"],
     r"model 'bert' takes a language task .*, but task 'digits' is images"),
    (["compare", "--task", "digits", "--set", "val_size=1438", "--out", "new"],
     r"TrainConfig.val_size=1438 leaves no training examples of the 1438 of task 'digits'"),
    (["compare", "--task", "digits", "--set", "train_size=5000", "--out", "new"],
     r"TrainConfig.train_size=5000 but task 'digits' has 1438 train examples"),
    (["compare", "--task", "digits", "--set", "test_size=400", "--out", "new"],
     r"TrainConfig.test_size=400 but task 'digits' has 359 test examples"),
    (["tune", "--task", "digits", "--val-size", "1438", "--out", "new"],
     r"TrainConfig.val_size=1438 leaves no training examples"),
    (["tune", "--task", "digits", "--val-size", "100", "--set", "patch_size=3", "--out", "new"],
     r"patch_size 3 does not divide image_size 8"),
    (["train", "--set", "task=digits", "--set", "patch_size=3", "--out", "new"], r"patch_size 3 does not divide"),
    (["train", "--set", "task=digits", "--set", "val_size=1438", "--out", "new"],
     r"TrainConfig.val_size=1438 leaves no training examples"),
    # files and folders: named, never a traceback (item 9)
    (["compare", "--task", "digits", "--out", "a-file"], r"--out a-file is a file, not a folder"),
    (["compare", "--task", "digits", "--out", "a-file/sub"], r"--out a-file/sub: .*a-file is a file, not a folder"),
    (["tune", "--task", "digits", "--val-size", "100", "--out", "a-file"], r"--out a-file is a file, not a folder"),
    (["train", "--set", "task=digits", "--out", "a-file"], r"--out a-file is a file, not a folder"),
    (["report", "cmp", "--out", "a-file"], r"--out a-file is a file, not a folder"),
    (["train", "--resume", "truncated"], r"truncated/config.json: unreadable run config"),
    (["train", "--resume", "listed"], r"listed/config.json: no \"config\" object"),
    (["train", "--resume", "a-file"], r"a-file has no config.json; nothing to resume"),
    (["report", "truncated"], r"truncated/config.json: unreadable run config"),
    (["report", "listed"], r"listed/config.json: no \"config\" object"),
    (["inspect", "timm:vit_tiny_patch16_22"], r"unknown timm model 'vit_tiny_patch16_22'; nearest: vit_tiny_patch16_224"),
    (["inspect", "timm:vit_tiny_patch16_224", "--set", "depth=abc"],
     r"timm:vit_tiny_patch16_224 could not be built with depth='abc'"),
    (["inspect", "hf:no-such-type"], r"unknown hf model type 'no-such-type'"),
    (["inspect", "timm:vit_tiny_patch16_224", "--set", "img_size=32", "--set", "depth=1", "--json", "a-file/rows.json"],
     r"--json a-file/rows.json: .*a-file is a file, not a folder"),
]


def _tree(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.is_dir(), p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


@pytest.mark.parametrize("argv, message", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(argv, message, workdir, capsys):
    _setups(workdir)
    before = _tree(workdir)
    try:
        code = main(argv)
    except SystemExit as stop:
        code = stop.code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert re.search(rf"^speccond {argv[0]}: error: .*{message}", lines[-1]), err
    assert "Traceback" not in err and len(lines) == 1, err
    assert _tree(workdir) == before


def test_a_garbled_timing_file_is_named_and_does_not_block_the_report(workdir, capsys, caplog):
    """timing.json cut short: report still writes, the run's wall time is left out, the file is named."""
    from speccond.harness.training.runs import read_run

    run = workdir / "cmp" / "baseline" / "seed-0"
    _digits_run(run)
    (run / "timing.json").write_text('{"seconds": 12.5, "st')
    with caplog.at_level("WARNING"):
        record = read_run(run)
    assert record.seconds is None
    assert f"{run / 'timing.json'}: unreadable" in caplog.text and "wall time" in caplog.text


def test_the_folder_check_passes_a_folder_of_the_same_task_and_a_sweep_of_a_data_field(workdir):
    """The refusals above are not over-broad: the same task again, or a new sweep value, gets to training."""
    _digits_run(workdir / "cmp" / "baseline" / "seed-0")
    for argv in (["compare", "--task", "digits", "--set", "depth=1", "--set", "epochs=1", "--out", "cmp"],
                 ["compare", "--task", "digits", "--set", "epochs=1", "--sweep", "test_size=0,40", "--out", "cmp"]):
        with pytest.raises(_Reached):
            main(argv)
    assert not os.path.exists(workdir / "cmp" / "results.md")

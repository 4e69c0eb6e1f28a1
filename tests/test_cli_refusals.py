"""Command-line refusals (docs/RELIABILITY.md, "Validated before anything is written"): every bad input of
compare, tune, train, report and inspect is a one-line error, exit 2, naming the value, before anything is
written; so is a missing optional package, naming its install command.

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
import torch

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

    write_config(folder, TrainConfig().replaced(task="digits", method="baseline", **fields))


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
    for name, epochs in (("fractional", 2.5), ("boolean", True)):  # config.json values of the wrong type
        _digits_run(root / name)
        record = json.loads((root / name / "config.json").read_text())
        record["config"]["epochs"] = epochs
        (root / name / "config.json").write_text(json.dumps(record))
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
    # a run folder's own config.json is the authority: another config is refused before the folder is locked
    (["compare", "--task", "digits", "--methods", "baseline", "--seeds", "1", "--set", "depth=1", "--out", "cmp"],
     r"cmp/baseline/seed-0 was started with a different config .*depth=1 \(recorded 4\)"),
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
    # a setting the run's method or model never reads is refused, naming who ignores it
    (["compare", "--task", "digits", "--methods", "baseline", "--set", "lam=5", "--out", "new"],
     r"--set lam=5: method 'baseline' does not read lam \(spectral, shifted-init, spectral-qk-norm read it\); leave it"),
    (["compare", "--task", "digits", "--methods", "baseline,qk-norm", "--set", "correction=svd", "--out", "new"],
     r"--set correction=svd: method 'baseline' does not read correction"),
    (["compare", "--task", "digits", "--methods", "spectral", "--sweep", "granularity=head,projection", "--out", "new"],
     r"--sweep granularity=head,projection: method 'spectral' with correction='identity' and lam=10 adds a fixed"),
    (["compare", "--task", "digits", "--methods", "baseline", "--sweep", "landmarks=32,64", "--out", "new"],
     r"--sweep landmarks=32,64: model 'vit' does not read landmarks \(nystromformer read it\)"),
    (["compare", "--task", "digits", "--model", "timm:vit_tiny_patch16_224", "--set", "model_args=img_size=8,patch_size=2",
      "--set", "depth=3", "--set", "embed_dim=64", "--out", "new"],
     r"--set depth=3: model 'timm:vit_tiny_patch16_224' is built from its name and sized by model_args alone"),
    (["train", "--set", "task=digits", "--set", "method=baseline", "--set", "lam=5", "--out", "new"],
     r"--set lam=5: method 'baseline' does not read lam"),
    (["train", "--set", "task=digits", "--set", "method=spectral", "--set", "refresh_every=10", "--out", "new"],
     r"--set refresh_every=10: method 'spectral' with correction='identity' and lam=10 adds a fixed lam \* I"),
    # train's default method is SVD per head (the paper's lam = 10 before 2026-12-07): a lam given without a
    # method is refused, even at lam's default value, rather than recorded and run unread
    (["train", "--set", "task=digits", "--set", "lam=10", "--out", "new"],
     r"--set lam=10: the default method is spectral-svd \(SVD per head; the paper's lam = 10 until 2026-12-07\), "
     r"and method 'spectral-svd' does not read lam .*; add --set method=spectral for the paper's method with lam=10"),
    (["train", "--set", "task=digits", "--set", "correction=identity", "--out", "new"],
     r"--set correction=identity: the default method is spectral-svd .*add --set method=spectral"),
    (["tune", "--task", "digits", "--val-size", "100", "--arms", "baseline:lam=5,spectral", "--out", "new"],
     r"--arms baseline:lam=5: lam=5: method 'baseline' does not read lam"),
    (["tune", "--task", "digits", "--val-size", "100", "--arms", "baseline,qk-norm", "--set", "granularity=projection",
      "--out", "new"], r"--set granularity=projection: method 'baseline' does not read granularity"),
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
    # what timm, the device and a pre-training run are asked for is checked before compare writes its folder
    (["compare", "--task", "digits", "--set", "auto_augment=garbage", "--out", "new"],
     r"TrainConfig.auto_augment='garbage' is not an augmentation timm reads .*; give timm's form, e.g. rand-m9"),
    (["train", "--set", "task=digits", "--set", "auto_augment=garbage", "--out", "new"],
     r"TrainConfig.auto_augment='garbage' is not an augmentation timm reads"),
    (["compare", "--task", "digits", "--set", "optimizer=timm:nonexistent", "--out", "new"],
     r"TrainConfig.optimizer 'timm:nonexistent': timm has no optimiser 'nonexistent'"),
    (["compare", "--task", "digits", "--set", "init_from=no-such-run", "--out", "new"],
     r"init_from='no-such-run': no-such-run holds no run \(no config.json\); pre-train first"),
    *([(["compare", "--task", "digits", "--set", "device=cuda", "--out", "new"],
        r"device 'cuda' was asked for but torch sees no CUDA device; use device=cpu or auto")]
      if not torch.cuda.is_available() else []),
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
    (["train", "--resume", "fractional"],
     r"fractional/config.json: not a valid TrainConfig \(TrainConfig.epochs must be an integer, got 2.5 \(float\)"),
    (["train", "--resume", "boolean"], r"boolean/config.json: .*TrainConfig.epochs must be an integer, got True \(bool\)"),
    (["train", "--out", "fractional", "--set", "task=digits", "--set", "method=baseline"],
     r"fractional/config.json: not a readable run config \(TypeError: TrainConfig.epochs must be an integer, got 2.5"),
    (["report", "boolean"], r"boolean/config.json: .*TrainConfig.epochs must be an integer, got True"),
    (["report", "listed"], r"listed/config.json: no \"config\" object"),
    (["inspect", "timm:vit_tiny_patch16_22"], r"unknown timm model 'vit_tiny_patch16_22'; nearest: vit_tiny_patch16_224"),
    (["inspect", "timm:vit_tiny_patch16_224", "--set", "depth=abc"],
     r"timm:vit_tiny_patch16_224 could not be built with depth='abc'"),
    (["inspect", "hf:no-such-type"], r"unknown transformers model type 'no-such-type'"),
    (["inspect", "hf:lama"], r"unknown transformers model type 'lama'; nearest: llama, "),
    (["inspect", "hf:./no-such-folder"], r"hf:./no-such-folder is not a folder; hf:<folder> takes a local transformers"),
    (["inspect", "hf:./cmp"], r"hf:./cmp holds no config.json, so it is not a transformers checkpoint folder"),
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
    """The refusals above are not over-broad: the same task again, or a new sweep value, gets to training. (The
    run is in a folder no method of these commands trains: one they do train must record their own config.)"""
    _digits_run(workdir / "cmp" / "earlier" / "seed-0")
    for argv in (["compare", "--task", "digits", "--set", "depth=1", "--set", "epochs=1", "--out", "cmp"],
                 ["compare", "--task", "digits", "--set", "epochs=1", "--sweep", "test_size=0,40", "--out", "cmp"]):
        with pytest.raises(_Reached):
            main(argv)
    assert not os.path.exists(workdir / "cmp" / "results.md")


# A model's name is checked before its task's data is read or prepared (the glue-* data is not in the workdir's
# data folder, so reaching it would try to obtain it): a few nearest names, not every one known.
UNKNOWN_MODELS = [
    (["compare", "--task", "glue-sst2", "--model", "hf:lama", "--out", "new"],
     r"unknown transformers model type 'lama'; nearest: llama(, [\w-]+){0,4}$"),
    (["compare", "--task", "digits", "--model", "timm:vit_tiny_patch16_22", "--out", "new"],
     r"unknown timm model 'vit_tiny_patch16_22'; nearest: vit_tiny_patch16_224(, \w+){0,4}$"),
    (["compare", "--task", "mlm", "--model", "hf:./my-bert", "--out", "new"], r"hf:./my-bert is not a folder"),
    (["tune", "--task", "glue-sst2", "--model", "hf:lama", "--val-size", "100", "--out", "new"],
     r"unknown transformers model type 'lama'; nearest: llama"),
    (["train", "--set", "task=mlm", "--set", "model=hf:robbertta", "--out", "new"],
     r"unknown transformers model type 'robbertta'; nearest: roberta"),
    (["compare", "--task", "digits", "--sweep", "model=vit,timm:deit_tinny_patch16_224", "--out", "new"],
     r"unknown timm model 'deit_tinny_patch16_224'; nearest: deit_tiny_patch16_224"),
]


@pytest.mark.parametrize("argv, message", UNKNOWN_MODELS, ids=[" ".join(a) for a, _ in UNKNOWN_MODELS])
def test_an_unknown_model_is_refused_before_any_data_is_read(argv, message, workdir, monkeypatch, capsys):
    import speccond.data

    def reached(*args, **kwargs):
        raise _Reached(f"the command read data before checking the model: {args}")

    monkeypatch.setattr(speccond.data, "prepare", reached)
    data_before = _tree(Path(os.environ["SPECCOND_DATA"]))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert re.search(rf"^speccond {argv[0]}: error: {message}", err.strip()) and len(err.strip().splitlines()) == 1, err
    assert _tree(workdir) == {} and _tree(Path(os.environ["SPECCOND_DATA"])) == data_before


# Without an optional package (made unimportable by a sitecustomize.py that puts None in sys.modules, as an
# environment without it has none): (package, arguments, install command). Each runs `python -m speccond` in a
# subprocess, so nothing this test process has imported hides the missing package.
MISSING = [
    ("timm", ["demo"], 'pip install -e ".[timm]"'),
    ("timm", ["inspect", "timm:vit_tiny_patch16_224"], 'pip install -e ".[timm]"'),
    ("timm", ["compare", "--task", "digits", "--out", "new"], 'pip install -e ".[timm]"'),
    ("timm", ["train", "--set", "task=digits", "--out", "new"], 'pip install -e ".[timm]"'),
    ("transformers", ["inspect", "hf:bert"], 'pip install -e ".[hf]"'),
    ("transformers", ["compare", "--task", "glue-sst2", "--model", "bert", "--out", "new"], 'pip install -e ".[hf]"'),
    ("transformers", ["compare", "--task", "lra-listops", "--model", "nystromformer", "--out", "new"],
     'pip install -e ".[hf]"'),
    ("numpy", ["compare", "--task", "digits", "--out", "new"], "pip install numpy"),
    ("matplotlib", ["report", "cmp"], "pip install matplotlib"),
    ("matplotlib", ["plot", "cmp/baseline/seed-0"], "pip install matplotlib"),
    ("submitit", ["tune", "--task", "digits", "--val-size", "100", "--engine", "submitit", "--out", "new"],
     'pip install -e ".[sweeps]"'),
]


def _without(package: str, argv: list[str], root: Path):
    """``python -m speccond ARGV`` in root/work with ``package`` unimportable and SPECCOND_DATA root/data."""
    import subprocess
    import sys

    blocker = root / "blocker"
    blocker.mkdir(exist_ok=True)
    (blocker / "sitecustomize.py").write_text(f"import sys\nsys.modules[{package!r}] = None\n")
    source = str(Path(__file__).resolve().parents[1] / "src")
    # torch warns on import when numpy is missing (its own warning, not the command's): silenced for that case
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker), source]), "SPECCOND_DATA": str(root / "data"),
           "PYTHONWARNINGS": "ignore", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-m", "speccond", *argv], cwd=root / "work", env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("package, argv, install", MISSING, ids=[f"no {p}: {' '.join(a)}" for p, a, _ in MISSING])
def test_a_missing_optional_package_is_one_line_naming_it_and_its_install_command(package, argv, install, tmp_path):
    (tmp_path / "data").mkdir()
    _digits_run(tmp_path / "work" / "cmp" / "baseline" / "seed-0")
    before = _tree(tmp_path / "work")
    done = _without(package, argv, tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0] == (f"speccond {argv[0]}: error: needs {package}, which is not installed; install it with: "
                        f"{install}"), done.stderr
    assert _tree(tmp_path / "work") == before and _tree(tmp_path / "data") == {}


def test_preparing_digits_without_scikit_learn_is_one_line_and_caches_nothing(tmp_path):
    """The data sets' own packages are named the same way (the digits data set is scikit-learn's)."""
    (tmp_path / "work").mkdir()
    done = _without("sklearn", ["data", "prepare", "digits"], tmp_path)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "speccond data: error: needs sklearn, which is not installed; install it with: pip install scikit-learn"]
    assert list((tmp_path / "data").rglob("*.safetensors")) == [] and list((tmp_path / "work").iterdir()) == []

"""Bad numbers on the command line: every one exits 2 with a message naming the flag or field, before any data
is read or any file is written; good values still parse.

Each case runs ``speccond.harness.cli.main`` in-process in an empty working directory (so a default output folder
would land there too) with ``data.prepare`` and ``train`` replaced by a tripwire: a case that got past
validation fails loudly instead of reading a dataset or training.
"""
from __future__ import annotations

import argparse
import re

import pytest

from speccond.harness.cli import build_parser, main

VIT = "timm:vit_tiny_patch16_224"
POSITIVE = r"expected a positive integer \(1, 2, \.\.\.\), got "
NON_NEGATIVE = r"expected a non-negative integer \(0, 1, \.\.\.\), got "
FINITE = r"expected a finite number >= 0 \(e\.g\. 10 or 0\.5\), got "
LAM = r"expected a finite number >= 0 \(e\.g\. 10 or 0\.5\) or auto, got "
KAPPA = r"expected a finite number > 1 \(e\.g\. 2 or 1\.5\), got "
METHODS = r"expected comma-separated methods from baseline, spectral, .*, got "


class _Reached(Exception):
    """Raised by the tripwires: the command got past validation to data or training."""


@pytest.fixture(autouse=True)
def _tripwires(tmp_path, monkeypatch):
    import speccond.data
    import speccond.harness.protocol.compare
    import speccond.harness.training.train

    def reached(*args, **kwargs):
        raise _Reached(f"validation let the command through to data or training: {args}")

    monkeypatch.setattr(speccond.data, "prepare", reached)
    monkeypatch.setattr(speccond.harness.training.train, "train", reached)
    monkeypatch.setattr(speccond.harness.protocol.compare, "train", reached)
    monkeypatch.chdir(tmp_path)


def _exit_code(argv: list[str]) -> int:
    """main's return value, or the code of the SystemExit argparse raises for a bad flag."""
    try:
        return main(argv)
    except SystemExit as stop:
        return stop.code


# (arguments, regex the error must match). {out} is a folder under tmp_path that must not be created.
# Parsing (argparse type= validators): "speccond <command>: error: argument --flag: expected ..., got ..."
PARSING = [
    (["demo", "--lam", "-1"], r"argument --lam: " + FINITE + "'-1'"),
    (["demo", "--lam", "nan"], r"argument --lam: " + FINITE + "'nan'"),
    (["demo", "--lam", "inf"], r"argument --lam: " + FINITE + "'inf'"),
    (["demo", "--lam", "ten"], r"argument --lam: " + FINITE + "'ten'"),
    (["demo", "--seed", "-1"], r"argument --seed: " + NON_NEGATIVE + "'-1'"),
    (["demo", "--seed", "1.5"], r"argument --seed: " + NON_NEGATIVE + "'1.5'"),
    (["inspect", VIT, "--lam", "-0.5", "--json", "{out}/rows.json"], r"argument --lam: " + LAM + "'-0.5'"),
    (["inspect", VIT, "--lam=-inf"], r"argument --lam: " + LAM + "'-inf'"),  # "--lam -inf" reads as a flag
    (["inspect", VIT, "--lam", "automatic"], r"argument --lam: " + LAM + "'automatic'"),
    (["inspect", VIT, "--lam", "auto", "--target-kappa", "1"], r"argument --target-kappa: " + KAPPA + "'1'"),
    (["inspect", VIT, "--lam", "auto", "--target-kappa", "nan"], r"argument --target-kappa: " + KAPPA + "'nan'"),
    (["inspect", VIT, "--batch", "0", "--entropy"], r"argument --batch: " + POSITIVE + "'0'"),
    (["inspect", VIT, "--batch", "-3"], r"argument --batch: " + POSITIVE + "'-3'"),
    (["inspect", VIT, "--batch", "2.5"], r"argument --batch: " + POSITIVE + "'2.5'"),
    (["inspect", VIT, "--jacobian", "--jacobian-iterations", "0"],
     r"argument --jacobian-iterations: " + POSITIVE + "'0'"),
    (["inspect", VIT, "--jacobian-iterations", "-1"], r"argument --jacobian-iterations: " + POSITIVE + "'-1'"),
    (["inspect", VIT, "--jacobian-iterations", "ten"], r"argument --jacobian-iterations: " + POSITIVE + "'ten'"),
    (["compare", "--out", "{out}", "--seeds", "0"], r"argument --seeds: " + POSITIVE + "'0'"),
    (["compare", "--out", "{out}", "--seeds", "-2"], r"argument --seeds: " + POSITIVE + "'-2'"),
    (["compare", "--out", "{out}", "--seeds", "1.5"], r"argument --seeds: " + POSITIVE + "'1.5'"),
    (["compare", "--out", "{out}", "--seeds", "three"], r"argument --seeds: " + POSITIVE + "'three'"),
    (["compare", "--out", "{out}", "--task", "fashion-scenes", "--seeds", "0"],
     r"argument --seeds: " + POSITIVE + "'0'"),
    (["compare", "--out", "{out}", "--methods", ","], r"argument --methods: " + METHODS + "','"),
    (["compare", "--out", "{out}", "--methods", ""], r"argument --methods: " + METHODS + "''"),
    (["compare", "--out", "{out}", "--methods", "baseline,lora"],
     r"argument --methods: " + METHODS + "unknown 'lora'"),
]

# Validation after parsing (TrainConfig, --sweep): "speccond <command>: error: ..."
VALIDATION = [
    (["inspect", VIT, "--target-kappa", "3", "--json", "{out}/rows.json"],
     r"--target-kappa 3 is read only by --lam auto .*; add --lam auto or leave --target-kappa out"),
    (["inspect", VIT, "--lam", "auto", "--correction", "svd", "--json", "{out}/rows.json"],
     r"lam='auto' \(for q, k, v\) works only with correction='identity'"),
    (["compare", "--out", "{out}", "--set", "epochs=0"], r"TrainConfig\.epochs must be >= 1, got 0"),
    (["compare", "--out", "{out}", "--set", "batch_size=-8"], r"TrainConfig\.batch_size must be >= 1, got -8"),
    (["compare", "--out", "{out}", "--set", "batch_size=1.5"], r"TrainConfig\.batch_size expects int, got '1\.5'"),
    (["compare", "--out", "{out}", "--set", "warmup_steps=-1"], r"TrainConfig\.warmup_steps must be >= 0, got -1"),
    (["compare", "--out", "{out}", "--set", "track_every=-5"], r"TrainConfig\.track_every must be >= 0, got -5"),
    (["compare", "--out", "{out}", "--set", "lr=nan"], r"TrainConfig\.lr must be finite and >= 0, got nan"),
    (["compare", "--out", "{out}", "--set", "lam=-1"], r"TrainConfig\.lam must be a finite number >= 0 or 'auto', got -1\.0"),
    (["compare", "--out", "{out}", "--set", "grad_clip=inf"],
     r"TrainConfig\.grad_clip must be finite and >= 0, got inf"),
    (["compare", "--out", "{out}", "--set", "lam=auto", "--set", "target_kappa=0.5"],
     r"TrainConfig\.target_kappa is the kappa bound lam='auto' aims at, a finite number > 1 \(default 2\), got 0\.5"),
    # before config form 2, target_kappa=T alone asked for lam=auto: now it is refused, never ignored
    (["compare", "--out", "{out}", "--set", "target_kappa=2"],
     r"TrainConfig\.target_kappa=2 is the kappa bound lam=auto aims at, and lam is 10: add lam=auto"),
    (["tune", "--out", "{out}", "--val-size", "100", "--arms", "baseline,spectral:target_kappa=3"],
     r"TrainConfig\.target_kappa=3 is the kappa bound lam=auto aims at, and lam is 10: add lam=auto"),
    (["compare", "--out", "{out}", "--sweep", "lam=1,auto", "--set", "target_kappa=3"],
     r"TrainConfig\.target_kappa=3 is the kappa bound lam=auto aims at, and lam is 10: add lam=auto"),
    (["compare", "--out", "{out}", "--set", "seed=-1"], r"--set seed=-1: compare runs seeds 0 to N-1 of --seeds N"),
    (["compare", "--out", "{out}", "--sweep", "lam=1,abc"], r"TrainConfig\.lam expects float or 'auto', got 'abc'"),
    (["compare", "--out", "{out}", "--sweep", "lam=1,-10"], r"TrainConfig\.lam must be a finite number >= 0 or 'auto', got -10\.0"),
    (["compare", "--out", "{out}", "--sweep", "epochs=0,2"], r"TrainConfig\.epochs must be >= 1, got 0"),
    (["compare", "--out", "{out}", "--sweep", "lam="], r"--sweep lam= names no values"),
    (["compare", "--out", "{out}", "--sweep", "lam"], r"--sweep takes FIELD=V1,V2,\.\.\. once per field, got 'lam'"),
    (["compare", "--out", "{out}", "--task", "fashion-scenes", "--set", "fpn_channels=0"],
     r"TrainConfig\.fpn_channels must be >= 1, got 0"),
    (["compare", "--out", "{out}", "--task", "fashion-scenes", "--set", "val_size=-1"],
     r"TrainConfig\.val_size must be >= 0, got -1"),
    (["train", "--out", "{out}", "--set", "task=fashion-scenes", "--set", "seed=-1"],
     r"TrainConfig\.seed must be >= 0, got -1"),
    (["compare", "--out", "{out}", "--task", "fashion-scenes", "--sweep", "lr=1e-3,inf"],
     r"TrainConfig\.lr must be finite and >= 0, got inf"),
    (["train", "--out", "{out}", "--set", "epochs=0"], r"TrainConfig\.epochs must be >= 1, got 0"),
    (["train", "--out", "{out}", "--set", "checkpoint_every=0"], r"TrainConfig\.checkpoint_every must be >= 1, got 0"),
    (["train", "--out", "{out}", "--set", "landmarks=-64"], r"TrainConfig\.landmarks must be >= 1, got -64"),
    (["train", "--out", "{out}", "--set", "train_size=-1"], r"TrainConfig\.train_size must be >= 0, got -1"),
    (["train", "--out", "{out}", "--set", "weight_decay=-0.1"], r"TrainConfig\.weight_decay must be finite and >= 0"),
    (["train", "--out", "{out}", "--set", "embed_dim=ten"], r"TrainConfig\.embed_dim expects int, got 'ten'"),
    (["train", "--out", "{out}", "--set", "task=nope"], r"unknown task 'nope'; known tasks: "),
]


@pytest.mark.parametrize("argv, message", PARSING + VALIDATION, ids=[" ".join(a) for a, _ in PARSING + VALIDATION])
def test_bad_input_exits_2_with_a_message_and_writes_nothing(argv, message, tmp_path, capsys):
    code = _exit_code([a.format(out=tmp_path / "out") for a in argv])
    err = capsys.readouterr().err
    assert code == 2
    assert re.search(rf"speccond {argv[0]}: error: .*{message}", err), err
    assert "done in" not in err
    assert list(tmp_path.iterdir()) == []  # no --out folder, no --json file, no default ./runs, ./plots


def test_every_numeric_flag_has_a_checking_type():
    """No flag of any sub-command takes a bare int or float (which would let 0, -2, nan or inf through)."""
    def actions(parser: argparse.ArgumentParser):
        for action in parser._actions:
            yield action
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    yield from actions(sub)

    bare = [a.option_strings for a in actions(build_parser()) if a.type in (int, float)]
    assert bare == []


@pytest.mark.parametrize("argv, expected", [
    (["demo", "--lam", "0", "--seed", "0"], {"lam": 0.0, "seed": 0}),
    (["demo", "--lam", "1e-3", "--seed", "7"], {"lam": 1e-3, "seed": 7}),
    (["inspect", VIT, "--lam", "2.5", "--batch", "1", "--jacobian-iterations", "1"],
     {"lam": 2.5, "batch": 1, "jacobian_iterations": 1}),
    (["inspect", VIT], {"lam": None, "correction": None, "target_kappa": None, "batch": 2, "jacobian_iterations": 50}),
    (["inspect", VIT, "--lam", "auto", "--target-kappa", "1.5"], {"lam": "auto", "target_kappa": 1.5}),
    (["inspect", VIT, "--lam", "AUTO"], {"lam": "auto"}),
    (["compare", "--seeds", "1", "--methods", " baseline , qk-norm,"],
     {"seeds": 1, "methods": ["baseline", "qk-norm"]}),
    (["compare"], {"seeds": 3, "methods": ["baseline", "spectral-svd", "spectral", "qk-norm"]}),
])
def test_good_values_parse(argv, expected):
    args = vars(build_parser().parse_args(argv))
    assert {key: args[key] for key in expected} == expected


@pytest.mark.parametrize("argv", [
    ["compare", "--task", "digits", "--seeds", "1", "--set", "epochs=2", "--set", "lam=0", "--sweep", "lam=1,10"],
    ["compare", "--task", "fashion-scenes", "--methods", "baseline", "--set", "val_size=0",
     "--sweep", "lr=1e-4,3e-4"],
    ["train", "--set", "task=digits", "--set", "track_every=0", "--set", "seed=3"],
])
def test_good_values_pass_validation_and_reach_the_data(argv, tmp_path):
    """Valid flags get through every check: the first thing the command then does is read data (the tripwire)."""
    with pytest.raises(_Reached):
        main([*argv, "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()

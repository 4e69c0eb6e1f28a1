"""Fault injection (docs/RELIABILITY.md, "Interruptions"): a comparison interrupted at many points, and resumed
each time by the same command, ends byte-identical to one never interrupted.

``speccond compare`` (baseline and spectral, one seed, the tiny digits task) runs in a forked child
process that is stopped by a fault, then again, until one run ends; the faults, in order:

- SIGKILL or SIGTERM at a step drawn at random (seeded), as a kill or a shutdown would;
- SIGKILL just before the k-th ``os.replace`` of the process: every atomic write of the harness
  (checkpoint folder, LATEST, timing.json, config.json, metrics.jsonl rewrite) ends in one, so this is
  a kill inside its write window, the staging copy complete but not yet in place;
- Ctrl-C at a step due for a checkpoint, then a second Ctrl-C or a SIGKILL at each ``os.replace`` that
  follows: the window of item 1, where a second save of the step used to delete its only copy;
- a single Ctrl-C (exit 130: "run the same command again to resume").

Every interruption must have happened (the child did not finish), no resume may fail ("damaged"), and
at the end every run's metrics.jsonl and its final checkpoint's files must equal the uninterrupted run's,
byte for byte.
"""
from __future__ import annotations

import hashlib
import multiprocessing
import os
import random
import signal
from pathlib import Path

import pytest

SETS = ("depth=1", "embed_dim=16", "epochs=2", "train_size=128", "test_size=50", "batch_size=32", "warmup_steps=2",
        "checkpoint_every=3")  # 4 steps an epoch, 8 a run: checkpoints at steps 3, 4 (epoch end), 6 and 8
STEP_DUE = 3  # a step that is due for a checkpoint

_draw = random.Random(32)
# Three groups, each on a fresh folder (a run has 16 steps to interrupt: baseline's 8, then spectral's);
# a group opening with a double interrupt hits step 3 of the baseline, which is due for a checkpoint.
FAULTS = [
    [("double interrupt", STEP_DUE, "sigint", 1),  # second Ctrl-C on the checkpoint's first rename
     ("signal at step", signal.SIGKILL, _draw.randint(1, 4)),
     ("kill at replace", 1),
     ("kill at replace", 3)],
    [("double interrupt", STEP_DUE, "sigkill", 4),  # the item 1 window: where the second save of step 3 was
     ("signal at step", signal.SIGTERM, _draw.randint(1, 4)),
     ("kill at replace", 6),
     ("kill at replace", 2)],
    [("double interrupt", STEP_DUE, "sigkill", 2),
     ("signal at step", signal.SIGINT, _draw.randint(2, 4)),  # a single Ctrl-C: stops at the step boundary
     ("signal at step", signal.SIGKILL, _draw.randint(1, 4))],
]


def _arm(fault) -> None:
    """In the child: install ``fault`` (see FAULTS) by wrapping StepLoop.advanced and os.replace."""
    from speccond.harness.training import run_dir

    steps, replaces, interrupted = [0], [0], [False]
    kind = fault[0] if fault else None
    advanced, replace = run_dir.StepLoop.advanced, os.replace

    def counted_advanced(self, loss):
        advanced(self, loss)
        steps[0] += 1
        if kind == "signal at step" and steps[0] == fault[2]:
            os.kill(os.getpid(), fault[1])
        elif kind == "double interrupt" and steps[0] == fault[1]:
            interrupted[0] = True
            os.kill(os.getpid(), signal.SIGINT)

    def counted_replace(source, target, *args, **kwargs):
        if kind == "kill at replace" or (kind == "double interrupt" and interrupted[0]):
            replaces[0] += 1
            if kind == "kill at replace" and replaces[0] == fault[1]:
                os.kill(os.getpid(), signal.SIGKILL)
            if kind == "double interrupt" and replaces[0] == fault[3]:
                os.kill(os.getpid(), signal.SIGINT if fault[2] == "sigint" else signal.SIGKILL)
        return replace(source, target, *args, **kwargs)

    run_dir.StepLoop.advanced = counted_advanced
    os.replace = counted_replace


def _child(argv, fault) -> None:
    import sys

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    sys.stdout = sys.stderr = open(os.devnull, "w")  # pytest's capture objects stay the parent's
    import torch

    from speccond.harness.cli import main

    torch.set_num_threads(1)
    # Ctrl-C as at a terminal: a shell starts a background job (`pytest &`, a CI step) with SIGINT ignored,
    # which the training loop rightly leaves alone, and the child would inherit it
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _arm(fault)
    os._exit(main(argv))


def _compare(out: Path, fault=None) -> int:
    """``speccond compare`` into ``out`` in a forked child with ``fault`` armed; its exit code (-N: signal N)."""
    argv = ["compare", "--task", "digits", "--seeds", "1", "--methods", "baseline,spectral", "--out", str(out),
            *[f"--set={s}" for s in SETS]]
    process = multiprocessing.get_context("fork").Process(target=_child, args=(argv, fault))
    process.start()
    process.join(120)
    assert process.exitcode is not None, f"compare hung with fault {fault}"
    return process.exitcode


def _outcome(out: Path) -> dict[str, str]:
    """Each run's metrics.jsonl and final checkpoint files, as SHA-256s by path."""
    files = {}
    for run in sorted(p.parent for p in out.glob("*/seed-*/config.json")):
        final = run / "checkpoints" / (run / "checkpoints" / "LATEST").read_text().strip()
        for path in (run / "metrics.jsonl", final / "model.safetensors", final / "state.pt"):
            files[str(path.relative_to(out))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return files


def test_an_interrupted_comparison_resumes_to_the_same_bytes(tmp_path, monkeypatch, digits_home):
    monkeypatch.setenv("SPECCOND_DATA", str(digits_home))
    assert _compare(tmp_path / "whole") == 0
    expected = _outcome(tmp_path / "whole")
    assert len(expected) == 6 and all("step-000008" in p for p in expected if "checkpoints" in p), expected
    for group, faults in enumerate(FAULTS):
        cut, codes = tmp_path / f"cut-{group}", []
        for fault in faults:
            codes.append((fault, _compare(cut, fault)))
            assert codes[-1][1] in (-signal.SIGKILL, -signal.SIGTERM, 130), codes  # interrupted, never refused
        assert _compare(cut) == 0, codes
        assert _outcome(cut) == expected, codes

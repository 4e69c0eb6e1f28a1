"""Run recovery (docs/RELIABILITY.md, "Interruptions"): a run directory never loses its last finished step, and
reads back after damage.

- a second save of a step (a Ctrl-C on a step that was also due for a checkpoint) writes nothing, so a
  kill inside it cannot delete the only complete copy;
- a damaged folder of that step is replaced by moving it aside first: a failure at any rename leaves a
  checkpoint that resumes;
- LATEST naming a missing, incomplete or corrupt checkpoint falls back to the newest intact one and says so.

A tiny ``nn.Linear`` stands in for the model: what is tested is the files, not the training.
"""
from __future__ import annotations

import logging
import os

import pytest
import torch
from torch import nn

from speccond.harness.training import checkpoint
from speccond.harness.training.run_dir import resume


class Injected(RuntimeError):
    """The failure the tests inject into a file operation, as a kill at that moment would stop the save."""


def _model(seed: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = nn.Linear(3, 2)
    return model, torch.optim.AdamW(model.parameters())


def _saved(run_dir, steps=(2, 4)) -> dict[int, dict]:
    """Checkpoints at ``steps`` of models seeded by the step; returns each step's weights."""
    weights = {}
    for step in steps:
        model, optimizer = _model(step)
        checkpoint.save(run_dir, step, 0, model, {"optimizer": optimizer.state_dict()})
        weights[step] = {k: v.clone() for k, v in model.state_dict().items()}
    return weights


def _resumed(run_dir) -> tuple[int, dict]:
    model, optimizer = _model(99)
    step = resume(run_dir, model, optimizer)
    return step, model.state_dict()


def _fail_on_call(monkeypatch, name: str, call: int) -> None:
    """``os.<name>`` as checkpoint.py calls it raises Injected on its ``call``-th use (0 = the first)."""
    real, calls = getattr(os, name), []

    def failing(*args, **kwargs):
        calls.append(args)
        if len(calls) - 1 == call:
            raise Injected(f"os.{name} call {call}")
        return real(*args, **kwargs)

    monkeypatch.setattr(checkpoint.os, name, failing)


def _flip_byte(path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("call", [0, 1, 2])
def test_a_second_save_of_a_step_never_deletes_its_only_copy(tmp_path, monkeypatch, call):
    weights = _saved(tmp_path)
    _fail_on_call(monkeypatch, "replace", call)
    model, optimizer = _model(4)
    try:
        checkpoint.save(tmp_path, 4, 0, model, {"optimizer": optimizer.state_dict()})
    except Injected:
        pass
    step, state = _resumed(tmp_path)
    assert step == 4 and all(torch.equal(state[k], weights[4][k]) for k in state)


def test_a_second_save_of_an_intact_step_writes_nothing(tmp_path):
    _saved(tmp_path)
    folder = tmp_path / "checkpoints" / "step-000004"
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    model, optimizer = _model(4)
    assert checkpoint.save(tmp_path, 4, 0, model, {"optimizer": optimizer.state_dict()}) == folder
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before


@pytest.mark.parametrize("call", [0, 1, 2, 3])
def test_a_damaged_step_is_replaced_without_a_moment_lacking_a_good_checkpoint(tmp_path, monkeypatch, call):
    weights = _saved(tmp_path)
    _flip_byte(tmp_path / "checkpoints" / "step-000004" / "model.safetensors")
    _fail_on_call(monkeypatch, "replace", call)
    model, optimizer = _model(4)
    try:
        checkpoint.save(tmp_path, 4, 0, model, {"optimizer": optimizer.state_dict()})
    except Injected:
        pass
    step, state = _resumed(tmp_path)
    assert step in (2, 4) and all(torch.equal(state[k], weights[step][k]) for k in state)


@pytest.mark.parametrize("damage", ["deleted", "no manifest", "corrupt weights", "corrupt state"])
def test_resume_falls_back_to_the_newest_intact_checkpoint_and_says_so(tmp_path, caplog, damage):
    import shutil

    weights = _saved(tmp_path)
    newest = tmp_path / "checkpoints" / "step-000004"
    if damage == "deleted":
        shutil.rmtree(newest)
    elif damage == "no manifest":
        (newest / "manifest.json").unlink()
    else:
        _flip_byte(newest / ("model.safetensors" if damage == "corrupt weights" else "state.pt"))
    with caplog.at_level(logging.WARNING):
        step, state = _resumed(tmp_path)
    assert step == 2 and all(torch.equal(state[k], weights[2][k]) for k in state)
    assert "step-000004" in caplog.text and "step-000002" in caplog.text, caplog.text


def test_with_no_intact_checkpoint_left_resume_starts_again_and_says_so(tmp_path, caplog):
    _saved(tmp_path)
    for folder in (tmp_path / "checkpoints").glob("step-*"):
        _flip_byte(folder / "model.safetensors")
    with caplog.at_level(logging.WARNING):
        step, _ = _resumed(tmp_path)
    assert step == 0 and "starts again from step 0" in caplog.text, caplog.text


def test_a_step_saved_again_after_damage_is_written_anew(tmp_path):
    weights = _saved(tmp_path)
    _flip_byte(tmp_path / "checkpoints" / "step-000004" / "state.pt")
    model, optimizer = _model(4)
    checkpoint.save(tmp_path, 4, 0, model, {"optimizer": optimizer.state_dict()})
    step, state = _resumed(tmp_path)
    assert step == 4 and all(torch.equal(state[k], weights[4][k]) for k in state)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["LATEST", "step-000002", "step-000004"]


# --- one writer per folder (folder_lock.py) ------------------------------------------------------------------


def _hold_lock(folder, ready) -> None:
    """In a forked child: take ``folder``'s lock, say so, and keep it until killed."""
    import time

    from speccond.harness.training.folder_lock import writing

    with writing(folder):
        ready.set()
        time.sleep(120)


@pytest.fixture
def holder(tmp_path):
    """A second process holding the lock of tmp_path/out; yields (process, out). Killed at the end (an
    Event to release it would deadlock once a test has killed it while waiting)."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    ready = context.Event()
    process = context.Process(target=_hold_lock, args=(tmp_path / "out", ready))
    process.start()
    assert ready.wait(30)
    yield process, tmp_path / "out"
    process.kill()
    process.join(30)


def test_a_locked_folder_refuses_a_second_writer_naming_the_holder(holder):
    from speccond.harness.training.folder_lock import writing

    process, out = holder
    with pytest.raises(ValueError, match=rf"{out} is being written by another process \(pid {process.pid}, lock "):
        with writing(out):
            pass


def test_a_killed_holder_leaves_no_lock(holder):
    import signal

    from speccond.harness.training.folder_lock import writing

    process, out = holder
    os.kill(process.pid, signal.SIGKILL)
    process.join(30)
    with writing(out):  # the kernel released the dead process's flock
        assert (out / ".lock").read_text().strip() == str(os.getpid())


def test_compare_and_train_on_a_locked_folder_exit_2_naming_the_pid_and_write_nothing(holder, digits, capsys):
    from speccond.harness.cli import main

    process, out = holder
    before = sorted(p.name for p in out.rglob("*"))
    for argv in (["compare", "--task", "digits", *TINY_FLAGS, "--seeds", "1", "--out", str(out)],
                 ["train", "--set", "task=digits", *TINY_FLAGS, "--out", str(out)]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert f"{out} is being written by another process (pid {process.pid}" in err and "\n" not in err, err
    assert sorted(p.name for p in out.rglob("*")) == before == [".lock"]


# --- a kill before the first checkpoint ----------------------------------------------------------------------

TINY_FLAGS = [f"--set={s}" for s in ("depth=1", "epochs=1", "train_size=128", "test_size=50", "batch_size=32",
                                     "embed_dim=16", "patch_size=4", "warmup_steps=2")]


@pytest.fixture
def digits(digits_home, monkeypatch):
    monkeypatch.setenv("SPECCOND_DATA", str(digits_home))


def test_a_kill_before_the_first_checkpoint_does_not_duplicate_the_trackers_step_0_rows(tmp_path, digits):
    from speccond.harness.config.train_config import TrainConfig
    from speccond.harness.training.train import train

    config = TrainConfig().with_overrides([f.removeprefix("--set=") for f in TINY_FLAGS] + [
        "task=digits", "track_every=2", "checkpoint_every=100"])
    train(config, tmp_path / "whole", progress=False)
    assert train(config, tmp_path / "cut", stop_after=1, progress=False) == {}  # stopped as a kill would
    assert not (tmp_path / "cut" / "checkpoints").exists()
    train(config, tmp_path / "cut", progress=False)
    whole = (tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()
    cut = (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()
    assert any('"step": 0' in row for row in whole)
    assert cut == whole


# --- a run folder's own records are the authority ------------------------------------------------------------


@pytest.mark.parametrize("damage", ["LATEST deleted", "LATEST not UTF-8"])
def test_a_lost_or_unreadable_latest_resumes_from_the_newest_intact_checkpoint_and_says_so(tmp_path, caplog, damage):
    weights = _saved(tmp_path)
    latest = tmp_path / "checkpoints" / "LATEST"
    if damage == "LATEST deleted":
        latest.unlink()
    else:
        latest.write_bytes(b"\xff\xfe step-000004")
    with caplog.at_level(logging.WARNING):
        step, state = _resumed(tmp_path)
    assert step == 4 and all(torch.equal(state[k], weights[4][k]) for k in state)
    assert str(latest) in caplog.text and "step-000004" in caplog.text, caplog.text


KILLED = [f.removeprefix("--set=") for f in TINY_FLAGS if "batch_size" not in f] + [
    "task=digits", "batch_size=8", "checkpoint_every=10"]


@pytest.fixture
def killed(tmp_path, digits):
    """A digits run killed at step 12 of 16: a checkpoint at step 10, rows up to step 12."""
    from speccond.harness.config.train_config import TrainConfig
    from speccond.harness.training.train import train

    run = tmp_path / "run"
    assert train(TrainConfig().with_overrides(KILLED), run, stop_after=12, progress=False) == {}
    assert (run / "checkpoints" / "step-000010").is_dir() and (run / "metrics.jsonl").is_file()
    return run


def _tree(root) -> dict:
    return {str(p.relative_to(root)): (p.is_dir(), p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


@pytest.mark.parametrize("lost, sets, message", [
    ("config.json", ["lr=0.003"], r"holds a run's checkpoints \(step-000010\) and metrics.jsonl but no config.json, "
                                  r"so the config they were trained with is lost.*restore .*config.json"),
    ("config.json", [], r"but no config.json"),
    ("metrics.jsonl", [], r"holds checkpoints up to step-000010 but no metrics.jsonl, so resuming would lose the rows "
                          r"written before it; restore .*metrics.jsonl, or delete .*checkpoints"),
])
def test_a_run_that_lost_a_record_is_refused_not_taken_over(killed, capsys, lost, sets, message):
    import re

    from speccond.harness.cli import main

    (killed / lost).unlink()
    before = _tree(killed.parent)
    assert main(["train", "--out", str(killed), *[f"--set={s}" for s in KILLED + sets]]) == 2
    err = capsys.readouterr().err.strip()
    assert re.search(message, err) and "\n" not in err, err
    assert _tree(killed.parent) == before  # nothing written, no lock taken


def test_compare_refuses_a_run_folder_that_lost_its_config_before_writing(killed, capsys):
    """compare's runs are checked before its folder is locked: the one that lost its config.json is named."""
    from speccond.harness.cli import main

    out = killed.parent / "cmp"
    run = out / "baseline" / "seed-0"
    run.parent.mkdir(parents=True)
    killed.rename(run)
    (run / "config.json").unlink()
    before = _tree(killed.parent)
    flags = [f"--set={s}" for s in KILLED if not s.startswith("task=")]
    assert main(["compare", "--task", "digits", "--methods", "baseline", "--seeds", "1", *flags, "--out", str(out)]) == 2
    assert f"{run} holds a run's checkpoints" in capsys.readouterr().err
    assert _tree(killed.parent) == before


def test_a_report_of_runs_none_of_which_finished_names_no_reference(killed):
    """No group has a finished run, so there is no reference group: the report says so instead of "against None"."""
    from speccond.harness.reporting.report import write_report

    out = killed.parent / "cmp"
    (out / "baseline").mkdir(parents=True)
    killed.rename(out / "baseline" / "seed-0")
    markdown = write_report([out], out).markdown
    assert "None" not in markdown and "Difference: none yet, as no group has a finished or diverged run" in markdown

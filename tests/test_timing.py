"""timing.json (harness/training/timing.py): a run's wall time over every resume, recorded at each checkpoint, and
marked incomplete when a kill lost some of it, so that no reader reports an undercount as a wall time.

Every run here is a real training run of the tiny ViT of test_compare (12 steps, a checkpoint every 6).
"""
from __future__ import annotations

import functools
import json

import pytest

from speccond.harness.protocol.compare import train_timed
from speccond.harness.training.timing import read_timing, recorded_seconds
from speccond.harness.training.train import train
from tests import test_compare
from tests.test_compare import TINY, needs_data

data_home = test_compare.data_home  # the fixture that prepares Fashion-MNIST, module-scoped


class Killed(Exception):
    """Stands for a SIGKILL: training stops where it is, and train_timed records nothing more."""


def killed_after_checkpoint(step: int):
    """A trainer that dies right after checkpoint ``step`` has been recorded, as a kill would."""
    def trainer(config, run_dir, progress, on_checkpoint):
        def record_then_die(reached: int) -> None:
            on_checkpoint(reached)
            if reached == step:
                raise Killed
        return train(config, run_dir, progress=progress, on_checkpoint=record_then_die)
    return trainer


@needs_data
def test_a_ctrl_c_keeps_the_time_spent_and_a_finished_run_asked_again_adds_nothing(data_home, tmp_path):
    run = tmp_path / "run"
    assert train_timed(TINY, run, progress=False, trainer=functools.partial(train, stop_after=6)) == {}  # Ctrl-C
    stopped = read_timing(run)
    assert stopped["step"] == 6 and stopped["seconds"] > 0 and stopped["complete"]
    final = train_timed(TINY, run, progress=False)
    finished = read_timing(run)
    assert finished["step"] == final["step"] == 12 and finished["seconds"] > stopped["seconds"]
    assert finished["complete"] and recorded_seconds(run) == finished["seconds"]
    assert train_timed(TINY, run, progress=False) == final  # finished: asked again, nothing added
    assert read_timing(run) == finished


@needs_data
def test_a_kill_loses_only_the_time_since_the_last_checkpoint(data_home, tmp_path):
    run = tmp_path / "run"
    with pytest.raises(Killed):
        train_timed(TINY, run, progress=False, trainer=killed_after_checkpoint(6))
    at_kill = read_timing(run)
    assert at_kill["step"] == 6 and at_kill["seconds"] > 0 and at_kill["complete"]
    train_timed(TINY, run, progress=False)  # resumes from checkpoint 6, which the record reaches
    resumed = read_timing(run)
    assert resumed["step"] == 12 and resumed["complete"] and resumed["seconds"] > at_kill["seconds"]


@needs_data
def test_a_resume_past_the_recorded_time_marks_it_incomplete_for_good(data_home, tmp_path):
    run = tmp_path / "run"
    train(TINY, run, progress=False, stop_after=6)  # trained with no timing at all: a kill before any record
    train_timed(TINY, run, progress=False)
    lost = read_timing(run)
    assert lost["step"] == 12 and not lost["complete"] and lost["seconds"] > 0
    assert recorded_seconds(run) is None  # readers leave it out of wall-time figures
    train_timed(TINY, run, progress=False)
    assert read_timing(run) == lost  # asked again: still incomplete, nothing added

    from speccond.harness.training.runs import read_run

    record = read_run(run)
    assert record.status == "finished" and record.seconds is None


def test_a_file_written_before_complete_existed_reads_as_complete_and_a_damaged_one_as_incomplete(tmp_path, caplog):
    """A damaged timing.json names itself and leaves its run's wall time out; it blocks nothing."""
    (tmp_path / "timing.json").write_text(json.dumps({"seconds": 12.5, "step": 1266}))
    assert read_timing(tmp_path) == {"seconds": 12.5, "step": 1266, "complete": True}
    assert recorded_seconds(tmp_path) == 12.5
    assert read_timing(tmp_path / "none") is None and recorded_seconds(tmp_path / "none") is None
    for damaged in ('{"seconds": 12.5}', '{"seconds": 12.5, "st', "[1, 2]"):
        (tmp_path / "timing.json").write_text(damaged)
        caplog.clear()
        with caplog.at_level("WARNING"):
            assert read_timing(tmp_path) == {"seconds": 0.0, "step": -1, "complete": False}
            assert recorded_seconds(tmp_path) is None
        assert f"{tmp_path / 'timing.json'}: unreadable" in caplog.text

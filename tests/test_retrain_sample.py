"""scripts/retrain_sample.py, the check that a published run still regenerates every stored figure.

A tiny comparison on the digits data stands in for a published report: retraining its run from the
recorded command must pass, a changed stored digit must fail, and a report that keeps dated re-runs side
by side (docs/results/main-job) is read through the re-run it names.
"""
from __future__ import annotations

import json
import shutil
import sys

import pytest

from tests.scripts import load_script

SETS = ["task=digits", "embed_dim=16", "depth=1", "num_heads=2", "patch_size=4", "epochs=1", "train_size=64",
        "test_size=64", "batch_size=16", "warmup_steps=1", "checkpoint_every=4"]
LABEL = "spectral lam=10"


@pytest.fixture(scope="module")
def published(digits_home, tmp_path_factory):
    """A report folder as docs/results holds one: results.json and results.md of baseline vs lam = 10."""
    import torch

    from speccond.harness.cli import main

    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECCOND_DATA", str(digits_home))
        runs = tmp_path_factory.mktemp("published") / "runs"
        arguments = ["compare", "--out", str(runs), "--seeds", "1", *[f"--set={s}" for s in SETS]]
        patch.setattr(sys, "argv", ["speccond", *arguments])  # the command the runs record, as the CLI's
        assert main(arguments) == 0
    report = tmp_path_factory.mktemp("docs") / "tiny-digits"
    report.mkdir()
    for name in ("results.json", "results.md"):
        shutil.copy(runs / name, report / name)
    return report


def retrain(report, *extra, out):
    script = load_script("retrain_sample")
    argv = sys.argv
    sys.argv = ["retrain_sample.py", str(report), LABEL, "--out", str(out), *extra]
    try:
        return script.main()
    finally:
        sys.argv = argv


def test_a_run_retrained_from_its_recorded_command_regenerates_every_figure(published, digits_data, tmp_path, capsys):
    assert retrain(published, out=tmp_path) == 0
    assert "every stored figure regenerated" in capsys.readouterr().out


def test_a_changed_stored_digit_is_reported_as_a_difference(published, digits_data, tmp_path, capsys):
    changed = tmp_path / "changed"
    shutil.copytree(published, changed)
    results = json.loads((changed / "results.json").read_text())
    run = next(r for r in results["runs"] if r["group"] == LABEL and r["seed"] == 0)
    run["loss"] += 1e-12  # one digit far down
    (changed / "results.json").write_text(json.dumps(results))
    assert retrain(changed, out=tmp_path / "out") == 1
    assert "DIFFERS (loss)" in capsys.readouterr().out


def test_a_report_of_dated_reruns_is_read_through_the_named_rerun(published, digits_data, tmp_path, capsys):
    folder = tmp_path / "main-job"
    folder.mkdir()
    report = json.loads((published / "results.json").read_text())
    (folder / "results.json").write_text(json.dumps({"reruns": [{"name": "first", "report": {"runs": []}},
                                                                 {"name": "second", "report": report}]}))
    page = (published / "results.md").read_text().replace("\n## ", "\n### ")  # each re-run's report one level down
    (folder / "results.md").write_text(f"# re-runs\n\n## first\n\nnothing\n\n## second\n\n{page}")
    assert retrain(folder, "--rerun", "second", out=tmp_path / "out") == 0
    with pytest.raises(SystemExit, match="--rerun must name one of this report's re-runs: first, second"):
        retrain(folder, "--rerun", "third", out=tmp_path / "out")
    with pytest.raises(SystemExit, match="got None"):
        retrain(folder, out=tmp_path / "out")
    capsys.readouterr()

"""speccond tune (harness/protocol/tuning.py): the pre-registered protocol (docs/RESULTS.md) on
scikit-learn's digits, seconds per run."""
from __future__ import annotations

import json
import math
import os
import sys

import pytest
import torch

from speccond.diagnostics.records import read_metrics
from speccond.harness.cli import main
from speccond.harness.config.train_config import TrainConfig
from speccond.harness.protocol import tuning

TWO_EPOCHS = ["--task", "digits", "--preset", "quick", "--val-size", "144", "--set", "epochs=2"]


@pytest.fixture(scope="module", autouse=True)
def data_home(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECCOND_DATA", str(tmp_path_factory.getbasetemp() / "data"))
        from speccond import data

        data.prepare("digits")
        yield


@pytest.fixture
def one_thread():
    """The sequential runs use one thread, as every --jobs worker does here, so their sums are the same."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_the_tuning_protocol_chooses_on_validation_and_scores_test_once(tmp_path):
    """Tuning runs score only the validation split; the choice is the best mean validation accuracy (ties to
    the smaller lr); the final runs use new seeds at the chosen lr and score test once; holm.json holds the
    figures holm.md shows."""
    out = tmp_path / "tune"
    assert main(["tune", *TWO_EPOCHS, "--lrs", "1e-3,3e-3", "--tuning-seeds", "1", "--final-seeds", "2",
                 "--arms", "baseline,spectral:corrected=q", "--out", str(out)]) == 0
    assert main(["tune", "--task", "digits", "--val-size", "144", "--arms", "baseline,lora", "--out", str(out)]) == 2
    choice = json.loads((out / "choice.json").read_text())
    for arm in ("baseline", "spectral-corrected=q"):
        scores = {float(lr): values for lr, values in choice[arm]["validation"].items()}
        assert choice[arm]["lr"] == max(sorted(scores), key=lambda lr: (sum(scores[lr]), -lr))
        for lr in scores:
            rows = read_metrics(out / "tune" / f"{arm}-lr={lr:g}" / "seed-0" / "metrics.jsonl")
            finals = [r for r in rows if r["kind"] == "eval"]
            assert [r["split"] for r in finals] == ["val"] and finals[0]["accuracy"] == scores[lr][0]
        for seed in (100, 101):
            run = out / "final" / arm / f"seed-{seed}"
            config = json.loads((run / "config.json").read_text())["config"]
            assert config["lr"] == choice[arm]["lr"] and config["seed"] == seed and config["tuning"] == 0
            assert [r.get("split", "test") for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "eval"] == ["test"]
    record = json.loads((out / "final" / "holm.json").read_text())
    assert record["owed"] == 0 and record["reference"] == "baseline" and record["metric"] == "accuracy"
    (comparison,) = record["comparisons"]
    figures = {arm: record["arms"][arm]["figures"] for arm in ("baseline", "spectral-corrected=q")}
    differences = [figures["spectral-corrected=q"][s] - figures["baseline"][s] for s in ("100", "101")]
    assert comparison["arm"] == "spectral-corrected=q" and comparison["m"] == 1
    assert math.isclose(comparison["difference"]["mean"], sum(differences) / 2)
    assert comparison["holm"] == comparison["p"]  # one comparison: Holm leaves p as it is
    assert "Holm p" in (out / "final" / "holm.md").read_text() and (out / "tuning.png").is_file()
    with pytest.raises(ValueError, match="tuning=1 scores the validation split, so it needs val_size > 0"):
        TrainConfig().replaced(tuning=1)


def test_tuning_runs_go_seed_by_seed_so_a_cut_leaves_the_arms_level(tmp_path):
    arms = {"baseline": TrainConfig().replaced(method="baseline", val_size=10), "spectral": TrainConfig().replaced(method="spectral", val_size=10)}
    jobs = tuning.tuning_jobs(arms, [1e-3, 3e-3], 2, tmp_path)
    assert [(j.config.run.seed, j.config.optimizer.lr, j.config.method.name) for j in jobs] == [
        (seed, lr, method) for seed in (0, 1) for lr in (1e-3, 3e-3) for method in ("baseline", "spectral")]
    assert all(j.config.run.tuning == 1 for j in jobs)
    finals = tuning.final_jobs(arms, {"baseline": {"lr": 3e-3}, "spectral": {"lr": 1e-3}}, 2, tmp_path)
    assert [(j.config.run.seed, j.config.method.name, j.config.optimizer.lr) for j in finals] == [
        (100, "baseline", 3e-3), (100, "spectral", 1e-3), (101, "baseline", 3e-3), (101, "spectral", 1e-3)]


def test_the_report_stage_of_an_unfinished_protocol_shows_what_ran_and_chooses_nothing(tmp_path):
    out = tmp_path / "tune"
    arms = ["--arms", "baseline,spectral", "--lrs", "1e-3"]
    assert main(["tune", *TWO_EPOCHS, *arms, "--tuning-seeds", "1", "--stage", "tune", "--out", str(out)]) == 0
    (out / "choice.json").unlink()  # the one-seed protocol chose; the two-seed one has not yet
    assert main(["tune", *TWO_EPOCHS, *arms, "--tuning-seeds", "2", "--stage", "report", "--out", str(out)]) == 0
    table = (out / "tuning.md").read_text()
    assert "no choice yet" in table and table.count("(1 of 2 seeds)") == 2
    assert not (out / "choice.json").exists() and not (out / "tune" / "baseline-lr=0.001" / "seed-1").exists()
    scores = tuning.tuning_scores({"baseline": None, "spectral": None}, [1e-3], 2, out)
    with pytest.raises(ValueError, match="no choice before every tuning run finished; unfinished: baseline lr=0.001"):
        tuning.choose(scores)


def test_the_tuning_table_and_plot_name_the_figure_the_task_is_tuned_on(tmp_path, monkeypatch):
    """A detection task is tuned on box AP: the table and the plot's axis say so, not "accuracy"."""
    import matplotlib.axes

    scores = {"baseline": {"0.001": [0.40], "0.003": [0.41]}, "spectral": {"0.001": [0.38], "0.003": [0.35]}}
    labels, original = [], matplotlib.axes.Axes.set
    monkeypatch.setattr(matplotlib.axes.Axes, "set",
                        lambda axis, **settings: labels.append(settings.get("ylabel")) or original(axis, **settings))
    choice = tuning.write_tuning(scores, tmp_path, "box_ap")
    assert choice["baseline"]["lr"] == 0.003 and choice["spectral"]["lr"] == 0.001
    assert "Mean final validation box AP, %" in (tmp_path / "tuning.md").read_text()
    tuning.write_tuning(scores, tmp_path)
    assert "Mean final validation accuracy, %" in (tmp_path / "tuning.md").read_text()
    assert labels == ["final validation box AP, %", "final validation accuracy, %"]


def test_the_final_table_names_its_figure_box_ap_for_detection():
    from speccond.harness.reporting.final_table import final_table

    figures = {"baseline": {100: 0.40, 101: 0.41}, "spectral": {100: 0.38, 101: 0.37}}
    text, record = final_table(figures, {"baseline": 3e-3, "spectral": 1e-3}, "baseline", "box_ap", 2, "# t", "d.")
    assert "| test box AP, % |" in text and record["metric"] == "box_ap"


def test_runs_side_by_side_give_the_figures_of_runs_one_at_a_time_and_say_so(tmp_path, one_thread):
    """--jobs 2 trains in two processes of one thread each: the same final rows, digit for digit, as the
    same runs trained one at a time with one thread; config.json records the parallelism."""
    arms = ["--arms", "baseline,spectral", "--lrs", "1e-3,3e-3", "--tuning-seeds", "1", "--stage", "tune"]
    assert main(["tune", *TWO_EPOCHS, *arms, "--jobs", "2", "--out", str(tmp_path / "pool")]) == 0
    assert main(["tune", *TWO_EPOCHS, *arms, "--out", str(tmp_path / "alone")]) == 0
    for run in sorted((tmp_path / "pool" / "tune").glob("*/seed-0")):
        alone = tmp_path / "alone" / run.relative_to(tmp_path / "pool")
        finals = [[r for r in read_metrics(d / "metrics.jsonl") if r["kind"] == "eval"] for d in (run, alone)]
        assert finals[0] == finals[1] and finals[0]
        arithmetic = [json.loads((d / "config.json").read_text())["arithmetic"] for d in (run, alone)]
        assert arithmetic[0]["parallel_jobs"] == 2 and "parallel_jobs" not in arithmetic[1]
        assert arithmetic[0]["threads"] == arithmetic[1]["threads"] == 1
    assert json.loads((tmp_path / "pool" / "choice.json").read_text()) == json.loads(
        (tmp_path / "alone" / "choice.json").read_text())


def test_the_protocol_names_the_registered_arms_and_tasks_speccond_tune_accepts():
    """The fair protocol's arms (harness/protocol/experiments/fair.py) are those registered in docs/RESULTS.md
    (nine on the full protocol, five on the reduced), each a method the harness knows with settings TrainConfig
    accepts, and every task of every tier parses as speccond tune arguments (a typo would only show hours in)."""
    from pathlib import Path

    from speccond.harness.cli import build_parser
    from speccond.harness.methods import METHODS
    from speccond.harness.protocol.experiments import protocol
    from speccond.harness.protocol.experiments.runner import Runner

    registered = ["baseline", "spectral", "spectral-corrected=q", "spectral-target_kappa=2", "spectral-svd", "qk-norm",
                  "sigma-reparam", "sigma-reparam-all", "spectral-norm"]
    names = []
    runner = Runner(protocol("fair"), Path(__file__).resolve().parents[1], peer="qk-norm")  # as if the full protocol had chosen it
    for tier, count in (("tier1", 4), ("tier2", 6), ("language", 8)):
        lines = runner.listing(tier)
        assert len(lines) == count
        for line in lines:
            name, *arguments = line.split()
            if arguments[0] == "--choice-of":  # the protocol's own: take that task's choice (tune --choice FILE)
                shared, arguments = arguments[1], arguments[2:]
                assert tier == "language" and name.endswith("-pre1") and shared == name.replace("-pre1", "-pre0")
            args = build_parser().parse_args(["tune", "--out", f"runs/tune-{name}", *arguments])
            arms = [tuning.arm_config(TrainConfig(), arm) for arm in args.arms.split(",")]
            assert all(arm.partition(":")[0] in METHODS for arm in args.arms.split(","))
            xca = (args.model or "").startswith("xcit")  # XCA normalises q and k: qk-norm does not apply
            expected = registered if len(arms) == 9 else registered[:4] + ["sigma-reparam" if xca else "qk-norm"]
            assert [arm_name for arm_name, _ in arms] == expected and args.val_size > 0
            if tier == "language":  # each arm fine-tunes its own pre-trained encoder, of the seed the name says
                assert all(config.model.init_from == f"runs/protocol-mlm/{arm_name}/seed-{name[-1]}" for arm_name, config in arms)
                assert args.task.startswith("glue-") and args.tuning_seeds == 1
            names.append(name)
    assert len(names) == len(set(names))


def test_the_reduced_protocol_takes_the_peer_that_leads_the_baseline_most_on_validation(tmp_path):
    """docs/RESULTS.md's rule (tuning.best_peer): each peer's mean validation figure at its chosen lr minus the
    baseline's, averaged over the full-protocol tasks; ties to the earlier peer; test scores play no part."""
    def choice(**figures):  # arm -> validation figure at lr 1e-3, the chosen lr (another lr scores higher, unchosen)
        return {arm: {"lr": 0.001, "validation": {"0.001": [value, value], "0.003": [0.99, 0.99]}}
                for arm, value in figures.items()}

    peers = {"qk-norm": 0.80, "sigma-reparam": 0.70, "sigma-reparam-all": 0.70, "spectral-norm": 0.79}
    first = choice(baseline=0.78, **peers)
    second = choice(baseline=0.50, **{**{arm: 0.45 for arm in peers}, "spectral-norm": 0.54})
    assert tuning.best_peer([first]) == "qk-norm"  # +2 points against spectral-norm's +1
    assert tuning.best_peer([first, second]) == "spectral-norm"  # mean lead (1 + 4) / 2 beats (2 - 5) / 2
    tied = choice(baseline=0.5, **{arm: 0.6 for arm in peers})
    assert tuning.best_peer([tied]) == "qk-norm"  # ties: the registered order
    with pytest.raises(ValueError, match="missing: spectral-norm"):
        tuning.best_peer([choice(baseline=0.5, **{arm: 0.6 for arm in list(peers)[:3]})])

    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "best_peer.py"
    for index, record in enumerate((first, second)):
        (tmp_path / f"{index}.json").write_text(json.dumps(record))
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "0.json"), str(tmp_path / "1.json")],
                          capture_output=True, text=True, check=True)
    assert done.stdout == "spectral-norm\n" and "spectral-norm: validation lead over the baseline +1.00, +4.00" in done.stderr
    (tmp_path / "bad.json").write_text(json.dumps({"baseline": {"lr": 0.01, "validation": {"0.001": [0.5]}}}))
    refused = subprocess.run([sys.executable, str(script), str(tmp_path / "bad.json")], capture_output=True, text=True)
    assert refused.returncode == 1 and refused.stdout == ""
    assert "not a choice (KeyError: 'no validation figures at the chosen lr 0.01')" in refused.stderr


def _protocol(action: str, stage: str, checkout) -> list[str]:
    """``speccond protocol list|plan fair STAGE``'s lines in ``checkout``, with no runs/ and only the
    docs/results/ the test puts there (a fresh clone's view), without BEST_PEER."""
    from speccond.harness.protocol.experiments import protocol
    from speccond.harness.protocol.experiments.runner import Runner

    runner = Runner(protocol("fair"), checkout)
    return runner.listing(stage) if action == "list" else runner.plan(stage)


def test_a_script_without_speccond_on_its_python_says_how_to_run_it_before_anything_runs(tmp_path):
    """The scripts run the Python on PATH or SPECCOND_PYTHON (scripts/python_env.sh), never .venv by path;
    one that cannot import speccond is a one-line error, exit 2, with nothing written."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    for script in ("protocol.sh", "protocol64.sh"):
        done = subprocess.run(["sh", str(root / "scripts" / script), "plan"], capture_output=True, text=True,
                              env={**os.environ, "SPECCOND_PYTHON": str(tmp_path / "no-python")}, cwd=tmp_path)
        assert done.returncode == 2 and done.stdout == "", done
        assert done.stderr.count("\n") == 1 and "cannot import speccond" in done.stderr
        assert "./run script" in done.stderr and "SPECCOND_PYTHON" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_before_the_full_protocol_has_chosen_the_reduced_tasks_name_an_arm_speccond_tune_refuses(tmp_path):
    """Without both choice.json files and without BEST_PEER, the reduced tasks' peer is "undecided", so a
    reduced task cannot start with a guessed peer."""
    lines = _protocol("list", "reduced", checkout=tmp_path)
    assert len(lines) == 2 and all(line.endswith(",undecided") for line in lines)
    with pytest.raises(ValueError, match="undecided"):
        tuning.arm_config(TrainConfig(), "undecided")


def test_a_fresh_clone_resumes_the_protocol_from_its_committed_results(tmp_path):
    """The runs are not committed, the choices and final tables are (docs/results/protocol-NAME/): a task
    whose committed final table owes no run is skipped, one with a committed choice resumes at its final runs
    (speccond tune --choice), the others tune; the reduced tasks take the peer of the committed choices."""
    import shutil
    from pathlib import Path

    docs = Path(__file__).resolve().parents[1] / "docs" / "results"
    published = tmp_path / "docs" / "results"
    for name in ("fashion-mnist", "cifar10"):
        (published / f"protocol-{name}").mkdir(parents=True)
        shutil.copy(docs / f"protocol-{name}" / "choice.json", published / f"protocol-{name}" / "choice.json")
    (published / "protocol-fashion-mnist" / "final").mkdir()
    record = {"owed": 0}
    (published / "protocol-fashion-mnist" / "final" / "holm.json").write_text(json.dumps(record))
    (published / "protocol-lra-listops" / "kept" / "tune" / "baseline-lr=0.001" / "seed-0").mkdir(parents=True)
    choices = [tuning.read_choice(published / f"protocol-{name}" / "choice.json") for name in ("fashion-mnist", "cifar10")]
    peer = tuning.best_peer(choices)
    assert [line.rsplit(",", 1)[1] for line in _protocol("list", "reduced", checkout=tmp_path)] == [
        peer, "sigma-reparam" if peer == "qk-norm" else peer]  # XCiT's XCA takes sigma-reparam for qk-norm
    assert _protocol("plan", "tier1", checkout=tmp_path) == [
        "fashion-mnist: skip, every final run is in docs/results/protocol-fashion-mnist/final",
        "cifar10: final runs from the committed docs/results/protocol-cifar10/choice.json (0 finished final runs kept)",
        "lra-listops: tuning (1 finished tuning runs kept in docs/results/protocol-lra-listops/kept), then final runs",
        "detection: tuning (0 finished tuning runs kept in docs/results/protocol-detection/kept), then final runs"]
    record["owed"] = 3  # a final table with runs still owed is resumed, not skipped
    (published / "protocol-fashion-mnist" / "final" / "holm.json").write_text(json.dumps(record))
    assert _protocol("plan", "full", checkout=tmp_path)[0] == (
        "fashion-mnist: final runs from the committed docs/results/protocol-fashion-mnist/choice.json "
        "(0 finished final runs kept)")
    encoder = published / "protocol-mlm" / "kept" / "baseline" / "seed-1" / "encoder.safetensors"
    encoder.parent.mkdir(parents=True)
    encoder.write_bytes(b"")  # plan counts the kept encoders; restoring them is tests/test_language.py's
    language = _protocol("plan", "language", checkout=tmp_path)
    assert language[0] == (
        "pre-training: 1 of 10 encoders kept in docs/results/protocol-mlm/kept, 0 finished in runs/protocol-mlm; "
        "the rest are trained first")
    assert language[1].startswith("glue-sentiment-pre0: tuning (0 finished tuning runs kept")
    assert language[5] == ("glue-sentiment-pre1: final runs from the lrs glue-sentiment-pre0 chooses (no tuning) "
                           "(0 finished final runs kept)")  # RESULTS' tuning cut: seed 1 is not tuned


def test_an_arms_pre_trained_start_is_in_its_config_not_its_name():
    name, config = tuning.arm_config(TrainConfig(), "spectral:corrected=q+init_from=runs/mlm/spectral-corrected=q/seed-1")
    assert name == "spectral-corrected=q" and config.method.corrected == "q"
    assert config.model.init_from == "runs/mlm/spectral-corrected=q/seed-1" and config.method.name == "spectral"


def test_a_tracked_qk_norm_arm_trains_and_reports_without_the_spectra_its_weights_cannot_tell(tmp_path):
    """qk-norm's LayerNorms act after W_q and W_k, so projection_spectra refuses it: the tracker leaves the
    spectra out (entropy too) instead of failing the run, and the report shows no kappa for it."""
    out = tmp_path / "tune"
    assert main(["tune", *TWO_EPOCHS, "--arms", "baseline,qk-norm", "--lrs", "1e-3", "--tuning-seeds", "1",
                 "--final-seeds", "2", "--set", "track_every=4", "--out", str(out)]) == 0
    rows = read_metrics(out / "final" / "qk-norm" / "seed-100" / "metrics.jsonl")
    assert not [r for r in rows if r["kind"] in ("spectra", "entropy")] and [r for r in rows if r["kind"] == "eval"]
    assert [r for r in read_metrics(out / "final" / "baseline" / "seed-100" / "metrics.jsonl") if r["kind"] == "spectra"]
    groups = {g["label"]: g for g in json.loads((out / "final" / "results.json").read_text())["groups"]}
    assert groups["qk-norm"]["kappa_qkv"] is None and groups["baseline"]["kappa_qkv"] > 1
    # A report says which split its runs scored: test for the final runs, validation for the tuning runs.
    final = (out / "final" / "results.md").read_text()
    assert "Accuracy: final test accuracy" in final and "final test loss" in final and "validation accuracy, mean" not in final
    assert main(["report", str(out / "tune"), "--out", str(tmp_path / "tuning-report")]) == 0
    tuned = (tmp_path / "tuning-report" / "results.md").read_text()
    assert "Accuracy: final validation accuracy" in tuned and "final validation loss" in tuned and "test accuracy" not in tuned
    assert "held out of the training data (tuning runs: test not scored)" in tuned


def test_a_committed_choice_resumes_the_final_runs_without_the_tuning_runs_and_is_checked_first(tmp_path, one_thread,
                                                                                               capsys):
    """--choice (tuning.adopt_choice): a fresh clone has the committed choice.json but not the tuning runs. The
    final runs then train at the committed choice, with the figures the original protocol got; a choice that
    does not fit the protocol (other arms, other lrs or seeds, an lr its own figures do not choose) or that
    differs from the folder's own is refused before anything is written."""
    arms = ["--arms", "baseline,spectral:corrected=q", "--lrs", "1e-3,3e-3", "--tuning-seeds", "1", "--final-seeds", "1"]
    assert main(["tune", *TWO_EPOCHS, *arms, "--out", str(tmp_path / "first")]) == 0
    committed = tmp_path / "committed.json"
    committed.write_text((tmp_path / "first" / "choice.json").read_text())
    fresh = tmp_path / "fresh"
    assert main(["tune", *TWO_EPOCHS, *arms, "--choice", str(committed), "--out", str(fresh)]) == 0
    assert not (fresh / "tune").exists()  # no tuning run was trained
    assert json.loads((fresh / "choice.json").read_text()) == json.loads(committed.read_text())
    assert (fresh / "tuning.md").read_text() == (tmp_path / "first" / "tuning.md").read_text()
    figures = [json.loads((out / "final" / "holm.json").read_text())["arms"] for out in (tmp_path / "first", fresh)]
    assert figures[0] == figures[1]
    assert main(["tune", *TWO_EPOCHS, *arms, "--choice", str(committed), "--stage", "report", "--out", str(fresh)]) == 0
    assert json.loads((fresh / "final" / "holm.json").read_text())["arms"] == figures[0]

    record = json.loads(committed.read_text())
    chosen = record["baseline"]["lr"]
    unchosen = next(float(lr) for lr in record["baseline"]["validation"] if float(lr) != chosen)
    cases = [  # (the committed choice, arguments that replace the protocol's, what the refusal says)
        (record, ["--arms", "baseline"], "its arms are baseline, spectral-corrected=q, this protocol's are baseline"),
        (record, ["--lrs", "1e-3"], "expected 1 at each of 0.001"),
        (record, ["--tuning-seeds", "2"], "expected 2 at each of 0.001, 0.003"),
        ({**record, "baseline": {**record["baseline"], "lr": unchosen}}, [],
         f"baseline chose lr {unchosen}, but its validation figures choose {chosen:g}"),
    ]
    capsys.readouterr()
    for index, (content, replaced, message) in enumerate(cases):
        path, out = tmp_path / f"case-{index}.json", tmp_path / f"refused-{index}"
        path.write_text(json.dumps(content))
        assert main(["tune", *TWO_EPOCHS, *arms, *replaced, "--choice", str(path), "--out", str(out)]) == 2
        error = capsys.readouterr().err
        assert "does not fit this protocol" in error and message in error, error
        assert not out.exists()
    (fresh / "choice.json").write_text(json.dumps({**record, "baseline": {**record["baseline"], "validation": {
        lr: [0.0] for lr in record["baseline"]["validation"]}}}))
    before = (fresh / "choice.json").read_text()
    assert main(["tune", *TWO_EPOCHS, *arms, "--choice", str(committed), "--out", str(fresh)]) == 2
    assert "holds another choice than --choice" in capsys.readouterr().err
    assert (fresh / "choice.json").read_text() == before


def test_the_language_tasks_of_pre_training_seed_1_take_the_choice_made_from_seed_0(tmp_path):
    """protocol.sh lists glue-*-pre1 with --choice-of glue-*-pre0 (RESULTS' protocol: a tuning cut): the arms
    differ only in the encoder they start from (init_from, in the config, not in the name), so seed 0's
    choice.json fits seed 1's protocol and adopt_choice takes it as it is."""
    def arms(seed):
        return dict(tuning.arm_config(TrainConfig(), f"{method}:init_from=runs/protocol-mlm/{name}/seed-{seed}")
                    for method, name in (("baseline", "baseline"), ("spectral", "spectral")))

    seed_0 = {"baseline": {"lr": 0.003, "validation": {"0.001": [0.70], "0.003": [0.72]}},
              "spectral": {"lr": 0.001, "validation": {"0.001": [0.61], "0.003": [0.60]}}}
    path = tmp_path / "pre0.json"
    path.write_text(json.dumps(seed_0))
    adopted = tuning.adopt_choice(path, arms(1), [1e-3, 3e-3], 1, tmp_path / "pre1")
    assert {name: choice["lr"] for name, choice in adopted.items()} == {"baseline": 0.003, "spectral": 0.001}
    assert tuning.read_choice(tmp_path / "pre1" / "choice.json") == adopted  # seed 1's final runs read this file


def test_kept_tuning_runs_restore_on_a_fresh_machine_as_finished_and_nothing_is_overwritten(tmp_path, one_thread):
    """harness/protocol/kept_runs.py: the records of finished tuning runs (config.json, metrics.jsonl, timing.json)
    kept in the repository come back as finished runs, so speccond tune trains none of them again and
    chooses as the machine that trained them did; keeping refuses other records of a run it already keeps,
    and restoring leaves a run the folder already has alone."""
    from speccond.harness.protocol import kept_runs

    arms = ["--arms", "baseline,spectral", "--lrs", "1e-3", "--tuning-seeds", "1", "--stage", "tune"]
    first, kept, fresh = tmp_path / "first", tmp_path / "kept", tmp_path / "fresh"
    assert main(["tune", *TWO_EPOCHS, *arms, "--out", str(first)]) == 0
    assert [run.relative_to(first) for run in kept_runs.keep(first, kept)] == [
        tuning.tuning_run(first, name, 1e-3, 0).relative_to(first) for name in ("baseline", "spectral")]
    assert kept_runs.keep(first, kept) == []  # already kept, with the same contents
    assert sorted(path.name for path in (kept / "tune" / "baseline-lr=0.001" / "seed-0").iterdir()) == [
        "config.json", "metrics.jsonl", "timing.json"]  # no checkpoint: megabytes a run
    assert len(kept_runs.restore(kept, fresh)) == 2
    assert main(["tune", *TWO_EPOCHS, *arms, "--out", str(fresh)]) == 0
    assert not list(fresh.glob("tune/*/seed-0/checkpoints"))  # nothing was trained
    assert (fresh / "choice.json").read_text() == (first / "choice.json").read_text()
    assert kept_runs.restore(kept, fresh) == []  # the folder has them now

    metrics = kept / "tune" / "spectral-lr=0.001" / "seed-0" / "metrics.jsonl"
    metrics.write_text(metrics.read_text().replace('"kind": "eval"', '"kind": "eval", "edited": 1'))
    assert main(["tune", *TWO_EPOCHS, "--arms", "baseline,spectral", "--lrs", "1e-3,3e-3", "--tuning-seeds", "1",
                 "--stage", "tune", "--out", str(first)]) == 0  # two more finished runs to keep
    with pytest.raises(ValueError, match="keeps other records of tune/spectral-lr=0.001/seed-0 than"):
        kept_runs.keep(first, kept)
    assert not (kept / "tune" / "baseline-lr=0.003").exists()  # refused before copying anything
    ours = fresh / "tune" / "spectral-lr=0.001" / "seed-0" / "metrics.jsonl"
    before = ours.read_text()
    kept_runs.restore(kept, fresh)
    assert ours.read_text() == before
    (kept / "tune" / "baseline-lr=0.001" / ".seed-1.partial").mkdir()  # a copy cut short is no run
    assert len(kept_runs.tuning_runs(kept)) == 2


def test_kept_final_runs_restore_as_finished_and_report_the_same_figures_and_kappa(tmp_path, one_thread):
    """A final run is kept too (its records and kappa.json, the kappa its report computes from the checkpoint
    that is not kept): restored on a fresh machine with the committed choice, no run is trained again and
    the final report gives the same figures, kappa at the end included, as the machine that trained them."""
    from speccond.harness.protocol import kept_runs
    from speccond.harness.training.runs import read_run

    arms = ["--arms", "baseline,spectral", "--lrs", "1e-3", "--tuning-seeds", "1", "--final-seeds", "2"]
    first, kept, fresh = tmp_path / "first", tmp_path / "kept", tmp_path / "fresh"
    assert main(["tune", *TWO_EPOCHS, *arms, "--set", "track_every=0", "--out", str(first)]) == 0
    kept_now = [run.relative_to(first).as_posix() for run in kept_runs.keep(first, kept)]
    assert kept_now == ["tune/baseline-lr=0.001/seed-0", "tune/spectral-lr=0.001/seed-0",
                        "final/baseline/seed-100", "final/baseline/seed-101",
                        "final/spectral/seed-100", "final/spectral/seed-101"]
    record = kept / "final" / "spectral" / "seed-101"
    assert sorted(path.name for path in record.iterdir()) == ["config.json", "kappa.json", "metrics.jsonl",
                                                             "timing.json"]
    original, copy = read_run(first / "final" / "spectral" / "seed-101"), read_run(record)
    assert original.kappa_qkv is not None  # untracked: computed from the checkpoint, which is not kept
    assert (copy.status, copy.accuracy, copy.kappa_qkv, copy.kappa_step) == (
        original.status, original.accuracy, original.kappa_qkv, original.kappa_step)

    assert len(kept_runs.restore(kept, fresh)) == 6
    (fresh / "final" / "spectral" / "seed-101" / "metrics.jsonl").unlink()  # one run left to train
    (fresh / "final" / "spectral" / "seed-101" / "config.json").unlink()
    (fresh / "final" / "spectral" / "seed-101" / "kappa.json").unlink()
    (fresh / "final" / "spectral" / "seed-101" / "timing.json").unlink()
    choice = tmp_path / "choice.json"
    choice.write_text((first / "choice.json").read_text())
    assert main(["tune", *TWO_EPOCHS, *arms, "--set", "track_every=0", "--choice", str(choice),
                 "--out", str(fresh)]) == 0
    trained = sorted(path.parent.relative_to(fresh).as_posix() for path in fresh.glob("final/*/seed-*/checkpoints"))
    assert trained == ["final/spectral/seed-101"]  # the five kept runs were not trained again
    report = [json.loads((out / "final" / "results.json").read_text()) for out in (first, fresh)]
    figures = [[(run["accuracy"], run["kappa_qkv"], run["kappa_step"]) for run in r["runs"]] for r in report]
    assert figures[0] == figures[1]

    (kept / "final" / "baseline" / "seed-100" / "kappa.json").write_text("{not json")
    with pytest.raises(ValueError, match="unreadable kept kappa"):
        read_run(kept / "final" / "baseline" / "seed-100")


@pytest.mark.parametrize("lr, lrs, expected", [
    (3e-4, [3e-4, 1e-3, 3e-3], 1e-4), (3e-3, [3e-4, 1e-3, 3e-3], 1e-2), (1e-3, [3e-4, 1e-3, 3e-3], None),
    (1e-3, [1e-3, 3e-3], 3e-4), (1e-2, [3e-3, 1e-2], 3e-2), (5e-4, [5e-4, 1e-3], 2.5e-4), (1e-3, [1e-3], None)])
def test_the_step_past_an_edge_follows_the_grids_ladder(lr, lrs, expected):
    assert tuning.step_past(lr, lrs) == expected


def test_an_arm_chosen_on_the_grids_edge_runs_one_step_past_it_and_chooses_over_the_extended_grid(tmp_path):
    """--extend-edges (the width-64 protocol's rule): only the arms whose choice sits on an edge get the extra
    lr, every other arm keeps the grid; the choice is made over each arm's own grid and --choice of the
    written choice.json is adopted on a fresh folder (the extra cell included)."""
    out = tmp_path / "tune"
    arms = ["--arms", "baseline,spectral", "--lrs", "1e-3,3e-3", "--tuning-seeds", "1", "--extend-edges"]
    assert main(["tune", *TWO_EPOCHS, *arms, "--stage", "tune", "--out", str(out)]) == 0
    choice = json.loads((out / "choice.json").read_text())
    runs = sorted(p.parent.name for p in (out / "tune").glob("*/seed-0"))
    for name, chosen in choice.items():
        grid = {lr: v for lr, v in chosen["validation"].items() if lr in ("0.001", "0.003")}
        on_grid = tuning.choose({name: grid})[name]["lr"]
        step = tuning.step_past(on_grid, [1e-3, 3e-3])
        assert step is not None  # a grid of two lrs: every choice on it sits on an edge
        assert set(chosen["validation"]) == {"0.001", "0.003", f"{step:g}"}
        assert f"{name}-lr={step:g}" in runs
        assert chosen["lr"] == tuning.choose({name: chosen["validation"]})[name]["lr"]
    assert len(runs) == 6  # 2 arms x (2 grid lrs + 1 extension)
    fresh = tmp_path / "fresh"
    assert main(["tune", *TWO_EPOCHS, *arms, "--stage", "report", "--choice", str(out / "choice.json"),
                 "--out", str(fresh)]) == 0
    assert json.loads((fresh / "choice.json").read_text()) == choice
    no_extension = [a for a in arms if a != "--extend-edges"]
    assert main(["tune", *TWO_EPOCHS, *no_extension, "--stage", "report", "--choice", str(out / "choice.json"),
                 "--out", str(tmp_path / "other")]) == 2


def test_the_rotated_key_arm_trains_with_its_correction_and_is_named_in_the_tables(tmp_path):
    """"spectral:lam=auto+target_kappa=5+key_basis=orthogonal" (lam = auto at kappa <= 5, k corrected by lam R per
    head) trains in its own folder, its runs record the setting, carry k's rotation in their checkpoint, and
    the tables name it (ARM_NAMES)."""
    arm = "spectral:lam=auto+target_kappa=5+key_basis=orthogonal"
    name, config = tuning.arm_config(TrainConfig(), arm)
    assert name == "spectral-target_kappa=5-key_basis=orthogonal" and name in tuning.ARM_NAMES
    assert (config.method.lam, config.method.target_kappa, config.method.key_basis) == ("auto", 5.0, "orthogonal")
    out = tmp_path / "tune"
    assert main(["tune", *TWO_EPOCHS, "--arms", f"baseline,{arm}", "--lrs", "1e-3", "--tuning-seeds", "1",
                 "--final-seeds", "1", "--out", str(out)]) == 0
    run = out / "final" / name / "seed-100"
    record = json.loads((run / "config.json").read_text())
    assert record["config"]["key_basis"] == "orthogonal" and [r for r in read_metrics(run / "metrics.jsonl") if r["kind"] == "eval"]
    from safetensors.torch import load_file

    state = load_file(str(next(run.rglob("*.safetensors"))))
    assert any(key.endswith("key_rotations") for key in state)
    assert record["label"] == "spectral lam=auto(kappa<=5) key_basis=orthogonal"

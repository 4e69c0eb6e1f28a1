"""The comparison harness and its report: statistics by hand, and real tiny runs reported back.

Every run here is a real training run of a tiny ViT on 96 Fashion-MNIST images (12 steps); nothing the
training code writes is fabricated, so the report is tested on exactly what it will read in practice.
"""
from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest
import torch

from speccond.harness.config.train_config import TrainConfig
from speccond.harness.reporting.stats import Interval, mean_interval, paired_difference

needs_data = pytest.mark.skipif(
    not Path("/usr/share/datasets/fashion-mnist").is_dir(),
    reason="needs the Debian package: apt-get install dataset-fashion-mnist (./run installs it as root)",
)
# 6 steps per epoch, 12 in all: one "train" row (step 10), two "eval" rows, a checkpoint per epoch.
SETS = ["embed_dim=32", "depth=1", "num_heads=2", "patch_size=7", "epochs=2", "train_size=96", "test_size=64",
        "batch_size=16", "warmup_steps=2", "checkpoint_every=6"]
TINY = TrainConfig().with_overrides(SETS)


def test_mean_interval_matches_a_hand_computation():
    interval = mean_interval([0.80, 0.82, 0.84])  # mean 0.82, sd 0.02, t(2) = 4.303
    assert interval.mean == pytest.approx(0.82)
    assert interval.half_width == pytest.approx(4.303 * 0.02 / math.sqrt(3))
    assert math.isnan(mean_interval([0.5]).half_width)


@pytest.mark.parametrize("mean, half, text", [
    (30.6243, 1.3412, "30.6 +- 1.3"), (0.7109, 0.6203, "0.71 +- 0.62"), (39.04, 11.2, "39 +- 11"),
    (-27.23, 10.4, "-27 +- 10"), (0.8214, 0.0497, "0.821 +- 0.050"), (10.0, 0.0, "10 +- 0"),
    (47.574999999999996, 1.7e-14, "47.57 +- 0"),  # three equal values, up to rounding
    (-0.0333, 1.93, "0.0 +- 1.9"),  # a mean that rounds to zero has no sign
])
def test_an_interval_is_written_to_the_decimal_place_of_its_half_widths_second_digit(mean, half, text):
    assert str(Interval(mean, half, 3)) == text
    assert str(Interval(87.34, math.nan, 1)) == "87.34 (n=1)"


def test_paired_difference_uses_the_same_seeds():
    assert paired_difference([0.9, 0.8], [0.85, 0.8]).mean == pytest.approx(0.025)
    with pytest.raises(ValueError, match="same seeds"):
        paired_difference([0.9], [0.8, 0.7])


@pytest.fixture(scope="module")
def data_home(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECCOND_DATA", str(tmp_path_factory.getbasetemp() / "data"))
        from speccond import data

        data.prepare("fashion-mnist")
        yield


@pytest.fixture(scope="module")
def comparison(data_home, tmp_path_factory):
    """`speccond compare` of baseline vs spectral (lam 10) over seeds 0 and 1, tracked every 4 steps."""
    import torch

    from speccond.harness.cli import main

    torch.set_num_threads(1)
    folder = tmp_path_factory.mktemp("compare") / "cmp"
    args = ["compare", "--out", str(folder), "--seeds", "2", "--methods", "baseline,spectral",
            *[f"--set={s}" for s in [*SETS, "track_every=4"]]]
    assert main(args) == 0
    return folder, args


@needs_data
def test_compare_names_each_runs_bar_and_says_what_it_resumes_or_skips(data_home, tmp_path, capsys):
    """Each progress bar is headed by its method and seed; a run finished before says "done, skipped", one
    stopped part way "resuming from step N of M"; the report's wall-time column uses one unit."""
    from speccond.harness.cli import main
    from speccond.harness.training.runs import read_config
    from speccond.harness.training.train import train

    torch.set_num_threads(1)
    folder = tmp_path / "cmp"
    args = ["compare", "--out", str(folder), "--methods", "baseline,spectral-svd", *[f"--set={s}" for s in SETS]]
    assert main([*args, "--seeds", "1"]) == 0
    assert "baseline seed 0:" in capsys.readouterr().err
    stopped = read_config(folder / "baseline" / "seed-0").replaced(seed=1)  # as compare's seed 1, killed at step 6
    train(stopped, folder / "baseline" / "seed-1", stop_after=6, progress=False)
    assert main([*args, "--seeds", "2"]) == 0
    said = capsys.readouterr().err
    assert "baseline seed 0: done, skipped" in said and "spectral-svd seed 0: done, skipped" in said
    assert "baseline seed 1: resuming from step 6 of 12" in said
    assert "spectral-svd seed 1:" in said and "spectral-svd seed 1: resuming" not in said  # a new run's bar
    text = (folder / "results.md").read_text()
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in text.splitlines()]
    walls = [row[-1] for row in rows if row[:3] == ["baseline", "2", "0/2"]]  # the summary's last column
    walls += [row[-2] for row in rows if row[:3] in (["baseline", "0", "finished"], ["baseline", "1", "finished"])]
    timed = [wall for wall in walls if wall != "-"]  # seed 1's first steps ran untimed (train, not compare): "-"
    assert len(timed) == 2 and len({wall.split()[1] for wall in timed}) == 1, walls  # one unit in each column


@needs_data
def test_a_dry_run_estimates_the_wall_time_from_timed_steps(data_home, tmp_path, capsys):
    from speccond.harness.cli import main

    assert main(["compare", "--dry-run", "--methods", "baseline,spectral", "--seeds", "3", "--out", str(tmp_path / "o"),
                 *[f"--set={s}" for s in SETS]]) == 0
    printed = capsys.readouterr().out
    per_step = [float(ms) for ms in re.findall(r"; (\d+) ms per step, about ", printed)]
    assert len(per_step) == 2 and all(ms > 0 for ms in per_step)
    assert re.search(r"estimated training time: [\d.]+ (s|min|h) for 2 method\(s\) x 3 seed\(s\)", printed)
    assert not (tmp_path / "o").exists()


def test_a_wall_time_column_is_written_in_one_unit():
    from speccond.harness.reporting.numbers import duration, time_unit

    column = [76.0, 150.0, None]  # not 76.0 s beside 2.5 min: both in min
    unit = time_unit(column)
    assert unit == "min" and [duration(s, unit) for s in column] == ["1.3 min", "2.5 min", "-"]
    assert time_unit([3.0, 59.9]) == "s" and time_unit([7300.0]) == "h" and duration(150.0) == "2.5 min"


@needs_data
def test_report_regenerates_what_compare_wrote(comparison, capsys):
    from speccond.harness.cli import main
    from speccond.harness.training import checkpoint
    from speccond.harness.training.runs import checkpoint_kappa, read_run

    folder, args = comparison
    written = (folder / "results.md").read_bytes()
    results = json.loads((folder / "results.json").read_text())
    text = written.decode()
    assert f"Regenerate this report from the run directories (no training): `speccond report {folder}`" in text
    assert "| baseline | 2 | 0/2 |" in text and "| spectral lam=10 | 2 | 0/2 |" in text
    assert "difference vs baseline" in text and "| - (reference) |" in text
    assert "fashion-mnist, timm ViT (width 32, depth 1, 2 heads, patch 7)" in text
    assert "2 epoch(s) on 96 training images" in text and "the first 64 test images" in text
    runs = results["runs"]
    assert [(r["method"], r["seed"], r["status"]) for r in runs] == [
        ("baseline", 0, "finished"), ("baseline", 1, "finished"), ("spectral", 0, "finished"), ("spectral", 1, "finished")
    ]
    assert all(r["step"] == r["total_steps"] == 12 and r["kappa_step"] == 12 and r["seconds"] > 0 for r in runs)
    kappa = {g["label"]: g["kappa_qkv"] for g in results["groups"]}
    assert kappa["baseline"] > kappa["spectral lam=10"] and kappa["spectral lam=10"] < 1.5  # lam = 10 conditions W_q,k,v
    # kappa from the tracker's rows at the final step is the kappa of the final checkpoint
    run = read_run(folder / "spectral" / "seed-1")
    assert run.kappa_qkv == pytest.approx(checkpoint_kappa(run.config, checkpoint.latest(run.path)), rel=1e-9)
    assert results["plots"] == ["comparison.png"]  # one figure: its second row is kappa and entropy
    # the entropy column: the tracker's rows at the last tracked step (12), mean over layers and heads, then seeds
    from speccond.diagnostics.records import read_metrics

    last = [r["entropy"] for r in read_metrics(run.path / "metrics.jsonl", kind="entropy") if r["step"] == 12]
    assert len(last) == 2 and run.entropy == pytest.approx(sum(last) / 2, rel=1e-12)  # 1 layer, 2 heads
    entropy = {g["label"]: g["entropy"]["mean"] for g in results["groups"]}
    seeds = [read_run(folder / "spectral" / f"seed-{seed}").entropy for seed in (0, 1)]
    assert entropy["spectral lam=10"] == pytest.approx(sum(seeds) / 2, rel=1e-12)
    assert entropy["spectral lam=10"] < entropy["baseline"]  # lam = 10's attention collapses
    assert "attention entropy at end, nats" in text

    for name in ("results.md", "results.json", "comparison.png"):
        (folder / name).unlink()
    (folder / "kappa.png").write_bytes(b"an earlier report's second figure")  # now a row of comparison.png
    capsys.readouterr()
    assert main(["report", str(folder)]) == 0
    assert (folder / "results.md").read_bytes() == written
    assert json.loads((folder / "results.json").read_text()) == results
    assert (folder / "comparison.png").stat().st_size > 10_000 and not (folder / "kappa.png").exists()
    assert "| spectral lam=10 | 2 | 0/2 |" in capsys.readouterr().out

    metrics = (folder / "baseline" / "seed-0" / "metrics.jsonl").read_bytes()
    assert main(args) == 0  # finished runs are not trained again; the report is the same
    assert (folder / "baseline" / "seed-0" / "metrics.jsonl").read_bytes() == metrics
    assert (folder / "results.md").read_bytes() == written


@needs_data
def test_runs_are_grouped_by_config_wherever_they_are(comparison, tmp_path, monkeypatch):
    from speccond.harness.reporting.report import write_report
    from speccond.harness.training.train import train

    folder, _ = comparison
    lam3 = TINY.with_overrides(["method=spectral", "lam=3"])
    train(lam3, tmp_path / "lam3-a", progress=False)
    train(lam3.with_overrides(["seed=1"]), tmp_path / "other" / "lam3-b", progress=False)
    assert train(lam3.with_overrides(["seed=2"]), tmp_path / "killed", stop_after=8, progress=False) == {}
    single = folder / "spectral" / "seed-0"
    monkeypatch.chdir(tmp_path)

    given = [folder / "baseline", tmp_path / "lam3-a", tmp_path / "other", tmp_path / "killed", single, single]
    report = write_report(given)  # a folder of seed-<k> runs, run directories, a folder of one, one run twice
    assert report.out == Path("report") and (tmp_path / "report" / "results.md").read_text() == report.markdown
    assert [(g.label, [r.seed for r in g.runs]) for g in report.groups] == [
        ("baseline", [0, 1]), ("spectral lam=3", [0, 1, 2]), ("spectral lam=10", [0])
    ]
    assert report.reference == "baseline"
    lam3_row = next(s for s in report.summaries if s.label == "spectral lam=3")
    assert lam3_row.seeds == [0, 1] and lam3_row.difference.n == 2 and lam3_row.kappa_qkv < 1.5
    assert next(s for s in report.summaries if s.label == "spectral lam=10").difference.n == 1  # seed 0 only
    text = report.markdown
    assert "| spectral lam=3 | 2 | 0/2 |" in text and "| spectral lam=10 | 1 | 0/1 |" in text
    assert "## Unfinished runs (excluded from all statistics)" in text
    assert f"- `{tmp_path / 'killed'}`: spectral lam=3, seed 2, at step 6 of 12;" in text  # its last checkpoint
    assert f"`speccond report {folder / 'baseline'} {tmp_path / 'lam3-a'} " in text and "--out" not in text
    assert report.plots == ["comparison.png", "sweep.png"]  # lam 3 vs 10 a sweep
    assert "; below, kappa of W_q, W_k, W_v" in text  # the baseline runs were tracked: a kappa row

    untracked = write_report([tmp_path / "lam3-a", tmp_path / "other"], tmp_path / "untracked")
    assert untracked.plots == ["comparison.png"]
    assert "no kappa row: no run was tracked" in untracked.markdown
    assert f"--out {tmp_path / 'untracked'}`" in untracked.markdown
    assert untracked.reference == "spectral lam=3"  # no baseline: the first group

    shutil.copytree(tmp_path / "lam3-a", tmp_path / "copy")
    with pytest.raises(ValueError, match="lam3-a and .*copy are the same config and seed 0"):
        write_report([tmp_path / "lam3-a", tmp_path / "copy"], tmp_path / "dup")


@needs_data
def test_a_diverged_run_is_reported_not_dropped(comparison, tmp_path):
    from speccond.harness.reporting.report import write_report
    from speccond.harness.training.train import train

    folder, _ = comparison
    hot = TINY.with_overrides(["method=spectral", "lr=1000"])  # AdamW steps of ~1000: NaN loss within 4 steps
    for seed in (0, 1):
        final = train(hot.with_overrides([f"seed={seed}"]), tmp_path / "hot" / f"seed-{seed}", progress=False)
        assert final["kind"] == "diverged" and final["loss"] == "nan"
        rows = [json.loads(line) for line in (tmp_path / "hot" / f"seed-{seed}" / "metrics.jsonl").read_text().splitlines()]
        assert rows[-1] == final  # the row format the report reads
    report = write_report([folder / "baseline", tmp_path / "hot"], tmp_path / "out")
    assert [g.label for g in report.groups] == ["baseline (lr=0.001)", "spectral lam=10 (lr=1000)"]
    hot_row = report.summaries[1]
    assert hot_row.diverged == 2 and hot_row.seeds == [0, 1] and hot_row.loss is None
    assert hot_row.accuracy.mean == pytest.approx(0.1) and hot_row.difference.n == 2  # chance: 1 / 10 classes
    text = report.markdown
    assert "| spectral lam=10 (lr=1000) | 2 | 2/2 | 10 +- 0 |" in text
    assert text.count("| diverged at step ") == 2 and "(chance; last eval before:" in text
    assert "count with chance accuracy (1 / number of classes)" in text
    runs = json.loads((tmp_path / "out" / "results.json").read_text())["runs"]
    assert [r["status"] for r in runs] == ["finished", "finished", "diverged", "diverged"]
    # run_status, the cheap count that opens no checkpoint, agrees with the report's reading of each run
    from speccond.harness.training.runs import read_run, run_status

    paths = [folder / "baseline" / "seed-0", folder / "baseline" / "seed-1", tmp_path / "hot" / "seed-0", tmp_path / "hot" / "seed-1"]
    assert [run_status(path) for path in paths] == [r["status"] for r in runs]
    cut = tmp_path / "cut"
    shutil.copytree(folder / "baseline" / "seed-0", cut)
    rows = (cut / "metrics.jsonl").read_text().splitlines()
    (cut / "metrics.jsonl").write_text("\n".join(r for r in rows if '"eval"' not in r) + "\n")  # no final evaluation
    assert run_status(cut) == read_run(cut).status == "unfinished"


def test_bad_input_is_a_clear_error(tmp_path, capsys):
    from speccond.harness.cli import main
    from speccond.harness.reporting.report import write_report

    (tmp_path / "empty").mkdir()
    expected = "expected a run directory .holding config.json. or a comparison folder holding <method>/seed-<k>/"
    with pytest.raises(ValueError, match=f"empty holds no runs: {expected}"):
        write_report([tmp_path / "empty"])
    with pytest.raises(ValueError, match=f"missing: no such directory; {expected}"):
        write_report([tmp_path / "missing"])
    corrupt = tmp_path / "cmp" / "baseline" / "seed-0"
    corrupt.mkdir(parents=True)
    (corrupt / "config.json").write_text('{"config": {"method": "baseline"')  # cut short
    with pytest.raises(ValueError, match=r"seed-0/config.json: unreadable run config .* expected the JSON object"):
        write_report([tmp_path / "cmp"])
    (corrupt / "config.json").write_text('{"label": "baseline"}')
    with pytest.raises(ValueError, match=r"seed-0/config.json: no \"config\" object"):
        write_report([corrupt])
    (corrupt / "config.json").write_text('{"config": {"method": "magic"}}')
    with pytest.raises(ValueError, match=r"seed-0/config.json: not a valid TrainConfig .*method must be one of"):
        write_report([corrupt])
    (corrupt / "config.json").write_text('{"config": {"method": "baseline"}}')
    (corrupt / "metrics.jsonl").write_text('{"kind": "train", "step": 10, "loss": 2.3}\n{"kind": "ev\n{}\n')
    with pytest.raises(ValueError, match=r"seed-0/metrics.jsonl, line 2: not a JSON row .*damaged"):
        write_report([corrupt])
    assert main(["report", str(tmp_path / "empty")]) == 2
    assert "speccond report: error:" in capsys.readouterr().err and not (tmp_path / "empty" / "results.md").exists()


@pytest.mark.parametrize("task", ["fashion-mnist", "cifar10", "digits", "lra-image", "lra-pathfinder", "lra-listops"])
@pytest.mark.parametrize("name", ["quick", "full"])
def test_every_preset_builds_a_model_for_its_task(task, name):
    from speccond.harness.config.presets import preset
    from speccond.harness.models.run_model import build_model
    from speccond.harness.tasks.datasets import task_shape

    config = TrainConfig().replaced(task=task).with_overrides(preset(name, task))
    shape = task_shape(task)
    model = build_model(config, shape)
    if shape.kind == "image":
        inputs = torch.randn(2, shape.channels, shape.image_size, shape.image_size)
    else:
        inputs = torch.randint(1, shape.vocab, (2, shape.length))
    assert model(inputs).shape == (2, shape.classes)
    with pytest.raises(ValueError, match="unknown preset 'long'"):
        preset("long", task)


def test_a_sweep_runs_each_method_at_the_values_it_reads():
    from speccond.harness.protocol.compare import parse_sweep, variants

    sweep = parse_sweep(["lam=2,10", "weight_decay=0,0.05"])
    assert sweep == {"lam": ["2", "10"], "weight_decay": ["0", "0.05"]}
    planned = variants(TINY, ["baseline", "spectral", "spectral-svd"], sweep)
    # lam changes nothing for baseline and spectral-svd: each runs once per weight_decay, not once per lam
    assert [name for name, _ in planned] == [
        "baseline-weight_decay=0", "baseline-weight_decay=0.05",
        "spectral-lam=2-weight_decay=0", "spectral-lam=2-weight_decay=0.05",
        "spectral-lam=10-weight_decay=0", "spectral-lam=10-weight_decay=0.05",
        "spectral-svd-weight_decay=0", "spectral-svd-weight_decay=0.05",
    ]
    assert [(c.method.name, c.method.lam, c.optimizer.weight_decay) for _, c in planned][2:4] == [("spectral", 2.0, 0.0), ("spectral", 2.0, 0.05)]
    assert [name for name, _ in variants(TINY, ["baseline", "spectral"], {})] == ["baseline", "spectral"]
    assert [name for name, _ in variants(TINY, ["spectral", "spectral-svd"], parse_sweep(["corrected=q,qk"]))] == [
        "spectral-corrected=q", "spectral-corrected=qk", "spectral-svd-corrected=q", "spectral-svd-corrected=qk"]
    with pytest.raises(ValueError, match="unknown TrainConfig field 'lamda'"):
        variants(TINY, ["spectral"], parse_sweep(["lamda=1,2"]))
    with pytest.raises(ValueError, match="TrainConfig.lam expects float or 'auto', got 'ten'"):
        variants(TINY, ["spectral"], parse_sweep(["lam=1,ten"]))
    with pytest.raises(ValueError, match="once per field"):
        parse_sweep(["lam=1", "lam=2"])
    with pytest.raises(ValueError, match="names no values"):
        variants(TINY, ["spectral"], parse_sweep(["lam="]))


def test_a_swept_value_a_method_never_reads_is_no_variant_and_a_sweep_nothing_reads_is_refused():
    """granularity changes an SVD correction or lam=auto, never a fixed lam * I (its corrections are the same per
    head and per projection); landmarks only the Nystromformer's attention."""
    from speccond.harness.protocol.compare import parse_sweep, variants

    sweep = parse_sweep(["granularity=head,projection"])
    assert [name for name, _ in variants(TINY, ["spectral", "spectral-svd"], sweep)] == [
        "spectral", "spectral-svd-granularity=head", "spectral-svd-granularity=projection"]
    assert len(variants(TINY.replaced(lam="auto"), ["spectral"], sweep)) == 2
    with pytest.raises(ValueError, match=r"--sweep granularity=head,projection: method 'spectral' with "
                                         r"correction='identity' and lam=10 adds a fixed lam \* I, which granularity "
                                         r"does not change \(correction=svd or lam=auto read it\); leave it out"):
        variants(TINY, ["spectral"], sweep)
    with pytest.raises(ValueError, match=r"--sweep landmarks=32,64: model 'vit' does not read landmarks "
                                         r"\(nystromformer read it\)"):
        variants(TINY, ["baseline"], parse_sweep(["landmarks=32,64"]))
    with pytest.raises(ValueError, match=r"--sweep lam=1,10: method 'baseline' does not read lam"):
        variants(TINY, ["baseline", "qk-norm"], parse_sweep(["lam=1,10"]))


@needs_data
def test_a_sweep_is_reported_in_value_order_with_labels(data_home, tmp_path):
    from speccond.harness.cli import main

    torch.set_num_threads(1)
    folder = tmp_path / "sweep"
    sets = [*(s for s in SETS if not s.startswith("epochs=")), "epochs=1", "track_every=6"]
    args = ["compare", "--out", str(folder), "--seeds", "1", "--methods", "baseline,spectral", "--sweep", "lam=10,2",
            "--sweep", "corrected=q", *[f"--set={s}" for s in sets]]
    assert main(args) == 0
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == [
        "baseline", "spectral-lam=10-corrected=q", "spectral-lam=2-corrected=q"]
    results = json.loads((folder / "results.json").read_text())
    assert [g["label"] for g in results["groups"]] == [
        "baseline", "spectral lam=2 corrected=q", "spectral lam=10 corrected=q"]
    configs = {r["group"]: r for r in results["runs"]}
    assert set(configs) == {"baseline", "spectral lam=2 corrected=q", "spectral lam=10 corrected=q"}
    recorded = json.loads((folder / "spectral-lam=2-corrected=q" / "seed-0" / "config.json").read_text())["config"]
    assert (recorded["lam"], recorded["corrected"], recorded["method"]) == (2.0, "q", "spectral")
    assert results["plots"] == ["comparison.png", "sweep.png"]
    assert (folder / "sweep.png").stat().st_size > 10_000 and "sweep.png (accuracy" in (folder / "results.md").read_text()


def test_a_sweep_is_the_one_numeric_field_a_methods_groups_differ_in():
    from speccond.harness.reporting.report import Group
    from speccond.harness.reporting.sweep import swept_field

    def group(method, **settings):
        return Group(method, method, {"method": method, "lam": 10.0, "corrected": "qkv", **settings}, ())

    lam = [group("spectral", lam=v) for v in (1.0, 10.0, 2.0)]
    assert swept_field([group("baseline"), *lam]) == ("lam", lam)
    assert swept_field([group("baseline"), group("spectral")]) is None  # one group per method
    assert swept_field([group("spectral", corrected="q"), group("spectral", corrected="k")]) is None  # not numeric
    assert swept_field([group("spectral", lam=1.0, lr=0.1), group("spectral", lam=2.0, lr=0.2)]) is None  # two fields
    # lam = 10 against lam = auto is no line to draw; lam = auto at several bounds is one
    assert swept_field([group("spectral", target_kappa=2.0), group("spectral", lam="auto", target_kappa=2.0)]) is None
    bounds = [group("spectral", lam="auto", target_kappa=t) for t in (2.0, 50.0)]
    assert swept_field(bounds) == ("target_kappa", bounds)


@needs_data
def test_the_plots_line_says_what_each_figure_shows(data_home, tmp_path):
    """Two epochs: comparison.png has the per-epoch panel; one epoch: it is left out, and the line says so.
    Its kappa row names attention entropy only when the runs tracked it (a ViT here)."""
    from speccond.harness.protocol.compare import compare

    for epochs, per_epoch in ((2, True), (1, False)):
        config = TINY.with_overrides([f"epochs={epochs}", "track_every=3", "method=baseline"])
        markdown = compare(config, ["baseline"], [0], tmp_path / f"e{epochs}", progress=False).markdown
        line = next(line for line in markdown.splitlines() if line.startswith("Plots:"))
        assert ("test accuracy per epoch" in line) == per_epoch, line
        assert "; below, kappa of W_q, W_k, W_v and attention entropy over training" in line

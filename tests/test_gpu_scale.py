"""The quick comparison on one GPU (harness/protocol/experiments/scale.py, scripts/gpu_scale.sh): its plan lists
the 24 final runs at the lrs of the committed GPU choice, a missing choice is refused in one line, and the call
runs end to end in its smoke mode on the CPU in scratch folders: stopped by its budget, resumed by a second
call, published (a Holm table with a row per arm) and packed without checkpoints."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from speccond.harness.protocol.experiments import protocol, scale, width64
from speccond.harness.protocol.experiments.runner import Runner
from speccond.harness.protocol.tuning import arm_name

ROOT = Path(__file__).resolve().parents[1]
CHOICE = "docs/results/protocol64-gpu-fashion-mnist/choice.json"
ARMS = [arm_name(arm) for arm in width64.ARMS]
needs_fashion_mnist = pytest.mark.skipif(not Path("/usr/share/datasets/fashion-mnist").is_dir(),
                                         reason="needs the Debian package dataset-fashion-mnist (./run installs it as root)")


def speccond(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "speccond", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_plan_lists_the_24_final_runs_each_arm_at_the_lr_the_gpu_instance_chose():
    result = speccond("protocol", "plan", "scale-gpu")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    chosen = json.loads((ROOT / CHOICE).read_text())
    runs = [re.fullmatch(r"(\S+) (\S+) lr (\S+) seed (\d+): (finished|to train)", line) for line in lines[:-1]]
    assert len(runs) == 24 == 6 * 2 * 2 and all(runs), lines
    assert sorted((m[1], m[2], int(m[4])) for m in runs) == sorted(
        (task, arm, seed) for task in ("fashion-mnist", "cifar10") for arm in ARMS for seed in (100, 101))
    assert all(float(m[3]) == chosen[m[2]]["lr"] for m in runs)  # CIFAR-10 too: Fashion-MNIST's choice
    assert lines[-1].startswith("24 final runs, ") and lines[-1].endswith(f"each arm at the lr of {CHOICE} (none tuned here)")


def test_every_task_takes_the_committed_fashion_mnist_choice_and_trains_vit_s_heads_of_64():
    calls = []
    runner = Runner(protocol("scale-gpu"), ROOT, jobs=12, call=lambda argv, env=None, log=None: calls.append(argv) or 0,
                    say=lambda line: None)
    runner.run("cifar10")
    (tune,) = [call for call in calls if call[:3] == ["-m", "speccond", "tune"]]
    assert tune[tune.index("--choice") + 1] == CHOICE and tune[tune.index("--final-seeds") + 1] == "2"
    assert tune[tune.index("--out") + 1] == "runs/scale-gpu-cifar10" and tune[tune.index("--jobs") + 1] == "12"
    sets = [tune[i + 1] for i, arg in enumerate(tune) if arg == "--set"]
    assert {"embed_dim=384", "num_heads=6", "depth=4", "device=cuda", f"epochs={scale.EPOCHS['cifar10']}"} <= set(sets)
    assert 384 // 6 == 64 and "--lrs" not in tune  # heads of 64; the grid the choice was made on (tune checks it)
    fashion = protocol("scale-gpu").task("fashion-mnist")
    assert f"epochs={scale.EPOCHS['fashion-mnist']}" in fashion.sets and fashion.arms == width64.ARMS


def test_a_missing_committed_choice_is_refused_in_one_line_and_nothing_is_written(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "RESULTS.md").write_text("a checkout without the GPU instance's choice\n")
    for action in (["plan", "scale-gpu"], ["run", "scale-gpu", "cifar10"]):
        result = speccond("protocol", *action, cwd=tmp_path)
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert f"no committed choice at {CHOICE}: run the GPU instance's tuning of fashion-mnist first" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs"]


def test_a_committed_choice_without_one_of_the_arms_is_refused_by_the_plan(tmp_path):
    chosen = json.loads((ROOT / CHOICE).read_text())
    del chosen["qk-norm"]
    (tmp_path / CHOICE).parent.mkdir(parents=True)
    (tmp_path / CHOICE).write_text(json.dumps(chosen))
    with pytest.raises(ValueError, match=f"{CHOICE} chooses no lr for arm qk-norm"):
        Runner(protocol("scale-gpu"), tmp_path, say=lambda line: None).plan(None)


def _call(tmp_path: Path, budget: int, tasks: str) -> tuple[subprocess.CompletedProcess, str]:
    from speccond.data import data_dir

    env = {**os.environ, "SMOKE": "1", "SPECCOND_PYTHON": sys.executable, "SPECCOND_DATA": str(data_dir()),
           "RUNS_SCALE": str(tmp_path / "runs"), "KEPT_SCALE": str(tmp_path / "kept"), "TASKS": tasks,
           "SPECCOND_SRC": str(ROOT / "src")}
    result = subprocess.run(["sh", str(ROOT / "scripts" / "gpu_scale.sh"), "-", str(tmp_path / "out"), str(budget)],
                            env=env, capture_output=True, text=True, timeout=budget + 300)
    return result, (tmp_path / "out" / "gpu-scale.log").read_text()


def _scratch_checkout_results(tmp_path: Path) -> None:
    """The scratch results folder holds what a checkout commits and the call reads: the GPU instance's choice."""
    (tmp_path / "kept" / "protocol64-gpu-fashion-mnist").mkdir(parents=True)
    (tmp_path / "kept" / "protocol64-gpu-fashion-mnist" / "choice.json").write_bytes((ROOT / CHOICE).read_bytes())


def _finished_final_runs(runs: Path) -> int:
    from speccond.harness.protocol.tuning import outcome

    return sum(outcome(run, "test") is not None for run in runs.glob("scale-gpu-*/final/*/seed-*"))


def _holm_rows(table: Path) -> list[str]:
    return [line.split(" | ")[0].strip("| ") for line in table.read_text().splitlines()
            if line.startswith("| ") and not line.startswith("| arm")]


@needs_fashion_mnist
def test_the_smoke_call_stops_at_its_budget_then_a_second_call_resumes_publishes_and_packs(tmp_path):
    _scratch_checkout_results(tmp_path)
    budget = 52  # 45 s are kept to publish and pack: the runs get about 7 s, too few to finish all 12 here
    result, log = _call(tmp_path, budget, "fashion-mnist")
    assert result.returncode == 0, log[-3000:]
    stop = re.search(r"\[gpu-scale (\d+) s\] fashion-mnist stopped by the budget", log)
    assert stop and int(stop[1]) <= budget - 45 + 2, log
    assert _finished_final_runs(tmp_path / "runs") < 12
    assert not (tmp_path / "kept" / "scale-gpu-fashion-mnist" / "final").exists()  # a partial table is not published
    started = (tmp_path / "runs" / "scale-gpu-fashion-mnist").is_dir()  # on a fast machine; not in 7 s here
    assert (tmp_path / "out" / "gpu-scale-records.tar.xz").is_file() == started == ("records packed: " in log), log
    assert started or "no records to pack: no run has started" in log

    result, log = _call(tmp_path, 900, "fashion-mnist")
    assert result.returncode == 0, log[-3000:]
    assert "fashion-mnist ended with status 0" in log and "published with status 0" in log
    assert _finished_final_runs(tmp_path / "runs") == 12
    published = tmp_path / "kept" / "scale-gpu-fashion-mnist"
    assert _holm_rows(published / "final" / "holm.md") == ARMS
    assert json.loads((published / "final" / "holm.json").read_text())["owed"] == 0
    assert (published / "kept.tar.xz").is_file() and (published / "final" / "comparison.png").is_file()
    with tarfile.open(tmp_path / "out" / "gpu-scale-records.tar.xz") as records:
        names = records.getnames()
    assert any(name.endswith("scale-gpu-fashion-mnist/final/holm.md") for name in names), names[:20]
    assert not any("/checkpoints" in name for name in names)
    assert result.stdout.count("| baseline | 0.001 | 2 |") == 1  # the table printed at the end of the call
    plan = Runner(protocol("scale-gpu", smoke=True), ROOT, runs=str(tmp_path / "runs"), results=str(tmp_path / "kept"),
                  say=lambda line: None).plan("fashion-mnist")
    assert plan[-1].startswith("12 final runs, 12 finished")


@needs_fashion_mnist
def test_the_whole_smoke_call_runs_both_tasks_cifar10_at_fashion_mnists_choice(tmp_path):
    from speccond import data

    try:
        data.prepare("cifar10")
    except (OSError, ValueError):
        pytest.skip("needs the CIFAR-10 cache (speccond data prepare cifar10 reads the shared data folder)")
    _scratch_checkout_results(tmp_path)
    result, log = _call(tmp_path, 900, "fashion-mnist cifar10")
    assert result.returncode == 0, log[-3000:]
    for task in ("fashion-mnist", "cifar10"):
        assert f"{task} ended with status 0" in log
        assert _holm_rows(tmp_path / "kept" / f"scale-gpu-{task}" / "final" / "holm.md") == ARMS
    chosen = {arm: value["lr"] for arm, value in json.loads((ROOT / CHOICE).read_text()).items()}
    adopted = json.loads((tmp_path / "runs" / "scale-gpu-cifar10" / "choice.json").read_text())
    assert {arm: value["lr"] for arm, value in adopted.items()} == chosen


@pytest.mark.parametrize("script", ["gpu_scale.sh", "gpu64.sh"])
@pytest.mark.parametrize("given", [[], ["-"]])
def test_both_gpu_calls_parse_their_arguments_in_gpu_call_sh_a_missing_one_stops_with_the_usage_line(script, given):
    """The arguments are parsed once, in scripts/gpu_call.sh; a missing PACK or OUT stops the call (status 2) with
    one line whose usage names the script that was run."""
    result = subprocess.run(["sh", f"scripts/{script}", *given], cwd=ROOT, capture_output=True, text=True, timeout=60,
                            env={**os.environ, "SMOKE": "1"})
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.strip().endswith(f"usage: scripts/{script} PACK OUT [SECONDS]"), result.stderr


@pytest.mark.parametrize("script", ["gpu64.sh", "gpu_scale.sh"])
def test_a_budget_that_is_not_whole_seconds_stops_the_gpu_call_before_anything_is_written(script, tmp_path):
    out = tmp_path / "out"
    result = subprocess.run(["sh", f"scripts/{script}", "-", str(out), "9m"], cwd=ROOT, capture_output=True, text=True,
                            timeout=60, env={**os.environ, "SMOKE": "1"})
    assert result.returncode == 2 and not out.exists(), result.stderr
    assert result.stderr.strip() == f"usage: scripts/{script} PACK OUT [SECONDS]: SECONDS is a whole number of seconds, got '9m'"

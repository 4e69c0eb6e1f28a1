"""Training runs: config overrides, atomic checkpoints, and resumption that ends bit for bit the same."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from speccond.harness.config.train_config import TrainConfig
from speccond.harness.models.run_model import build_model
from speccond.harness.tasks.datasets import task_shape
from speccond.harness.training import checkpoint
from speccond.harness.training.train import train

needs_data = pytest.mark.skipif(
    not Path("/usr/share/datasets/fashion-mnist").is_dir(),
    reason="needs the Debian package: apt-get install dataset-fashion-mnist (./run installs it as root)",
)
FASHION = task_shape("fashion-mnist")
TINY = TrainConfig().replaced(
    method="spectral", embed_dim=32, depth=1, num_heads=2, patch_size=7, epochs=2, train_size=192, test_size=100, batch_size=64,
    warmup_steps=2, checkpoint_every=2,
)


@pytest.fixture
def prepared(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.getbasetemp() / "data"
    monkeypatch.setenv("SPECCOND_DATA", str(home))
    from speccond import data

    data.prepare("fashion-mnist")


def test_overrides_are_typed_and_unknown_keys_rejected():
    config = TrainConfig().with_overrides(["lr=3e-4", "depth=2", "method=baseline"])
    assert (config.optimizer.lr, config.model.depth, config.method.name) == (3e-4, 2, "baseline")
    with pytest.raises(ValueError, match="unknown TrainConfig field 'learning_rate'"):
        TrainConfig().with_overrides(["learning_rate=1"])
    with pytest.raises(ValueError, match="depth expects int, got 'two'"):
        TrainConfig().with_overrides(["depth=two"])
    with pytest.raises(ValueError, match="method must be one of"):
        TrainConfig().replaced(method="magic")
    with pytest.raises(ValueError, match="num_heads \\(3\\) must divide embed_dim \\(32\\)"):
        TrainConfig().replaced(embed_dim=32, num_heads=3)


def test_checkpoint_round_trip_and_corruption_is_refused(tmp_path):
    model = build_model(TINY, FASHION)
    state = {"optimizer": torch.optim.AdamW(model.parameters()).state_dict(), "note": torch.arange(3)}
    folder = checkpoint.save(tmp_path, 4, 1, model, state)
    assert checkpoint.latest(tmp_path) == folder
    fresh = build_model(TINY.with_overrides(["seed=7"]), FASHION)
    manifest, loaded = checkpoint.load(folder, fresh)
    assert manifest["step"] == 4 and torch.equal(loaded["note"], torch.arange(3))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), fresh.state_dict().values()))
    with (folder / "model.safetensors").open("r+b") as handle:
        handle.seek(200)
        handle.write(b"\xff\xff\xff\xff")
    with pytest.raises(ValueError, match="corrupt.*refusing to resume"):
        checkpoint.load(folder, fresh)
    other = build_model(TINY.with_overrides(["depth=2"]), FASHION)
    folder = checkpoint.save(tmp_path, 6, 1, model, state)
    with pytest.raises(ValueError, match="does not match this model"):
        checkpoint.load(folder, other)


def test_only_the_newest_checkpoints_are_kept(tmp_path):
    model = build_model(TINY, FASHION)
    for step in (2, 4, 6):
        checkpoint.save(tmp_path, step, 0, model, {})
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step-*")) == ["step-000004", "step-000006"]


@needs_data
@pytest.mark.parametrize("method", ["baseline", "spectral"])
def test_killed_run_resumes_to_the_same_weights(prepared, tmp_path, method):
    config = TINY.with_overrides([f"method={method}"])
    straight = train(config, tmp_path / "straight", progress=False)
    assert straight["kind"] == "eval" and straight["epoch"] == 2 and 0 <= straight["accuracy"] <= 1
    assert train(config, tmp_path / "killed", stop_after=3, progress=False) == {}  # dies after step 3
    resumed = train(config, tmp_path / "killed", progress=False)  # resumes from step 2
    assert resumed == straight
    a = checkpoint.latest(tmp_path / "straight") / "model.safetensors"
    b = checkpoint.latest(tmp_path / "killed") / "model.safetensors"
    assert a.read_bytes() == b.read_bytes()
    rows = [json.loads(line) for line in (tmp_path / "killed" / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows if r["kind"] == "eval"] == [1, 2]  # no duplicated rows after resume
    recorded = json.loads((tmp_path / "killed" / "config.json").read_text())
    assert recorded["config"] == config.to_dict() and "torch" in recorded["versions"]


@needs_data
def test_resuming_with_another_config_is_refused(prepared, tmp_path):
    train(TINY.with_overrides(["epochs=1"]), tmp_path / "run", stop_after=1, progress=False)
    with pytest.raises(ValueError, match="different config"):
        train(TINY.with_overrides(["epochs=1", "lr=0.5"]), tmp_path / "run", progress=False)


@needs_data
def test_cli_train_and_resume(prepared, tmp_path, capsys):
    from speccond.harness.cli import main

    sets = ["--set", "embed_dim=32", "--set", "depth=1", "--set", "num_heads=2", "--set", "patch_size=7",
            "--set", "train_size=128", "--set", "test_size=50", "--set", "batch_size=64", "--set", "method=baseline"]
    assert main(["train", "--out", str(tmp_path / "run"), *sets]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["kind"] == "eval"
    assert main(["train", "--resume", str(tmp_path / "run")]) == 0  # already finished: evaluates again
    assert main(["train", "--resume", str(tmp_path / "nothing")]) == 2
    assert "nothing to resume" in capsys.readouterr().err
    assert main(["train", "--out", str(tmp_path / "x"), "--set", "depth=0"]) == 2


@needs_data
def test_tracked_run_writes_diagnostics_that_plot(prepared, tmp_path):
    from speccond.diagnostics import read_metrics
    from speccond.diagnostics.plot import plot_runs

    config = TINY.with_overrides(["epochs=1", "track_every=2"])  # 3 steps: rows at steps 0 and 2
    train(config, tmp_path / "run", progress=False)
    spectra = read_metrics(tmp_path / "run" / "metrics.jsonl", kind="spectra")
    assert sorted({r["step"] for r in spectra}) == [0, 2] and all(r["kappa"] < 1.2 for r in spectra)
    assert {r["step"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl", kind="entropy")} == {0, 2}
    assert len(plot_runs([tmp_path / "run"], tmp_path / "plots")) == 2


def test_shifted_init_equals_spectral_at_step_zero_but_carries_no_correction():
    import speccond

    images = torch.randn(4, 1, 28, 28)
    spectral = build_model(TINY, FASHION).eval()
    shifted = build_model(TINY.with_overrides(["method=shifted-init"]), FASHION).eval()
    assert speccond.is_conditioned(spectral) and not speccond.is_conditioned(shifted)
    with torch.no_grad():
        torch.testing.assert_close(shifted(images), spectral(images))
    svd = build_model(TINY.with_overrides(["method=spectral-svd"]), FASHION)
    assert speccond.describe(svd).rows[0].correction == "svd/head"


@needs_data
def test_a_diverging_run_stops_keeps_a_good_checkpoint_and_stays_diverged(prepared, tmp_path, capsys):
    from speccond.diagnostics.records import read_metrics
    from speccond.harness.cli import main

    config = TINY.with_overrides(["method=baseline", "lr=1000", "grad_clip=0"])
    result = train(config, tmp_path / "run", progress=False)
    assert result["kind"] == "diverged" and result["loss"] in ("nan", "inf", "-inf")
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl", as_written=True)
    assert rows[-1] == result
    kept = checkpoint.latest(tmp_path / "run")
    model = build_model(config, FASHION)
    manifest, _ = checkpoint.load(kept, model)
    assert manifest["step"] < result["step"] - 1  # not the weights whose loss was not finite
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert train(config, tmp_path / "run", progress=False) == result  # final: not trained again
    assert main(["train", "--resume", str(tmp_path / "run")]) == 3
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["kind"] == "diverged"


def _cli(*args: str, data: Path) -> list[str]:
    import sys

    return [sys.executable, "-m", "speccond", *args]


def _environment(data: Path) -> dict:
    import os

    return {**os.environ, "SPECCOND_DATA": str(data), "OMP_NUM_THREADS": "1"}


KILLABLE = ["--set", "embed_dim=32", "--set", "depth=1", "--set", "num_heads=2", "--set", "patch_size=7",
            "--set", "train_size=4096", "--set", "test_size=100", "--set", "batch_size=64", "--set", "epochs=3",
            "--set", "checkpoint_every=8", "--set", "method=spectral"]


@needs_data
@pytest.mark.parametrize("signal_name", ["SIGKILL", "SIGINT"])
def test_a_run_killed_by_a_signal_resumes_to_the_same_final_metrics(prepared, tmp_path, signal_name):
    import os
    import signal
    import subprocess
    import time

    data = Path(os.environ["SPECCOND_DATA"])
    env = _environment(data)
    straight = subprocess.run(_cli("train", "--out", str(tmp_path / "straight"), *KILLABLE, data=data),
                              env=env, capture_output=True, text=True, check=True)
    # As a foreground process in a terminal: SIGINT not ignored even when this suite runs as a background job.
    process = subprocess.Popen(_cli("train", "--out", str(tmp_path / "killed"), *KILLABLE, data=data),
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    latest = tmp_path / "killed" / "checkpoints" / "LATEST"
    deadline = time.monotonic() + 120
    while not (latest.is_file() and latest.read_text().strip() >= "step-000016") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert process.poll() is None, "the run finished before it could be killed; make KILLABLE longer"
    process.send_signal(getattr(signal, signal_name))
    process.wait(timeout=60)
    assert process.returncode != 0
    assert checkpoint.latest(tmp_path / "killed").name < "step-000192"
    resumed = subprocess.run(_cli("train", "--resume", str(tmp_path / "killed"), data=data),
                             env=env, capture_output=True, text=True, check=True)
    assert json.loads(resumed.stdout.strip().splitlines()[-1]) == json.loads(straight.stdout.strip().splitlines()[-1])
    a = checkpoint.latest(tmp_path / "straight") / "model.safetensors"
    b = checkpoint.latest(tmp_path / "killed") / "model.safetensors"
    assert a.read_bytes() == b.read_bytes()


@needs_data
def test_torchrun_two_processes_match_one_process_with_the_same_global_batch(prepared, tmp_path):
    import os
    import subprocess
    import sys

    from safetensors.torch import load_file

    data = Path(os.environ["SPECCOND_DATA"])
    env = _environment(data)
    sets = ["--set", "embed_dim=32", "--set", "depth=1", "--set", "num_heads=2", "--set", "patch_size=7",
            "--set", "train_size=200", "--set", "test_size=100", "--set", "batch_size=64", "--set", "epochs=2",
            "--set", "method=spectral", "--set", "lam=1"]  # 4 steps per epoch, the last one of 8 images
    single = subprocess.run(_cli("train", "--out", str(tmp_path / "single"), *sets, data=data),
                            env=env, capture_output=True, text=True, check=True)
    double = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         "-m", "speccond", "train", "--out", str(tmp_path / "double"), *sets],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert double.returncode == 0, double.stderr[-3000:]
    one = json.loads(single.stdout.strip().splitlines()[-1])
    two = json.loads(double.stdout.strip().splitlines()[-1])  # only rank 0 prints
    assert one["step"] == two["step"] == 8
    assert abs(one["loss"] - two["loss"]) < 1e-4 and abs(one["accuracy"] - two["accuracy"]) <= 0.01
    a = load_file(str(checkpoint.latest(tmp_path / "single") / "model.safetensors"))
    b = load_file(str(checkpoint.latest(tmp_path / "double") / "model.safetensors"))
    # The key bias cancels in the softmax, so its exact gradient is 0 and AdamW turns the rounding noise of
    # either reduction order into lr-sized steps: it is the one tensor left out (rows 32 to 63 of qkv.bias).
    k_bias = slice(32, 64)
    a["blocks.0.attn.qkv.bias"][k_bias] = b["blocks.0.attn.qkv.bias"][k_bias]
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-4, atol=1e-6, msg=name)


def test_device_is_validated_and_cuda_without_a_gpu_is_a_clear_error():
    from speccond.harness.training.distributed import Context

    with pytest.raises(ValueError, match="device must be 'auto', 'cpu' or 'cuda', got 'gpu'"):
        TrainConfig().replaced(device="gpu")
    assert Context.from_environment("cpu").device == torch.device("cpu")
    if torch.cuda.is_available():
        assert Context.from_environment("auto").device.type == "cuda"
    else:
        assert Context.from_environment("auto").device == torch.device("cpu")
        with pytest.raises(ValueError, match="torch sees no CUDA device"):
            Context.from_environment("cuda")


@pytest.mark.parametrize("corrected", ["q", "k", "v", "qk", "qkv"])
def test_corrected_chooses_the_projections_that_carry_the_correction(corrected):
    import speccond

    for method in ("spectral", "spectral-svd"):
        model = build_model(TINY.with_overrides([f"method={method}", f"corrected={corrected}"]), FASHION)
        rows = speccond.describe(model).rows
        assert sorted({r.role for r in rows}) == sorted(corrected)
    with pytest.raises(ValueError, match="corrected names projections from 'qkv'"):
        TINY.with_overrides(["corrected=qx"])


def test_attention_norm_none_drops_the_layernorm_before_attention():
    images = torch.randn(2, 1, 28, 28)
    plain = build_model(TINY.with_overrides(["method=baseline"]), FASHION).eval()
    dropped = build_model(TINY.with_overrides(["method=baseline", "attention_norm=none"]), FASHION).eval()
    assert all(isinstance(block.norm1, torch.nn.Identity) for block in dropped.blocks)
    dropped.load_state_dict({k: v for k, v in plain.state_dict().items() if ".norm1." not in k})
    with torch.no_grad():  # the same weights: each block now reads x where it read norm1(x)
        for block, reference in zip(dropped.blocks, plain.blocks):
            reference.norm1 = torch.nn.Identity()
        torch.testing.assert_close(dropped(images), plain(images))
    with pytest.raises(ValueError, match="no blocks with a LayerNorm norm1"):
        build_model(TrainConfig().replaced(task="lra-listops", model="nystromformer", attention_norm="none", embed_dim=32,
                                num_heads=2), task_shape("lra-listops"))


@needs_data
def test_refresh_every_keeps_the_svd_correction_on_the_current_weights(prepared, tmp_path):
    import speccond
    from speccond.core.backends import attachments
    from speccond.harness.models.run_model import model_for

    def drift(refresh_every: int) -> float:
        """Largest change of a saved svd correction when recomputed from the saved weights."""
        config = TINY.with_overrides(["method=spectral-svd", f"refresh_every={refresh_every}", "epochs=1"])
        train(config, tmp_path / str(refresh_every), progress=False)  # 3 steps
        model = model_for(config)
        checkpoint.load(checkpoint.latest(tmp_path / str(refresh_every)), model)
        largest = 0.0
        for found in attachments(model):
            stored = found.correction.matrix.clone()
            found.correction.recompute(found.stored_weight())
            largest = max(largest, float((found.correction.matrix - stored).abs().max()))
        assert speccond.refresh(model) == len(list(attachments(model)))
        return largest

    assert drift(1) < 1e-6  # refreshed after every step: on the final weights
    assert drift(0) > 1e-4  # never refreshed: still the correction of the initial weights


def test_lam_auto_trains_to_its_target_kappa_and_refresh_rechooses_it():
    import speccond
    from speccond.core.backends import attachments

    config = TINY.with_overrides(["method=spectral", "lam=auto", "granularity=projection"])
    assert (config.method.lam, config.method.target_kappa) == ("auto", 2.0)  # SpectralConfig's default bound
    model = build_model(config, FASHION)
    rows = speccond.describe(model).rows
    assert all(r.correction.startswith("identity lam=auto(") for r in rows)
    assert all(r.kappa_eff <= 2 + 1e-6 for r in rows)  # the Weyl bound meets the target at init
    with torch.no_grad():
        for found in attachments(model):
            found.stored_weight().mul_(3)  # the weights grow: the chosen lams no longer meet the target
    assert max(r.kappa_eff for r in speccond.describe(model).rows) > 2
    speccond.refresh(model)
    assert all(r.kappa_eff <= 2 + 1e-6 for r in speccond.describe(model).rows)
    with pytest.raises(ValueError, match="target_kappa is the kappa bound lam='auto' aims at, a finite number > 1"):
        TINY.with_overrides(["lam=auto", "target_kappa=1"])


@needs_data
def test_a_validation_split_is_held_out_the_same_for_every_run_and_test_is_scored_once(prepared, tmp_path):
    """val_size holds out the same training examples for every seed and method (pinned in config.json by
    the SHA-256 of their indices); "val" rows follow every epoch and the test split is scored once, at the
    end. Without val_size the published protocol is unchanged (a test row after every epoch)."""
    from speccond.harness.tasks.datasets import load_task, split_indices

    config = TINY.with_overrides(["val_size=96"])
    held = {}
    for seed, method in ((0, "baseline"), (1, "spectral")):
        varied = config.with_overrides([f"seed={seed}", f"method={method}"])
        training, validation = split_indices(60000, varied)
        assert training.shape == (192,) and validation.shape == (96,)
        assert not set(training.tolist()) & set(validation.tolist())
        held[seed] = validation
        final = train(varied, tmp_path / f"run-{seed}", progress=False)
        rows = [json.loads(line) for line in (tmp_path / f"run-{seed}" / "metrics.jsonl").read_text().splitlines()]
        assert [r["epoch"] for r in rows if r["kind"] == "val"] == [1, 2]
        assert [r for r in rows if r["kind"] == "eval"] == [final] and final["step"] == 6
        recorded = json.loads((tmp_path / f"run-{seed}" / "config.json").read_text())
        assert recorded["splits"]["val"]["size"] == 96
        held[f"sha-{seed}"] = recorded["splits"]["val"]["indices_sha256"]
    assert torch.equal(held[0], held[1]) and held["sha-0"] == held["sha-1"]
    tensors = load_task(config)
    assert tensors["val_x"].shape == (96, 1, 28, 28) and torch.equal(tensors["val_index"], held[0])
    unchanged, none = split_indices(60000, TINY)
    assert none.numel() == 0 and torch.equal(unchanged, torch.randperm(60000, generator=torch.Generator().manual_seed(0))[:192])
    with pytest.raises(ValueError, match="ask for more than the 60000 training examples"):
        split_indices(60000, TINY.with_overrides(["val_size=59900"]))


@needs_data
def test_flush_denormal_holds_for_the_run_and_is_undone_after_it(prepared, tmp_path, monkeypatch):
    seen = []
    import speccond.harness.training.train as loop

    real = loop.train_run

    def spy(*args, **kwargs):
        seen.append(float(torch.tensor(1e-40) * 1.0))  # a subnormal float32 reads as 0 when flushed
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "train_run", spy)
    final = train(TINY.with_overrides(["epochs=1", "flush_denormal=1"]), tmp_path / "run", progress=False)
    assert final["kind"] == "eval" and seen == [0.0]
    assert float(torch.tensor(1e-40)) > 0  # restored
    with pytest.raises(ValueError, match="flush_denormal must be 0 or 1"):
        TINY.with_overrides(["flush_denormal=2"])


def test_entropy_is_tracked_on_every_layer_the_head_diagnostics_rebuild(digits_data, tmp_path, caplog):
    """A timm ViT pooled by attention (global_pool="map"): its blocks' entropy is tracked, and the pooling head,
    which the head diagnostics refuse, is named in the log instead of turning entropy off for the whole run."""
    from speccond.diagnostics import read_metrics

    config = TrainConfig().with_overrides([
        "task=digits", "model=timm:vit_tiny_patch16_224", "model_args=depth=2,patch_size=4,embed_dim=32,num_heads=2,global_pool=map",
        "epochs=1", "train_size=64", "test_size=32", "batch_size=32", "warmup_steps=1", "track_every=1"])
    with caplog.at_level("INFO", logger="speccond"):
        train(config, tmp_path / "run", progress=False)
    entropy = read_metrics(tmp_path / "run" / "metrics.jsonl", kind="entropy")
    assert {(r["step"], r["layer"]) for r in entropy} == {(step, layer) for step in (0, 1, 2) for layer in (0, 1)}
    assert "attention entropy not tracked: layer 2 (attn_pool, timm AttentionPoolLatent)" in caplog.text

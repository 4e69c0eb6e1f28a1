"""Sequence tasks: the Nystromformer classifier, landmark padding, and LRA Image read from CIFAR-10."""
from __future__ import annotations

import pytest
import torch

import speccond
from speccond.harness.config.train_config import TrainConfig
from speccond.harness.models.run_model import build_model
from speccond.harness.models.sequence import PAD, attention_mode, build_nystromformer, padded_length
from speccond.harness.tasks.datasets import load_task, pixel_tokens, task_shape
from speccond.harness.training.train import train



def test_sequences_are_padded_to_a_multiple_of_the_landmarks_and_the_fallback_is_named():
    assert [padded_length(n, 64) for n in (1, 64, 65, 1024)] == [64, 64, 128, 1024]
    assert attention_mode(1024, 64) == "nystrom" and attention_mode(64, 64) == "full"
    with pytest.raises(ValueError, match="not a multiple of landmarks 64.*pad to 1024"):
        attention_mode(1000, 64)
    with pytest.raises(ValueError, match="not a multiple"):
        build_nystromformer(100, 20, 10, 32, 1, 2, 64)


def test_pixel_tokens_are_grey_levels_plus_one_then_pad():
    images = torch.randint(0, 256, (3, 3, 4, 4), dtype=torch.uint8)
    tokens = pixel_tokens(images, landmarks=24)  # 16 pixels -> padded to 24
    assert tokens.shape == (3, 24) and tokens.dtype == torch.int64
    r, g, b = images[1, :, 2, 3].double()
    assert tokens[1, 2 * 4 + 3] == round(0.299 * float(r) + 0.587 * float(g) + 0.114 * float(b)) + 1
    assert (tokens[:, 16:] == PAD).all() and (tokens[:, :16] >= 1).all()
    grey = torch.randint(0, 256, (2, 1, 4, 4), dtype=torch.uint8)
    assert torch.equal(pixel_tokens(grey, 16), grey.flatten(1).long() + 1)


def test_mean_pooling_ignores_pad_tokens_and_spectral_conditions_every_projection():
    model = build_nystromformer(128, 20, 10, 32, 2, 2, 64).eval()
    tokens = torch.randint(1, 20, (2, 128))
    report = speccond.apply(model, speccond.SpectralConfig(lam=10))
    assert sorted(r.role for r in report.rows) == sorted("qkv" * 2)
    assert model(tokens).shape == (2, 10) and torch.isfinite(model(tokens)).all()


def test_a_nystromformer_trains_on_lra_image(cifar10_home, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECCOND_DATA", str(cifar10_home))
    config = TrainConfig().replaced(task="lra-image", model="nystromformer", embed_dim=16, depth=1, num_heads=2, landmarks=64,
                         train_size=64, test_size=32, batch_size=32, epochs=1, warmup_steps=1, method="spectral")
    task = load_task(config)
    assert task["train_x"].shape == (64, 1024) and task["train_x"].dtype == torch.int64
    assert int(task["train_x"].min()) >= 1 and int(task["train_x"].max()) <= 256
    shape = task_shape("lra-image")
    assert (shape.kind, shape.length, shape.vocab) == ("sequence", 1024, 257)
    result = train(config, tmp_path / "run", progress=False)
    assert result["kind"] == "eval" and result["step"] == 2 and 0 <= result["accuracy"] <= 1
    with pytest.raises(ValueError, match="model 'vit' takes an image task, but task 'lra-image' is sequences"):
        build_model(TrainConfig().replaced(task="lra-image", model="vit"), shape)


def test_a_nystromformer_trains_on_lra_listops(tmp_path, monkeypatch):
    from speccond import data

    monkeypatch.setenv("SPECCOND_DATA", str(tmp_path / "data"))
    data.prepare("listops-small")
    config = TrainConfig().replaced(task="lra-listops", model="nystromformer", embed_dim=16, depth=1, num_heads=2, landmarks=64,
                         train_size=64, test_size=32, batch_size=32, epochs=1, warmup_steps=1, method="qk-norm")
    task = load_task(config)
    assert task["train_x"].shape == (64, 256) and task["train_x"].dtype == torch.int64
    shape = task_shape("lra-listops")
    assert (shape.kind, shape.length, shape.vocab, shape.classes) == ("sequence", 256, 16, 10)
    arrays = data.load("listops-small")
    assert torch.equal(task["test_x"], arrays["test_tokens"][:32].long())  # 256 is already a multiple of 64
    result = train(config, tmp_path / "run", progress=False)
    assert result["kind"] == "eval" and result["step"] == 2


def test_lra_pathfinder_reads_the_generated_images_as_pixel_tokens(tmp_path, monkeypatch):
    from speccond import data

    monkeypatch.setenv("SPECCOND_DATA", str(tmp_path / "data"))
    data.prepare("pathfinder-small")
    config = TrainConfig().replaced(task="lra-pathfinder", model="nystromformer", train_size=16, test_size=8, landmarks=64)
    task = load_task(config)
    arrays = data.load("pathfinder-small")
    assert task["test_x"].shape == (8, 1024)
    assert torch.equal(task["test_x"], arrays["test_images"][:8].flatten(1).long() + 1)  # 0 / 255 -> 1 / 256
    shape = task_shape("lra-pathfinder")
    assert (shape.kind, shape.length, shape.vocab, shape.classes) == ("sequence", 1024, 257, 2)


@pytest.mark.parametrize("lam", [0.0, 10.0])
def test_an_example_gets_the_same_output_alone_and_in_a_batch(lam):
    """The Nystrom pseudo-inverse starts from a per-matrix scale, not a batch-wide one (module note): at
    lam = 10 its 6 iterations do not converge, and the batch-wide scale moved outputs by about 1e-2."""
    torch.manual_seed(0)
    model = build_nystromformer(256, 20, 10, embed_dim=32, depth=2, num_heads=2, landmarks=64).eval()
    if lam:
        speccond.apply(model, speccond.SpectralConfig(lam=lam))
    tokens = torch.randint(1, 20, (8, 256), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        batch = model(tokens)  # (8, 10)
        alone = torch.cat([model(tokens[i : i + 1]) for i in range(8)])  # (8, 10)
    torch.testing.assert_close(alone, batch, rtol=0, atol=1e-5)


def test_a_report_names_the_attention_its_nystromformer_runs_computed():
    from speccond.harness.reporting.report import _title

    length = task_shape("lra-listops").length
    shared = {"task": "lra-listops", "model": "nystromformer", "embed_dim": 64, "depth": 2, "num_heads": 2}
    assert f"Nystrom attention over {padded_length(length, 64)} tokens" in _title({**shared, "landmarks": 64})
    full = padded_length(length, 64)  # as many landmarks as (padded) tokens: transformers' silent fallback
    assert f"FULL softmax attention (landmarks = sequence length {full}" in _title({**shared, "landmarks": full})


def test_lam_10_collapses_nystrom_attentions_kernels_at_initialisation():
    """scripts/nystrom_attention_at_init.py, as docs/RESULTS.md's ListOps section reads it: lam = 10 takes
    both softmax kernels of Nystrom attention from near log n to near 0 nats."""
    from transformers.models.nystromformer.modeling_nystromformer import NystromformerSelfAttention

    from tests.scripts import load_script

    script = load_script("nystrom_attention_at_init")
    tokens = torch.randint(1, 20, (4, 256), generator=torch.Generator().manual_seed(1))
    found = {}
    for lam in (0.0, 10.0):
        torch.manual_seed(0)
        model = build_nystromformer(256, 20, 10, embed_dim=32, depth=1, num_heads=2, landmarks=64).eval()
        if lam:
            speccond.apply(model, speccond.SpectralConfig(lam=lam))
        block = next(m for m in model.modules() if isinstance(m, NystromformerSelfAttention))
        seen = []
        block.register_forward_hook(lambda m, inputs, output: seen.append(inputs[0]))  # (4, 256, 32)
        with torch.no_grad():
            model(tokens)
            found[lam] = script.inspect_block(block, seen[0])
            assert 0 < found[lam]["conv_share"] < 1
    assert found[0.0]["kernel_1"] > 0.95 * found[0.0]["log_m"] and found[0.0]["kernel_3"] > 0.95 * found[0.0]["log_n"]
    assert found[10.0]["kernel_1"] < 0.2 * found[10.0]["log_m"] and found[10.0]["kernel_3"] < 0.2 * found[10.0]["log_n"]

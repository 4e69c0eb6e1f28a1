"""benchmarks/identity_tradeoff_at_init.py, which docs/RESULTS.md quotes ("The request's two new settings at head
width 64, at initialisation"): its hand-built corrections are what it says, and its committed report is what it
makes."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.scripts import load_script

REPORT = Path(__file__).parents[1] / "docs" / "results" / "benchmarks" / "identity-tradeoff-at-init.md"


@pytest.fixture(scope="module")
def script():
    return load_script("identity_tradeoff_at_init", folder="benchmarks")


def _blocks(model, corrected):
    """(plain, corrected) q, k, v blocks (D, D) of the first fused qkv weight, and the head width."""
    attention = next(m for m in model.modules() if hasattr(m, "qkv"))
    attention_c = next(m for m in corrected.modules() if hasattr(m, "qkv"))
    width = attention.qkv.weight.shape[1]
    split = lambda w: w.detach().double().split(width)  # noqa: E731  (3D, D) -> q, k, v
    return split(attention.qkv.weight), split(attention_c.qkv.weight), width // attention.num_heads


@pytest.mark.parametrize("setting", [0, 1, 2, 3])
def test_each_setting_adds_per_head_blocks_whose_singular_values_are_all_lam(script, setting):
    """Every head's added C (corrected minus plain) has all its singular values equal to lam on the roles the
    setting corrects and is zero elsewhere, so the Weyl bound is the identity's; the orthogonal k is not I_k."""
    from speccond.harness.models.timm_family import build_backbone

    torch.manual_seed(0)
    model, lam = build_backbone("vit", 28, 1, 10, 64, 2, 4, 4).eval(), 3.0
    plain, corrected, head_dim = _blocks(model, script.corrected(model, lam, script.SETTINGS[setting]))
    eye = torch.eye(plain[0].shape[1], dtype=torch.float64)
    corrects = {0: "qkv", 1: "q", 2: "qkv", 3: "qkv"}[setting]
    for role, before, after in zip("qkv", plain, corrected):
        for head in range(before.shape[0] // head_dim):
            rows = slice(head * head_dim, (head + 1) * head_dim)
            added = after[rows] - before[rows]  # (dh, D)
            if role not in corrects:
                assert added.abs().max() == 0
                continue
            torch.testing.assert_close(torch.linalg.svdvals(added), torch.full((head_dim,), lam, dtype=torch.float64),
                                       rtol=0, atol=1e-5)
            is_identity = torch.allclose(added, lam * eye[rows], atol=1e-5)
            assert is_identity == (role != "k" or setting < 2)


def test_the_hand_built_identity_is_what_speccond_applies(script):
    from speccond.harness.models.timm_family import build_backbone

    torch.manual_seed(0)
    script.check_hand_built_identity(build_backbone("vit", 28, 1, 10, 64, 2, 4, 4).eval(), torch.randn(2, 1, 28, 28))


def test_the_hand_built_rotation_with_specconds_r_is_what_speccond_applies(script):
    """The benchmark's lam R on k, given speccond's R_h, adds to the bit what SpectralConfig(key_basis=
    'orthogonal') adds; its own default R differs (a new one for every head of every layer)."""
    from speccond.harness.models.timm_family import build_backbone

    torch.manual_seed(0)
    model = build_backbone("vit", 28, 1, 10, 64, 2, 4, 4).eval()
    script.check_hand_built_rotation(model)
    assert not torch.equal(_blocks(model, script.corrected(model, 3.0, script.SETTINGS[2]))[1][1],
                           _blocks(model, script.corrected(model, 3.0, script.SETTINGS[3]))[1][1])


@pytest.mark.skipif(not Path("/usr/share/datasets/fashion-mnist").is_dir(), reason="needs the Debian package: apt-get install dataset-fashion-mnist (./run installs it as root)")
def test_the_committed_report_is_what_the_script_makes(script):
    """The main job's section (the quickest), made again, equals the committed one line for line."""
    name = "main job ViT (dh 16, 50 tokens), Fashion-MNIST test images"
    made = "\n".join(script.section(name, *script.models()[name]()))
    assert made in REPORT.read_text()

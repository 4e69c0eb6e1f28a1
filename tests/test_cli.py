"""The command line: inspect and plot on real models and tracked runs; errors exit 2 with a message."""
from __future__ import annotations

import json

import pytest

from speccond.harness.cli import main
from tests.test_diagnostics import _tracked_run

VIT = ["timm:vit_tiny_patch16_224", "--set", "img_size=32", "--set", "patch_size=8", "--set", "depth=2"]


def test_inspect_conditions_and_prints_the_table(tmp_path, capsys):
    assert main(["inspect", *VIT, "--lam", "10", "--entropy", "--json", str(tmp_path / "rows.json")]) == 0
    out = capsys.readouterr().out
    assert "conditioned 6 projection blocks (identity, lam=10)" in out
    assert "blocks.1.attn" in out and "attention entropy" in out
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert len(rows) == 6 and all(r["kappa"] < 1.2 and r["kappa_w"] > 10 for r in rows)


def test_inspect_lam_auto_prints_the_report_of_apply_with_lam_auto(capsys):
    """``--lam auto --target-kappa 3`` conditions as SpectralConfig(lam="auto", target_kappa=3) does: the report it
    prints (the lam each block got) is that of speccond.apply on the same model, and every head meets the bound."""
    import torch

    import speccond
    from speccond.harness.models.named import build_named_model

    small = ["--set", "embed_dim=32", "--set", "num_heads=2"]
    torch.manual_seed(0)
    assert main(["inspect", *VIT, *small, "--lam", "auto", "--target-kappa", "3"]) == 0
    out = capsys.readouterr().out
    torch.manual_seed(0)
    model = build_named_model(VIT[0], {"img_size": 32, "patch_size": 8, "depth": 2, "embed_dim": 32, "num_heads": 2})
    report = speccond.apply(model, speccond.SpectralConfig(lam="auto", target_kappa=3))
    assert out.startswith("conditioned 6 projection blocks (identity, lam=auto, target_kappa=3)\n\n" + f"{report.compute()}\n")
    assert "lam=auto(" in out and all(row.head_kappa_eff_max <= 3 + 1e-6 for row in report.rows)


def test_inspect_plain_hf_model(capsys):
    args = ["inspect", "hf:bert", "--plain", "--set", "num_hidden_layers=1", "--set", "hidden_size=32",
            "--set", "num_attention_heads=4", "--set", "intermediate_size=32"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "encoder.layer.0.attention.self" in out and "False" in out


def test_inspect_an_hf_checkpoint_folder_reads_its_weights(tmp_path, capsys):
    """``inspect hf:<folder>`` loads the checkpoint save_pretrained wrote there: its kappas are the saved weights'."""
    import torch
    import transformers

    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32)
    saved = transformers.BertModel(config)
    saved.save_pretrained(tmp_path / "bert")
    capsys.readouterr()
    assert main(["inspect", f"hf:{tmp_path / 'bert'}", "--plain", "--json", str(tmp_path / "rows.json")]) == 0
    rows = json.loads((tmp_path / "rows.json").read_text())
    query = saved.encoder.layer[0].attention.self.query.weight.detach().double()
    assert rows[0]["projection"] == "q" and rows[0]["kappa"] == pytest.approx(torch.linalg.cond(query).item(), rel=1e-6)


def test_inspect_bad_name_is_a_clear_error(capsys):
    assert main(["inspect", "vit_tiny"]) == 2
    assert "model names look like timm:" in capsys.readouterr().err


def test_plot_command_writes_pngs(tmp_path, capsys):
    _tracked_run(tmp_path / "baseline", lam=0.0, steps=2)
    assert main(["plot", str(tmp_path / "baseline"), "--out", str(tmp_path / "plots")]) == 0
    assert (tmp_path / "plots" / "projection_conditioning.png").is_file()
    assert main(["plot", str(tmp_path / "missing")]) == 2


def test_inspect_jacobian_columns(capsys):
    args = ["inspect", *VIT, "--set", "embed_dim=32", "--set", "num_heads=2", "--jacobian", "--batch", "1",
            "--jacobian-iterations", "5"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "attention Jacobian w.r.t. W_Q, W_K, W_V" in out and "kappa_nonzero" in out

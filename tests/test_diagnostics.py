"""Diagnostics (docs/GUIDE.md, "Diagnostics: see the conditioning"): projection spectra, attention entropy, the
tracker."""
from __future__ import annotations

import json
import math
import re

import pytest
import torch
from torch import nn

from speccond import diagnostics as dx
import speccond
from speccond.diagnostics.entropy import row_entropy
from speccond.diagnostics.heads import head_cases
from tests.models import timm_vit, transformer_encoder


def _vit() -> nn.Module:
    torch.manual_seed(0)
    return timm_vit().eval()


def _images() -> torch.Tensor:
    return torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))


# spectra ------------------------------------------------------------------------------------------------
def test_projection_spectra_match_svd_of_each_block_and_head():
    model = _vit()
    rows = dx.projection_spectra(model)
    qkv = model.blocks[1].attn.qkv.weight.detach().double()  # (3 * 64, 64): q, k, v blocks
    for role, start in (("q", 0), ("k", 64), ("v", 128)):
        whole = rows.where(layer=1, projection=role, head=None)[0]
        s = torch.linalg.svdvals(qkv[start : start + 64])
        assert math.isclose(whole["kappa"], float(s[0] / s[-1]), rel_tol=1e-9)
        head2 = rows.where(layer=1, projection=role, head=2)[0]
        s2 = torch.linalg.svdvals(qkv[start + 32 : start + 48])  # head 2: rows 32..48 of the block
        assert math.isclose(head2["sigma_min"], float(s2[-1]), rel_tol=1e-9)
    assert len(rows) == 2 * 3 * (1 + 4)  # layers x (q, k, v) x (whole + 4 heads)


@pytest.mark.parametrize("correction", ["identity", "svd"])
def test_spectra_of_a_conditioned_vit_at_init(correction):
    """kappa of W_Q, W_K, W_V drops with lam = 10 and is <= 2 with the SVD correction."""
    model = _vit()
    plain = dx.projection_spectra(model)
    speccond.apply(model, speccond.SpectralConfig(correction=correction))
    conditioned = dx.projection_spectra(model)
    for before, after in zip(plain, conditioned):
        assert math.isclose(after["kappa_w"], before["kappa"], rel_tol=1e-9)  # the stored W is untouched
        assert after["kappa"] < before["kappa"]
        if correction == "svd" and after["head"] is not None:
            assert after["kappa"] <= 2 + 1e-6
        if correction == "identity":
            assert after["kappa"] < 1.2  # Weyl: (10 + 0.35) / (10 - 0.35) at this init


def test_records_print_and_save(tmp_path):
    rows = dx.projection_spectra(_vit(), per_head=False)
    text = str(rows)
    assert "kappa" in text.splitlines()[1] and "blocks.0.attn" in text
    rows.save(tmp_path / "spectra.json")
    loaded = json.loads((tmp_path / "spectra.json").read_text())
    assert len(loaded) == 6 and loaded[0]["projection"] == "q"


# entropy ------------------------------------------------------------------------------------------------
def test_head_probabilities_equal_the_models_own_attention_timm():
    model = _vit()
    attn = model.blocks[0].attn
    attn.fused_attn = False  # timm's explicit path exposes the probabilities to a hook on attn_drop
    seen = {}
    handle = attn.attn_drop.register_forward_hook(lambda _m, _a, out: seen.setdefault("probs", out))
    images = _images()
    with torch.no_grad():
        model(images)
    handle.remove()
    for head, case in enumerate(head_cases(model, (images,), layer=0)):
        torch.testing.assert_close(case.probabilities(), seen["probs"][:, head], rtol=1e-5, atol=1e-6)


def test_head_probabilities_equal_the_models_own_attention_mha():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    speccond.apply(mha, speccond.SpectralConfig(lam=3.0))
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        _, weights = mha(x, x, x, need_weights=True, average_attn_weights=False)  # (B, H, N, N)
    for head, case in enumerate(head_cases(mha, (x, x, x), layer=0)):
        torch.testing.assert_close(case.probabilities(), weights[:, head], rtol=1e-5, atol=1e-6)


def test_head_probabilities_equal_the_models_own_attention_bert():
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
        attn_implementation="eager",
    )
    model = BertModel(config).eval()
    ids = torch.randint(0, 50, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, 6:] = 0  # padding: the additive mask must reach the head diagnostics
    with torch.no_grad():
        expected = model(ids, attention_mask=mask, output_attentions=True).attentions[0]  # (B, H, N, N)
    for head, case in enumerate(head_cases(model, (ids, mask), layer=0)):
        torch.testing.assert_close(case.probabilities(), expected[:, head], rtol=1e-5, atol=1e-6)


def test_uniform_entropy_counts_the_keys_a_padding_mask_or_causality_leaves_visible():
    from transformers import BertConfig, BertModel

    from speccond.diagnostics.attention_head import AttentionHead
    from speccond.diagnostics.entropy import uniform_reference

    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                        intermediate_size=64, attn_implementation="eager")
    ids, mask = torch.randint(0, 50, (2, 9)), torch.ones(2, 9, dtype=torch.long)
    mask[1, 6:] = 0  # transformers' additive mask: finfo.min on the 3 padded keys of sample 1
    case = head_cases(BertModel(config).eval(), (ids, mask), layer=0)[0]
    assert case.visible_keys().tolist() == [[9] * 9, [6] * 9]
    rows = dx.attention_entropy(BertModel(config).eval(), (ids, mask))
    assert rows[0]["uniform_entropy"] == pytest.approx((math.log(9) + math.log(6)) / 2)
    assert rows[0]["log_n"] == pytest.approx(math.log(9))
    x, w = torch.randn(1, 4, 8), torch.randn(8, 2)
    position_bias = torch.randn(1, 4, 4)  # a finite bias hides nothing
    causal = AttentionHead(x, w, w, w, 1.0, logit_bias=position_bias, causal=True)
    assert causal.visible_keys().tolist() == [[1, 2, 3, 4]]
    assert uniform_reference([{"kind": "entropy", "log_n": 2.0}, {"kind": "entropy", "log_n": 3.0,
                                                                   "uniform_entropy": 1.5}]) == 2.0
    assert uniform_reference([{"kind": "spectra", "kappa": 4.0}]) is None


def test_lam_ten_collapses_attention_entropy_at_init():
    """docs/THEORY.md section 3 (collapse): with LayerNorm'd inputs and lam = 10, attention starts nearly one-hot."""
    images = _images()
    baseline = dx.attention_entropy(_vit(), (images,))
    model = _vit()
    speccond.apply(model, speccond.SpectralConfig(lam=10.0))
    conditioned = dx.attention_entropy(model, (images,))
    assert all(r["entropy"] > 0.95 * r["log_n"] for r in baseline)
    assert all(r["entropy"] < 0.5 for r in conditioned)
    assert len(conditioned) == 2 * 4 and conditioned[0]["log_n"] == pytest.approx(math.log(17))
    assert all(r["uniform_entropy"] == pytest.approx(r["log_n"]) for r in baseline)  # no mask: every key visible


def test_entropy_refuses_channel_attention_with_a_clear_error():
    import timm

    model = timm.create_model(
        "xcit_nano_12_p8_224", pretrained=False, img_size=32, embed_dim=32, depth=1, num_heads=4, cls_attn_layers=1
    )
    with pytest.raises(ValueError, match=r"cannot rebuild its heads: XCA is channel attention.*projection_spectra works"):
        dx.attention_entropy(model, (_images(),))


# tracker ------------------------------------------------------------------------------------------------
def test_tracker_appends_rows_when_due(tmp_path):
    model = transformer_encoder().eval()
    speccond.apply(model, speccond.SpectralConfig(lam=10.0))
    probe = (torch.randn(2, 6, 32),)
    tracker = dx.Tracker(model, probe, every=5, path=tmp_path / "run" / "metrics.jsonl")
    written = [tracker.step(step) for step in range(11)]
    assert [step for step, rows in enumerate(written) if rows is not None] == [0, 5, 10]
    spectra = dx.read_metrics(tmp_path / "run" / "metrics.jsonl", kind="spectra")
    entropy = dx.read_metrics(tmp_path / "run" / "metrics.jsonl", kind="entropy")
    assert len(spectra) == 3 * 2 * 3 and len(entropy) == 3 * 2 * 4  # steps x layers x (q,k,v) / heads
    assert {r["step"] for r in spectra} == {0, 5, 10}
    assert all(r["kappa"] < 2 for r in spectra)


def test_tracker_rejects_a_bad_interval():
    with pytest.raises(ValueError, match="every must be >= 1"):
        dx.Tracker(nn.Linear(2, 2), (torch.zeros(1, 2),), every=0)


# plot ---------------------------------------------------------------------------------------------------
def _tracked_run(run_dir, lam: float, steps: int = 4) -> None:
    model = _vit().train()
    if lam:
        speccond.apply(model, speccond.SpectralConfig(lam=lam))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tracker = dx.Tracker(model, (_images(),), every=2, path=run_dir / "metrics.jsonl")
    generator = torch.Generator().manual_seed(0)
    for step in range(steps + 1):
        tracker.step(step)
        images, labels = torch.randn(4, 3, 32, 32, generator=generator), torch.randint(0, 5, (4,), generator=generator)
        loss = nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def test_plot_writes_readable_pngs_from_tracked_runs(tmp_path):
    from PIL import Image

    from speccond.diagnostics.plot import plot_runs

    _tracked_run(tmp_path / "baseline", lam=0.0)
    _tracked_run(tmp_path / "spectral", lam=10.0)
    written = plot_runs([tmp_path / "baseline", tmp_path / "spectral"], tmp_path / "plots")
    assert {p.name for p in written} == {"projection_conditioning.png", "attention_entropy.png"}
    for path in written:
        with Image.open(path) as image:
            assert image.format == "PNG" and image.width >= 600 and image.height >= 400
            assert len(image.convert("L").getcolors(maxcolors=65536)) > 20  # not a blank canvas


def test_plot_refuses_a_folder_without_metrics(tmp_path):
    from speccond.diagnostics.plot import plot_runs

    with pytest.raises(ValueError, match="no metrics.jsonl"):
        plot_runs([tmp_path], tmp_path / "plots")


# Jacobian and Theorem 3.4 on real models ------------------------------------------------------------------
def test_rebuilt_head_output_equals_the_models_own_head_output():
    model = _vit()
    attn = model.blocks[1].attn
    seen = {}
    handle = attn.proj.register_forward_hook(lambda _m, args, _out: seen.setdefault("heads", args[0]))
    images = _images()
    with torch.no_grad():
        model(images)
    handle.remove()
    for head, case in enumerate(head_cases(model, (images,), layer=1)):
        expected = seen["heads"][..., head * 16 : (head + 1) * 16]  # (B, N, dh): head h's slice before proj
        torch.testing.assert_close(case.output(case.x, case.w_q, case.w_k, case.w_v), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.usefixtures("float64_default")
def test_attention_jacobian_matches_jacrev_through_the_timm_module():
    """dx.attention_jacobian's exact J has the singular values of the model's own head, differentiated by
    jacrev through timm's Attention with the head's rows of qkv.weight as the variables."""
    import copy

    from torch.func import functional_call, jacrev

    model = timm_vit().eval()
    model.blocks[0].attn.fused_attn = False
    images = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(3)).double()
    with pytest.warns(UserWarning, match="Theorem 3.8"):  # lam <= 2 warns; small keeps attention unsaturated
        speccond.apply(model, speccond.SpectralConfig(lam=0.5))
    measured = dx.attention_jacobian(model, (images,), layer=0, head=1, method="exact")[0]

    attn = copy.deepcopy(model.blocks[0].attn)
    speccond.remove(attn, merge=True)
    attn.proj = nn.Identity()  # expose the heads' outputs, (B, N, H * dh)
    captured = {}
    hook = model.blocks[0].attn.register_forward_pre_hook(lambda _m, args: captured.setdefault("x", args[0]))
    with torch.no_grad():
        model(images)
    hook.remove()
    weight = attn.qkv.weight.detach()  # (3 * 64, 64) = W + C
    rows = [torch.arange(start + 16, start + 32) for start in (0, 64, 128)]  # head 1 of q, k, v

    def head_output(q, k, v):
        full = weight.clone()
        full[rows[0]], full[rows[1]], full[rows[2]] = q, k, v
        out = functional_call(attn, {"qkv.weight": full}, (captured["x"],))  # (B, N, H * dh)
        return out[..., 16:32]

    blocks = jacrev(head_output, argnums=(0, 1, 2))(*(weight[r] for r in rows))
    jac = torch.cat([b.reshape(captured["x"].shape[1] * 16, -1) for b in blocks], dim=1)  # (N dh, 3 dh D)
    s = torch.linalg.svdvals(jac.detach())
    assert measured["shape"] == tuple(jac.shape)
    assert math.isclose(measured["sigma_max"], float(s[0]), rel_tol=1e-8)
    assert math.isclose(measured["sigma_min"], float(s[-1]), rel_tol=1e-6)


def test_theorem_bound_reports_every_term():
    model = _vit()
    row = dx.theorem_bound(model, (_images(),), layer=0, head=0)[0]
    for field in ("kappa_x", "kappa_lambda", "kappa_w_q", "kappa_w_k", "kappa_w_v", "kappa_p", "bound", "kappa_j"):
        assert row[field] > 0
    assert row["bound"] == pytest.approx(row["first_term"] + row["second_term"])
    assert row["within_theorem"] is True  # timm initialises the qkv bias to zero
    with torch.no_grad():
        model.blocks[0].attn.qkv.bias.fill_(0.1)
    assert dx.theorem_bound(model, (_images(),))[0]["within_theorem"] is False  # biases: outside the theorem


def test_tracker_can_track_the_jacobian(tmp_path):
    model = _vit()
    tracker = dx.Tracker(model, (_images(),), every=1, path=tmp_path / "metrics.jsonl", jacobian=True, jacobian_iterations=10)
    tracker.step(0)
    rows = dx.read_metrics(tmp_path / "metrics.jsonl", kind="jacobian")
    assert [(r["layer"], r["head"]) for r in rows] == [(0, 0), (1, 0)]
    assert all(r["method"] == "matrix-free" and r["iterations"] <= 10 for r in rows)


def test_lam_ten_lowers_kappa_j_by_making_attention_the_identity():
    """docs/RESULTS.md: at init, lam = 10 makes every query attend to itself (P = I), so J w.r.t. the
    weights is X (x) I on the V block and kappa(J) equals kappa(X)."""
    from speccond.core.spectral import spectrum

    model = _vit()
    speccond.apply(model, speccond.SpectralConfig(lam=10.0))
    image = _images()[:1]
    (case,) = head_cases(model, (image,), layer=0, heads=[0])
    torch.testing.assert_close(case.probabilities()[0], torch.eye(17), rtol=0, atol=1e-12)
    jac = dx.attention_jacobian(model, image, layer=0, head=0, method="exact")[0]
    assert jac["kappa_nonzero"] == pytest.approx(spectrum(case.x[0]).kappa, rel=1e-6)


# a layer the head diagnostics refuse ----------------------------------------------------------------------
def _vit_pooled_by_attention() -> nn.Module:
    """Two token-attention blocks and a timm AttentionPoolLatent head (learned latent queries: not rebuilt)."""
    import timm

    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, embed_dim=32,
                             depth=2, num_heads=2, global_pool="map", num_classes=5)


def test_a_refused_layer_is_named_with_the_layers_that_measure_the_others(tmp_path):
    """Every layer asked for and one refused: an error naming the refusal and the layers= that measures the rest,
    never a table short of a layer; with that layers=, exactly those layers, as head_cases rebuilds them. The
    Tracker refuses when it is built, before any step."""
    model, images = _vit_pooled_by_attention(), _images()
    for call, name in [(lambda **kw: dx.attention_entropy(model, (images,), **kw), "attention_entropy"),
                       (lambda **kw: dx.jacobian_rows(model, (images,), max_iter=5, **kw), "jacobian_rows"),
                       (lambda **kw: dx.Tracker(model, (images,), path=tmp_path / "m.jsonl", jacobian=True, **kw), "Tracker")]:
        with pytest.raises(ValueError, match=rf"layer 2 \(attn_pool.*attention pooling.*; {name}\(\.\.\., layers=\[0, 1\]\) measures the 2 it can rebuild$"):
            call()
    rows = dx.attention_entropy(model, (images,), layers=[0, 1])
    assert [(r["layer"], r["head"]) for r in rows] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for row in rows:
        (case,) = head_cases(model, (images,), row["layer"], [row["head"]])
        with torch.no_grad():
            expected = row_entropy(case.double().probabilities()).mean()
        assert row["entropy"] == pytest.approx(float(expected), abs=1e-12)
    with pytest.raises(ValueError, match="attention pooling has learned latent queries"):
        dx.attention_entropy(model, (images,), layers=[2])
    with pytest.raises(ValueError, match=r"layer must be an int in \[0, 3\)"):
        dx.attention_entropy(model, (images,), layers=[3])
    for wrong in ([], 1, "01"):  # no layer at all, one int, a string: never an empty or guessed table
        with pytest.raises(ValueError, match=rf"^attention_entropy: layers must be a non-empty list of attention layer indices, got {re.escape(repr(wrong))}$"):
            dx.attention_entropy(model, (images,), layers=wrong)
    tracked = dx.Tracker(model, (images,), every=1, path=tmp_path / "m.jsonl", layers=[1], jacobian=True,
                         jacobian_iterations=5).step(0)
    assert {(r["kind"], r["layer"]) for r in tracked if r["kind"] != "spectra"} == {("entropy", 1), ("jacobian", 1)}
    assert [json.loads(line)["layer"] for line in (tmp_path / "m.jsonl").read_text().splitlines()] == [r["layer"] for r in tracked]

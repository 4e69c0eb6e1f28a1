"""speccond.peers, the public peer methods: each against its reference (torch's spectral_norm through training,
timm's qk_norm and LayerScale, the sigma-reparam formula), targeting, removal.

The harness's methods are thin entries over these functions; tests/test_methods.py checks what the harness
adds: every method trains, keeps its defining property after training and survives a state_dict.
"""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from speccond import peers
import speccond

from .conftest import assert_close

pytest.importorskip("timm")
pytest.importorskip("transformers")

from .test_methods import adamw_step  # noqa: E402
from .test_methods import bert as methods_bert  # noqa: E402  (the peer tests' models are the harness tests')
from .test_methods import vit as methods_vit  # noqa: E402


def vit(seed: int = 0, **kwargs) -> nn.Module:
    return methods_vit(seed, **{"depth": 2, **kwargs})


def bert(seed: int = 0) -> nn.Module:
    return methods_bert(seed, layers=2).eval()


IDS = torch.randint(0, 50, (2, 5), generator=torch.Generator().manual_seed(3))


def hidden(model: nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(IDS).last_hidden_state


def test_spectral_norm_is_torch_spectral_norm_on_separate_projections(float64_default):
    """BERT has separate query/key/value Linears: per block = per Linear, so peers.spectral_norm must be
    torch's spectral_norm to float64 precision (same random u, v from the same seed, same power iterations),
    at the call and through training steps that update W and the u, v buffers. The harness's method
    spectral-norm is this function (tests/test_methods.py trains it and round-trips its state_dict)."""
    model, reference = methods_bert(layers=2), methods_bert(layers=2)  # training mode: a power iteration per read
    torch.manual_seed(1)
    names = peers.spectral_norm(model)
    torch.manual_seed(1)
    for name in names:
        module = reference.get_submodule(name.rpartition(".")[0])
        nn.utils.parametrizations.spectral_norm(module, "weight")
    assert len(names) == 2 * 3 and all(name.endswith(("query.weight", "key.weight", "value.weight")) for name in names)
    assert_close(hidden(model.eval()), hidden(reference.eval()))
    model.train(), reference.train()
    ours = torch.optim.AdamW(model.parameters(), lr=1e-2)
    theirs = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    for _ in range(3):
        assert_close(adamw_step(model, ours, (IDS,)), adamw_step(reference, theirs, (IDS,)))
    for name in names:
        module, torch_module = (m.get_submodule(name.rpartition(".")[0]) for m in (model, reference))
        norm, torch_norm = module.parametrizations.weight[0], torch_module.parametrizations.weight[0]
        role = norm.layout.roles  # one block: "q", "k" or "v"
        assert_close(getattr(norm, f"u_{role}"), torch_norm._u)
        assert_close(getattr(norm, f"v_{role}"), torch_norm._v)
        assert_close(module.weight, torch_module.weight)
    assert_close(hidden(model.eval()), hidden(reference.eval()))


def test_sigma_reparam_is_the_formula_and_keeps_the_function_at_the_call(float64_default):
    model = bert()
    before = hidden(model)
    peers.sigma_reparam(model)
    torch.testing.assert_close(hidden(model), before, rtol=1e-6, atol=1e-8)  # gamma = sigma(W0): W_hat = W0
    query = model.encoder.layer[0].attention.self.query
    norm = query.parametrizations.weight[0]
    with torch.no_grad():
        norm.gamma.mul_(2.0)
    stored = query.parametrizations.weight.original
    sigma = torch.linalg.matrix_norm(stored.detach(), ord=2)
    torch.testing.assert_close(query.weight.detach(), norm.gamma.detach() / sigma * stored.detach(), rtol=1e-6, atol=1e-10)


def test_qk_norm_is_timms_qk_norm(float64_default):
    """A plain timm ViT with peers.qk_norm computes what timm's own VisionTransformer(qk_norm=True) does, with
    the same weights and the same (randomised) q_norm / k_norm affine parameters, in training and eval mode.
    The harness's method qk-norm is this function (tests/test_methods.py: every head normalised, trained)."""
    reference = vit(qk_norm=True)
    with torch.no_grad():
        for name, param in reference.named_parameters():
            if "q_norm" in name or "k_norm" in name:
                param.copy_(torch.randn_like(param))
    model = vit(seed=5)
    changed = peers.qk_norm(model)
    assert changed == ["blocks.0.attn.qkv", "blocks.1.attn.qkv"]
    renamed = {k.replace("attn.q_norm", "attn.qkv.q_norm").replace("attn.k_norm", "attn.qkv.k_norm"): v
               for k, v in reference.state_dict().items()}
    model.load_state_dict(renamed)  # strict: one to one
    images = torch.randn(3, 1, 28, 28)
    assert_close(model.train()(images), reference.train()(images))
    assert_close(model.eval()(images), reference.eval()(images))


@pytest.mark.parametrize("peer", [peers.spectral_norm, peers.sigma_reparam, peers.qk_norm])
def test_targets_and_exclude_select_as_speccond_apply_does(peer):
    model = vit()
    changed = peer(model, targets=[r"blocks\.1\."])
    assert changed and all(name.startswith("blocks.1.") for name in changed)
    other = vit()
    assert peer(other, exclude=[r"blocks\.1\."]) == [name.replace("blocks.1.", "blocks.0.") for name in changed]


def test_remove_merges_the_spectral_peers_and_restores_on_request():
    model = bert()
    peers.sigma_reparam(model)
    with torch.no_grad():
        model.encoder.layer[0].attention.self.query.parametrizations.weight[0].gamma.mul_(3.0)
    effective = hidden(model)
    merged = peers.remove(copy.deepcopy(model), merge=True)
    assert peers.applied(merged) == [] and type(merged.encoder.layer[0].attention.self.query) is nn.Linear
    assert_close(hidden(merged), effective)
    original = model.encoder.layer[0].attention.self.query.parametrizations.weight.original
    restored = peers.remove(model, merge=False)
    assert restored.encoder.layer[0].attention.self.query.weight is original  # the trained W, same object
    with pytest.raises(ValueError, match="nothing to remove"):
        peers.remove(restored)


def test_qk_norm_cannot_be_merged_and_is_refused_before_anything_changes():
    model = vit()
    peers.qk_norm(model)
    assert peers.applied(model) == ["blocks.0.attn.qkv", "blocks.1.attn.qkv"]
    images = torch.randn(2, 1, 28, 28)
    before = model.eval()(images)
    with pytest.raises(ValueError, match=r"QKNormHook act on the attention.s activations.*cannot be merged.*merge=False"):
        peers.remove(model, merge=True)
    assert torch.equal(model(images), before) and len(peers.applied(model)) == 2
    peers.remove(model, merge=False)
    assert peers.applied(model) == [] and not hasattr(model.blocks[0].attn.qkv, "q_norm")
    assert set(model.state_dict()) == set(vit().state_dict())


def test_a_peer_refuses_before_anything_changes():
    model = bert()
    speccond.apply(model, speccond.SpectralConfig(lam="auto"))  # q, k, v now carry a parametrization
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match="already has a parametrization"):
        peers.spectral_norm(model)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())
    with pytest.raises(ValueError, match="init_iterations must be an int >= 1"):
        peers.sigma_reparam(bert(), init_iterations=0)
    with pytest.raises(ValueError, match="already normalises q and k"):
        peers.qk_norm(vit(qk_norm=True))


def test_layer_scale_is_timms_layer_scale_on_the_attention_branch(float64_default):
    """timm's VisionTransformer(init_values=...) scales both branches (ls1 after attention, ls2 after the
    MLP); with ls2 fixed at 1 it is the attention-branch LayerScale that peers.layer_scale adds."""
    reference = vit(init_values=0.1)
    with torch.no_grad():
        for block in reference.blocks:
            block.ls1.gamma.copy_(torch.rand_like(block.ls1.gamma))
            block.ls2.gamma.fill_(1.0)
    model = vit(seed=5)
    assert peers.layer_scale(model) == ["blocks.0.attn", "blocks.1.attn"]
    state = {k.replace("ls1.gamma", "attn.layer_scale_gamma"): v for k, v in reference.state_dict().items()
             if "ls2" not in k}
    model.load_state_dict(state)  # strict: one to one
    images = torch.randn(3, 1, 28, 28)
    assert_close(model.eval()(images), reference.eval()(images))
    with pytest.raises(ValueError, match="LayerScaleHook act on"):
        peers.remove(model, merge=True)
    peers.remove(model, merge=False)
    assert set(model.state_dict()) == set(vit().state_dict()) and peers.applied(model) == []


def test_layer_scale_on_a_transformers_model_scales_the_attention_output():
    model, plain = bert(), bert()
    peers.layer_scale(model, init=0.5)
    attention = model.encoder.layer[0].attention.self
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        ours = attention(x)[0]
        theirs = plain.encoder.layer[0].attention.self(x)[0]
    assert_close(ours, 0.5 * theirs)


def test_the_head_diagnostics_refuse_q_and_k_changed_by_a_hook():
    """qk_norm's hook changes q and k after the weights: rebuilding heads from the weights would describe
    another attention, so the diagnostics refuse (and the harness's tracker leaves entropy off)."""
    from speccond.diagnostics import attention_entropy
    from speccond.diagnostics.heads import rebuild_refusal

    model = vit()
    assert rebuild_refusal(model) == ""
    peers.qk_norm(model)
    assert "QKNormHook" in rebuild_refusal(model)
    with pytest.raises(ValueError, match=r"blocks\.0\.attn\.qkv\.weight carries QKNormHook"):
        attention_entropy(model, (torch.randn(2, 1, 28, 28),))
    scaled = vit()
    peers.layer_scale(scaled)  # scales the output, not q or k: the probabilities are still the weights'
    assert rebuild_refusal(scaled) == ""


def test_sigma_reparam_all_layers_is_the_authors_recipe(float64_default):
    """Every Linear and Conv2d, each weight one matrix (a fused qkv gets one sigma), gamma = sigma(W0) so the
    function is kept at the call; with the authors' init the weights are redrawn with std 0.02."""
    model, inputs = methods_vit(), (torch.randn(2, 1, 28, 28),)
    before = model(*inputs)
    layers = {name for name, module in model.named_modules() if isinstance(module, (nn.Linear, nn.Conv2d))}
    names = peers.sigma_reparam_all_layers(model, init_std=None)
    assert set(names) == {f"{name}.weight" for name in layers} and "patch_embed.proj.weight" in names
    assert "blocks.0.attn.qkv.weight" in names and "head.weight" in names
    assert_close(model(*inputs), before)  # gamma = sigma(W0) exactly (SVD), float64 tolerance
    qkv = model.blocks[0].attn.qkv
    reparam = qkv.parametrizations.weight[0]
    for _ in range(60):  # training-mode forwards: one power iteration each, weights unchanged
        model(*inputs)
    stored = qkv.parametrizations.weight.original
    expected = reparam.gamma / torch.linalg.matrix_norm(stored.flatten(1), ord=2) * stored  # the formula
    assert_close(qkv.weight, expected)
    assert torch.linalg.matrix_norm(qkv.weight, ord=2).item() == pytest.approx(reparam.gamma.item(), rel=1e-8)
    assert peers.applied(model) == sorted(names, key=names.index)
    peers.remove(model, merge=False)
    assert not any(nn.utils.parametrize.is_parametrized(m) for m in model.modules())


def test_sigma_reparam_all_layers_redraws_weights_and_refuses_a_parametrized_model():
    model = methods_vit()
    peers.sigma_reparam_all_layers(model)
    redrawn = model.blocks[0].mlp.fc1.parametrizations.weight.original  # (128, 32)
    assert redrawn.std().item() == pytest.approx(0.02, rel=0.1)
    conditioned = methods_vit()
    speccond.apply(conditioned, speccond.SpectralConfig(lam=1.0))
    state = copy.deepcopy(conditioned.state_dict())
    with pytest.raises(ValueError, match="already carry a parametrization"):
        peers.sigma_reparam_all_layers(conditioned)
    assert all(torch.equal(state[k], v) for k, v in conditioned.state_dict().items())  # nothing changed
    with pytest.raises(ValueError, match="no nn.Linear or nn.Conv2d"):
        peers.sigma_reparam_all_layers(nn.Sequential(nn.ReLU()))

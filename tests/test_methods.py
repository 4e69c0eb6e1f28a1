"""The peer methods of the comparison (speccond.harness.methods): each keeps the property that defines it
after training, trains, and survives a state_dict; sigma-reparam equals its formula. That speccond.peers'
spectral_norm and qk_norm (which the methods spectral-norm and qk-norm are) equal torch's spectral_norm and
timm's qk_norm is tested once, in tests/test_peers.py."""
from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import speccond
from speccond.adapters import find_projections
from speccond.harness.config.sections import MethodConfig
from speccond.harness.methods import METHODS
from speccond.harness.methods import apply_method

from .conftest import assert_close

timm_vit = pytest.importorskip("timm.models.vision_transformer")
transformers = pytest.importorskip("transformers")


def vit(seed: int = 0, **kwargs) -> nn.Module:
    torch.manual_seed(seed)
    options = dict(img_size=28, patch_size=7, in_chans=1, num_classes=10, embed_dim=32, depth=1, num_heads=2)
    return timm_vit.VisionTransformer(**{**options, **kwargs})


def bert(seed: int = 0, layers: int = 1) -> nn.Module:
    torch.manual_seed(seed)
    config = transformers.BertConfig(
        vocab_size=50, hidden_size=32, num_hidden_layers=layers, num_attention_heads=2, intermediate_size=64,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )
    return transformers.BertModel(config).train()


def davit(seed: int = 0) -> nn.Module:
    """One (window, channel) pair; the channel attention's logits are timm's k and v blocks (acts_as "vqk")."""
    from timm.models.davit import DaVit

    torch.manual_seed(seed)
    return DaVit(in_chans=1, num_classes=10, depths=(1,), embed_dims=(32,), num_heads=(2,), window_size=7)


def xcit(seed: int = 0) -> nn.Module:
    """One XCA block (q, k already L2-normalised over tokens) and timm's two class-attention blocks."""
    from timm.models.xcit import Xcit

    torch.manual_seed(seed)
    return Xcit(img_size=32, patch_size=8, in_chans=1, num_classes=10, embed_dim=32, depth=1, num_heads=2)


def images() -> tuple:
    return (torch.randn(2, 1, 28, 28),)


MODELS = {
    "timm-vit": (vit, images),
    "hf-bert": (bert, lambda: (torch.randint(0, 50, (2, 5)),)),
}
QK_NORM_MODELS = {**MODELS, "timm-davit": (davit, images), "timm-xcit": (xcit, images)}


def output(model: nn.Module, inputs: tuple) -> torch.Tensor:
    result = model(*inputs)
    return result if isinstance(result, torch.Tensor) else result.last_hidden_state  # (B, ...)


def adamw_step(model: nn.Module, optimizer: torch.optim.Optimizer, inputs: tuple) -> torch.Tensor:
    out = output(model, inputs)
    optimizer.zero_grad(set_to_none=True)
    out.square().mean().backward()
    optimizer.step()
    return out.detach()


def method(name: str) -> MethodConfig:
    return MethodConfig(name=name)


def spectral_params(model: nn.Module) -> list:
    """(module, BlockSpectralNorm) of every q, k, v projection, in site order."""
    return [
        (site.module, site.module.parametrizations[site.param_name][0])
        for site in find_projections(model, speccond.SpectralConfig())
    ]


@pytest.mark.parametrize("name", ["spectral-norm", "sigma-reparam"])
def test_fused_qkv_blocks_are_normalised_separately(name, float64_default):
    """timm's fused qkv: after training, sigma_max of each of the q, k, v blocks of the effective weight is
    1 (spectral-norm) or that block's gamma (sigma-reparam). The blocks are first given very different
    scales, so normalising the whole fused matrix (torch's spectral_norm on qkv) would fail by a factor."""
    model = vit()
    qkv = model.blocks[0].attn.qkv
    with torch.no_grad():
        qkv.weight[:32] *= 0.2  # (3 * 32, 32): q rows
        qkv.weight[64:] *= 3.0  # v rows
    apply_method(model, method(name))
    norm = qkv.parametrizations.weight[0]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(3):
        adamw_step(model, optimizer, (torch.randn(2, 1, 28, 28),))
    with torch.no_grad():
        for _ in range(500):  # each training-mode read is one power iteration: converge the estimate
            qkv.weight
    model.eval()
    effective = qkv.weight.detach()  # (96, 32), (out, in)
    sigma = torch.stack([torch.linalg.matrix_norm(effective[32 * b : 32 * (b + 1)], ord=2) for b in range(3)])
    expected = torch.ones(3) if name == "spectral-norm" else norm.gamma.detach()
    torch.testing.assert_close(sigma, expected, rtol=1e-6, atol=0)
    if name == "sigma-reparam":  # gamma started at sigma(W0) of each block, and the blocks differ by ~15x
        assert norm.gamma[2] > 5 * norm.gamma[0]


@pytest.mark.parametrize("family", sorted(MODELS))
def test_sigma_reparam_keeps_the_function_at_init_and_trains_gamma(family, float64_default):
    """gamma_b = sigma(W0_b) makes W_hat = W0 at init (exactly in eval mode, where u, v stay; to the
    converged power-iteration estimate in training mode), and gamma is a Parameter with a gradient."""
    build, make_inputs = MODELS[family]
    model = build()
    inputs = make_inputs()
    model.eval()
    before = output(model, inputs)
    model.train()
    before_train = output(model, inputs)
    apply_method(model, method("sigma-reparam"))
    model.eval()
    assert_close(output(model, inputs), before)
    model.train()
    after_train = output(model, inputs)
    torch.testing.assert_close(after_train, before_train, rtol=1e-6, atol=1e-6)
    gammas = [norm.gamma for _, norm in spectral_params(model)]
    names = {id(p) for p in model.parameters()}
    assert gammas and all(id(g) in names and g.requires_grad for g in gammas)
    after_train.square().mean().backward()
    for gamma in gammas:
        assert gamma.grad is not None and torch.isfinite(gamma.grad).all() and (gamma.grad != 0).all()


@pytest.mark.parametrize("family", sorted(QK_NORM_MODELS))
def test_qk_norm_normalises_every_head_of_the_logit_blocks_only(family, float64_default):
    """Every head of each block that forms the logits (q and k, or what acts as them: timm's k and v in
    DaViT's channel attention) has zero mean and unit variance over head_dim; v blocks, and XCiT's XCA
    (which already normalises q and k), come out of the projection unchanged."""
    build, make_inputs = QK_NORM_MODELS[family]
    model = build()
    apply_method(model, method("qk-norm"))
    seen = []
    sites = find_projections(model, speccond.SpectralConfig())
    for site in sites:  # registered after qk-norm's hook, so it sees the normalised output
        site.module.register_forward_hook(lambda m, args, out, site=site: seen.append((site, args[0], out)))
    output(model, make_inputs())
    assert len(seen) == len(sites)
    normalised = 0
    for site, x, out in seen:
        layout = site.layout
        for role, acting in zip(layout.roles, site.acts_as or layout.roles):
            rows = layout.block_rows(role, out.shape[-1])  # (H * dh,)
            block = out[..., rows]  # (..., H * dh)
            heads = block.unflatten(-1, (layout.num_heads, -1))  # (..., H, dh)
            if acting == "v" or "XCA" in site.source:
                assert_close(block, F.linear(x, site.module.weight, site.module.bias)[..., rows])
            else:  # default affine (1, 0): zero mean, unit variance over head_dim
                ones = torch.ones_like(heads[..., 0])
                assert_close(heads.mean(-1), torch.zeros_like(ones), torch.float32)
                torch.testing.assert_close(heads.var(-1, unbiased=False), ones, rtol=1e-3, atol=0)
                normalised += 1
    assert normalised >= 2


# Parameters each method adds to the ViT's (depth 1), by name; the parametrized ones also move qkv.weight.
ADDED_PARAMETERS = {
    "sigma-reparam": {"blocks.0.attn.qkv.parametrizations.weight.0.gamma"},
    "qk-norm": {f"blocks.0.attn.qkv.{r}_norm.{p}" for r in "qk" for p in ("weight", "bias")},
    "layer-scale": {"blocks.0.attn.layer_scale_gamma"},
}
ADDED_PARAMETERS["spectral-qk-norm"] = ADDED_PARAMETERS["qk-norm"]
PARAMETRIZED = ("spectral", "spectral-svd", "sigma-reparam", "spectral-norm", "spectral-qk-norm")


@pytest.mark.parametrize("name", METHODS)
def test_every_method_trains(name):
    """One AdamW step: the loss is finite, every parameter gets a finite gradient and moves, the stored
    qkv Parameter is the same object as before (an optimiser built on it stays valid), and the method's
    own parameters are exactly the ones expected."""
    model = vit()
    qkv_weight = model.blocks[0].attn.qkv.weight
    expected = {n for n, _ in model.named_parameters()} | ADDED_PARAMETERS.get(name, set())
    if name in PARAMETRIZED:
        expected = {n.replace("qkv.weight", "qkv.parametrizations.weight.original") for n in expected}
    if name == "sigma-reparam-all":  # every Linear and Conv2d weight, each with its gamma
        layers = [n for n, m in model.named_modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
        expected -= {f"{n}.weight" for n in layers}
        expected |= {f"{n}.parametrizations.weight.{p}" for n in layers for p in ("original", "0.gamma")}
    apply_method(model, method(name))
    params = dict(model.named_parameters())
    assert set(params) == expected
    assert any(p is qkv_weight for p in params.values())
    snapshot = {n: p.detach().clone() for n, p in params.items()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    logits = model(torch.randn(4, 1, 28, 28))  # (4, 10)
    loss = F.cross_entropy(logits, torch.tensor([0, 1, 2, 3]))
    loss.backward()
    assert torch.isfinite(loss)
    for n, p in params.items():
        assert p.grad is not None and torch.isfinite(p.grad).all(), n
    optimizer.step()
    for n, p in params.items():
        assert not torch.equal(p.detach(), snapshot[n]), f"{n} did not move"


@pytest.mark.parametrize("name", METHODS)
def test_state_dict_round_trip(name):
    """A trained model's state_dict loaded (strictly) into a fresh model of the same method reproduces its
    outputs, in eval mode and in a training-mode forward (which reads the saved u, v buffers)."""
    model = vit()
    apply_method(model, method(name))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    inputs = (torch.randn(2, 1, 28, 28),)
    adamw_step(model, optimizer, inputs)
    state = copy.deepcopy(model.state_dict())
    fresh = vit(seed=7)
    apply_method(fresh, method(name))
    fresh.load_state_dict(state)
    model.eval()
    fresh.eval()
    assert_close(fresh(*inputs), model(*inputs))
    model.train()
    fresh.train()
    assert_close(fresh(*inputs), model(*inputs))


def test_unknown_method_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown method 'sigma'.*sigma-reparam.*spectral-norm.*qk-norm"):
        apply_method(vit(), SimpleNamespace(name="sigma", lam=10.0, correction="identity"))


@pytest.mark.parametrize("name", ["sigma-reparam", "spectral-norm", "qk-norm"])
def test_a_model_without_attention_is_an_error(name):
    with pytest.raises(ValueError, match=f"{name.replace('-', '_')} found no q, k, v projections in Sequential"):
        apply_method(nn.Sequential(nn.Linear(4, 4)), method(name))


@pytest.mark.parametrize("name", ["sigma-reparam", "spectral-norm", "qk-norm"])
def test_applying_twice_is_an_error_that_changes_nothing(name):
    model = vit(depth=2)
    apply_method(model, method(name))
    keys, hooks = list(model.state_dict()), [len(m._forward_hooks) for m in model.modules()]
    with pytest.raises(ValueError, match="already has"):
        apply_method(model, method(name))
    assert list(model.state_dict()) == keys
    assert [len(m._forward_hooks) for m in model.modules()] == hooks


def test_qk_norm_on_attention_that_already_normalises_everything_is_an_error():
    model = xcit()
    model.cls_attn_blocks = nn.ModuleList()  # XCA blocks only
    with pytest.raises(ValueError, match="found nothing to normalise in Xcit"):
        apply_method(model, method("qk-norm"))


def test_qk_norm_needs_a_projection_module():
    """nn.MultiheadAttention reads in_proj_weight directly: no module outputs q and k to hook."""
    with pytest.raises(ValueError, match="in_proj_weight.*qk_norm hooks the module"):
        apply_method(nn.MultiheadAttention(8, 2), method("qk-norm"))


def test_qk_norm_refuses_a_model_that_already_normalises_q_and_k():
    with pytest.raises(ValueError, match="already normalises q and k"):
        apply_method(vit(qk_norm=True), method("qk-norm"))


def test_q_only_is_the_natural_eye_3d_d_reading_of_the_paper_on_a_fused_qkv():
    """W + lam * torch.eye(3 D, D) on timm's fused (3D, D) qkv weight puts lam on the q block alone: it is
    exactly the harness's corrected="q" arm (the fair comparison's reading of the paper on fused vision models,
    docs/RESULTS.md)."""
    model = vit()
    qkv = model.blocks[0].attn.qkv
    plain = qkv.weight.detach().clone()  # (3D, D)
    apply_method(model, MethodConfig(name="spectral", corrected="q"))
    natural = plain + 10.0 * torch.eye(*plain.shape)
    assert torch.equal(qkv.weight.detach(), natural)
    assert torch.equal(natural[32:], plain[32:])  # k and v rows untouched


@pytest.mark.parametrize("name", ["spectral", "shifted-init", "spectral-qk-norm"])
def test_the_spectral_methods_pass_key_basis_to_the_correction(name):
    """key_basis=orthogonal reaches SpectralConfig in every method that reads it: the k block carries lam R per
    head (speccond.core.spectral.key_rotations), q and v lam I; shifted-init bakes exactly that in."""
    from speccond.core.spectral import key_rotations

    model = vit()
    qkv = model.blocks[0].attn.qkv
    plain = qkv.weight.detach().clone()  # (3D, D), D = 32, 2 heads of 16
    apply_method(model, MethodConfig(name=name, lam=3.0, key_basis="orthogonal"))
    added = (qkv.weight.detach() - plain).double()
    rotations = key_rotations(2, 16)  # (heads, dh, dh)
    expected_k = torch.block_diag(*(3.0 * rotations))  # (D, D): lam R_h on head h's rows and columns
    torch.testing.assert_close(added[32:64], expected_k, rtol=0, atol=1e-5)
    torch.testing.assert_close(added[:32], 3.0 * torch.eye(32, dtype=torch.float64), rtol=0, atol=1e-5)
    assert speccond.is_conditioned(model) == (name != "shifted-init")


def test_spectral_svd_reads_no_lam_so_every_lam_conditions_alike():
    """spectral-svd does not read lam (its registry entry), so lam = 0, 10 or auto give the same conditioned
    model: for the SVD correction a projection's lam only says corrected or not, and lam = 0 once meant none."""
    inputs = images()
    outputs = []
    for lam in (0.0, 10.0, "auto"):
        model = vit()
        apply_method(model, MethodConfig(name="spectral-svd", lam=lam))
        outputs.append(output(model.eval(), inputs))
    plain = output(vit().eval(), inputs)
    assert not torch.allclose(outputs[0], plain, atol=1e-4)  # the correction is there
    for other in outputs[1:]:
        assert torch.equal(other, outputs[0])


def test_spectral_qk_norm_is_the_correction_then_qk_norm_and_keeps_attention_spread(float64_default):
    """spectral-qk-norm equals speccond.apply(lam = 10) followed by peers.qk_norm, built by hand, and its
    attention no longer depends on lam: at lam = 10 and at lam = 1000 one head's softmax has the same entropy,
    well above lam = 10 alone, which is one-hot (attention computed here from the projections)."""
    from speccond import peers

    inputs = images()
    method_model = vit()
    apply_method(method_model, MethodConfig(name="spectral-qk-norm"))
    by_hand = vit()
    speccond.apply(by_hand, speccond.SpectralConfig(lam=10.0))
    peers.qk_norm(by_hand)
    assert torch.equal(output(method_model.eval(), inputs), output(by_hand.eval(), inputs))

    def head_entropy(model):  # mean entropy of head 0's attention in block 0, in nats
        tokens = {}
        hook = model.blocks[0].norm1.register_forward_hook(lambda m, i, o: tokens.setdefault("x", o))
        model(*inputs)
        hook.remove()
        attn = model.blocks[0].attn
        qkv = attn.qkv(tokens["x"])  # (B, N, 3 D), the q and k normalised by the method's hook if any
        q, k = qkv.unflatten(-1, (3, attn.num_heads, -1)).unbind(2)[:2]  # (B, N, H, dh) each
        logits = (q[..., 0, :] @ k[..., 0, :].transpose(1, 2)) * attn.scale  # (B, N, N)
        probs = logits.softmax(-1)
        return float(-(probs * probs.clamp_min(1e-300).log()).sum(-1).mean())

    spectral = vit()
    apply_method(spectral, MethodConfig(name="spectral"))
    large = vit()
    apply_method(large, MethodConfig(name="spectral-qk-norm", lam=1000.0))
    assert head_entropy(spectral.eval()) < 1e-3  # lam = 10 alone: one-hot (2.6e-10 nats measured)
    assert head_entropy(method_model) > 1.0  # 1.46 nats measured, uniform is log 17 = 2.83
    assert head_entropy(large.eval()) == pytest.approx(head_entropy(method_model), abs=0.01)  # lam no longer matters

"""speccond.verify passes on every correctly described model and fails on a mis-declared layout."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import speccond
from speccond.verify import VerificationError, verify
from tests.models import CASE_IDS, CASES, InterleavedAttention


@pytest.mark.parametrize("backend", ["weight", "activation"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_verify_passes_on_every_case(case, backend):
    if backend == "activation" and not case.activation_ok:
        pytest.skip("activation backend refused for this module")
    model = case.build().eval()
    speccond.apply(model, speccond.SpectralConfig(backend=backend, **case.config))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    results = verify(model, *case.inputs())
    assert results and all("values linear, queries and keys not" in r.checks for r in results)
    if case.name != "torch-mha-separate-qkv":
        assert all("q/k/v rows of each head pair up" in r.checks for r in results)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # the model is not touched


def test_separate_mha_projections_pair_up_across_parameters():
    case = next(c for c in CASES if c.name == "torch-mha-separate-qkv")
    model = case.build().eval()
    speccond.apply(model, speccond.SpectralConfig())
    (result,) = verify(model, *case.inputs())
    assert "q/k/v rows of each head pair up" in result.checks
    assert sorted(result.parameters) == ["attn.k_proj_weight", "attn.q_proj_weight", "attn.v_proj_weight"]


@pytest.mark.parametrize(
    "layout, message",
    [
        (speccond.ProjectionLayout("qkv", 3, arrangement="blocked"), "act as v.*not linear"),
        (speccond.ProjectionLayout("vkq", 3, arrangement="per_head"), "act as v.*not linear"),
        (speccond.ProjectionLayout("qkv", 1, arrangement="per_head"), "not linear|do not pair"),
    ],
    ids=["blocked-instead-of-per-head", "wrong-role-order", "wrong-head-count"],
)
def test_verify_fails_on_a_mis_declared_layout(layout, message):
    model = InterleavedAttention(dim=24, heads=3).eval()
    speccond.apply(model, speccond.SpectralConfig(layouts={r"to_qkv\.weight": layout}))
    with pytest.raises(VerificationError, match=message):
        verify(model, torch.randn(2, 7, 24))


class ReadsWeightDirectly(nn.Module):
    """Calls F.linear on the weight, bypassing the module (and so any forward hook)."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = F.linear(x, self.qkv.weight, self.qkv.bias).chunk(3, dim=-1)  # each (B, N, D)
        return F.scaled_dot_product_attention(q, k, v)


def test_verify_catches_an_activation_hook_that_never_runs():
    layouts = {r"qkv\.weight": speccond.ProjectionLayout("qkv")}
    model = ReadsWeightDirectly()
    speccond.apply(model, speccond.SpectralConfig(layouts=layouts, backend="activation"))
    with pytest.raises(VerificationError, match="does not change the attention output.*backend='weight'"):
        verify(model, torch.randn(2, 5, 16))
    fixed = ReadsWeightDirectly()
    speccond.apply(fixed, speccond.SpectralConfig(layouts=layouts, backend="weight"))
    assert verify(fixed, torch.randn(2, 5, 16))


def test_a_one_token_input_is_blamed_not_the_weight_backend():
    """With one key per query, softmax is 1 whatever q and k are: the message says to verify with a longer input,
    where it once told a model already on the weight backend to use backend='weight'."""
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                                     vocab_size=64)
    model = transformers.BertModel(config).eval()
    speccond.apply(model, speccond.SpectralConfig(lam=1.0))
    with pytest.raises(VerificationError, match=r"query.weight: .*single key on this input .*verify with a longer input") as caught:
        verify(model, input_ids=torch.randint(3, 60, (2, 1)))
    assert "backend='weight'" not in str(caught.value)
    assert verify(model, input_ids=torch.randint(3, 60, (2, 6)))


def test_a_fused_qkv_seeing_one_key_is_blamed_on_the_input_not_the_layout():
    """A fused qkv's correction takes effect through v even with one key per query (MobileViT's last stage at 64 px),
    so the q rows are where the probe finds no effect: it says so, where it once said they "act as values" and sent
    the user to a layout that is right."""
    timm = pytest.importorskip("timm")

    def one_token_vit(image: int):
        torch.manual_seed(0)
        return timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=image, patch_size=8, depth=1,
                                 embed_dim=32, num_heads=2, class_token=False, global_pool="avg", num_classes=3).eval()

    model = one_token_vit(8)  # one 8 px patch, no class token: one token
    speccond.apply(model, speccond.SpectralConfig(lam=3.0))
    with pytest.raises(VerificationError, match=r"qkv.weight .* as q: the output does not change with them on this "
                       r"input; either each query sees a single key here .*verify with a longer input") as caught:
        verify(model, torch.randn(2, 3, 8, 8))
    assert "act as values" not in str(caught.value)
    wider = one_token_vit(16)  # four tokens: the same layout verifies
    speccond.apply(wider, speccond.SpectralConfig(lam=3.0))
    assert verify(wider, torch.randn(2, 3, 16, 16))


class ZeroAttention(nn.Module):
    """Projects q, k, v and returns zeros, as transformers' MRA does on the CPU, where its CUDA kernel is missing."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)  # each (B, N, D)
        return torch.zeros_like(q)


def test_an_attention_output_of_zeros_is_refused_saying_so():
    model = ZeroAttention()
    speccond.apply(model, speccond.SpectralConfig(layouts={r"qkv\.weight": speccond.ProjectionLayout("qkv")}))
    with pytest.raises(VerificationError, match="zero everywhere on the example input.*verify on the device"):
        verify(model, torch.randn(2, 5, 16))


def test_verify_needs_a_conditioned_model():
    with pytest.raises(ValueError, match="not spectrally conditioned"):
        verify(InterleavedAttention(), torch.randn(1, 3, 24))


def test_apply_with_verify_undoes_a_wrong_layout():
    model = InterleavedAttention(dim=24, heads=3).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    wrong = speccond.SpectralConfig(layouts={r"to_qkv\.weight": speccond.ProjectionLayout("qkv", 3)})
    with pytest.raises(VerificationError):
        speccond.apply(model, wrong, verify_with=(torch.randn(2, 7, 24),))
    assert not speccond.is_conditioned(model)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    right = speccond.SpectralConfig(
        layouts={r"to_qkv\.weight": speccond.ProjectionLayout("qkv", 3, arrangement="per_head")}
    )
    assert len(speccond.apply(model, right, verify_with=(torch.randn(2, 7, 24),))) == 3


class PostNormAttention(nn.Module):
    """ALBERT's shape: attention, output projection ``dense``, then LayerNorm(x + dense(context)); the
    module's output is not linear in v, the input of ``dense`` is. With ``position_keys``, the logits also
    get q P^T, P from a Linear of its own on position embeddings (DeBERTa's c2p with pos_key_proj)."""

    def __init__(self, dim: int = 24, heads: int = 3, position_keys: bool = False) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.query, self.key, self.value = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.pos_key_proj = nn.Linear(dim, dim) if position_keys else None
        self.positions = nn.Parameter(torch.randn(7, dim))
        self.dense = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        # (B, N, D) -> (B, H, N, dh)
        split = lambda t: t.reshape(-1, t.shape[-2], self.heads, self.head_dim).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        logits = q @ k.transpose(-2, -1)  # (B, H, N, N)
        if self.pos_key_proj is not None:
            logits = logits + q @ split(self.pos_key_proj(self.positions[:n]))[0].transpose(-2, -1)
        context = (logits / self.head_dim**0.5).softmax(-1) @ v  # (B, H, N, dh)
        return self.norm(x + self.dense(context.transpose(1, 2).reshape(b, n, d)))  # (B, N, D)


def _separate(heads: int = 3) -> speccond.SpectralConfig:
    return speccond.SpectralConfig(
        layouts={rf"^{name}\.weight$": speccond.ProjectionLayout(role, heads) for name, role in
                 (("query", "q"), ("key", "k"), ("value", "v"))}
    )


def test_verify_observes_the_output_projections_input_past_a_residual_and_layer_norm():
    model = PostNormAttention().eval()
    speccond.apply(model, _separate())
    (result,) = verify(model, torch.randn(2, 7, 24))
    assert result.observed == "the input of its output projection 'dense'"
    assert "values linear, queries and keys not" in result.checks and "q/k/v rows of each head pair up" in result.checks
    wrong = PostNormAttention().eval()
    speccond.apply(wrong, _separate(heads=6))  # the head width halved: q head 1 is the back half of head 0
    with pytest.raises(VerificationError, match="do not pair|do not act|act through"):
        verify(wrong, torch.randn(2, 7, 24))


def test_verify_skips_head_pairing_when_queries_meet_position_keys_of_their_own():
    model = PostNormAttention(position_keys=True).eval()
    speccond.apply(model, _separate())
    (result,) = verify(model, torch.randn(2, 7, 24))
    assert "values linear, queries and keys not" in result.checks
    assert "q/k/v rows of each head pair up" not in result.checks
    assert any("the q rows still change the output" in s for s in result.skipped)


def test_apply_verify_with_a_mapping_needs_str_keys_and_undoes_itself():
    model = InterleavedAttention(dim=24, heads=3).eval()
    right = speccond.SpectralConfig(
        layouts={r"to_qkv\.weight": speccond.ProjectionLayout("qkv", 3, arrangement="per_head")}
    )
    with pytest.raises(TypeError, match="keys must be str.*tuple"):
        speccond.apply(model, right, verify_with={0: torch.randn(2, 7, 24)})
    assert not speccond.is_conditioned(model)
    assert len(speccond.apply(model, right, verify_with={"x": torch.randn(2, 7, 24)})) == 3


def _detr():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    backbone = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], out_features=["stage2"],
                                         layer_type="basic")
    config = transformers.DetrConfig(use_timm_backbone=False, use_pretrained_backbone=False, backbone_config=backbone,
                                     num_queries=4, encoder_layers=1, decoder_layers=2, encoder_attention_heads=2,
                                     decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, d_model=32)
    return transformers.DetrModel(config).eval()


def test_attention_whose_input_is_the_same_at_every_token_is_named_with_the_exclude_that_leaves_it_plain():
    """DETR's first decoder self-attention reads its zero queries on every input, so no correction changes its
    output: verify blamed a single key, the weight backend, or the device."""
    images = {"pixel_values": torch.randn(2, 3, 64, 64)}
    model = _detr()
    with pytest.raises(VerificationError, match=r"decoder\.layers\.0\.self_attn: its input on the example holds the "
                       r"same vector at every token .*exclude=\[r\"\^decoder\\\.layers\\\.0\\\.self_attn\$\"\]") as caught:
        speccond.apply(model, speccond.SpectralConfig(lam=3.0), verify_with=images)
    assert "single key" not in str(caught.value) and not speccond.is_conditioned(model)
    speccond.apply(model, speccond.SpectralConfig(lam=3.0, exclude=[r"^decoder\.layers\.0\.self_attn$"]),
                   verify_with=images)
    assert any(row.module.startswith("decoder.layers.1.self_attn") for row in speccond.describe(model).rows)


class OneOfTwoRuns(nn.Module):
    """Two attention modules; the forward runs one (a head that skips a predictor)."""

    def __init__(self) -> None:
        super().__init__()
        self.used, self.skipped = nn.MultiheadAttention(16, 2, batch_first=True), nn.MultiheadAttention(16, 2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x, x, x, need_weights=False)[0]


def test_attention_the_input_never_reaches_is_named_with_the_exclude_that_leaves_it_plain():
    x = torch.randn(2, 5, 16)
    with pytest.raises(VerificationError, match=r"'skipped' was not called by the example input; .*or, where the model "
                       r"never runs it .*exclude=\[r\"\^skipped\$\"\]"):
        speccond.apply(OneOfTwoRuns(), speccond.SpectralConfig(lam=3.0), verify_with=x)
    model = OneOfTwoRuns()
    speccond.apply(model, speccond.SpectralConfig(lam=3.0, exclude=[r"^skipped$"]), verify_with=x)
    assert {row.module for row in speccond.describe(model).rows} == {"used"}

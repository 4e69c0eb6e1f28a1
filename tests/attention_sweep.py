"""Attention families outside the architecture table, by the class of layout each tests.

Each ``SweepCase`` names by hand, from the family's forward, every projection weight the forward reads as
q, k or v (``reads``). ``outcome`` conditions a copy with apply(..., verify_with=...) and sorts the result:

- "covered": conditioned (by apply, or by the declaration its refusal prints), verify passed, and exactly the
  weights the forward reads are conditioned;
- "refused": apply refused, and no declaration it prints, pasted, leaves a weight the forward reads plain
  while verify passes it;
- "wrong": anything else (a traceback out of apply; a false alarm: verify refusing a layout that conditions
  exactly the weights the forward reads without saying it cannot check it; or a pasted declaration that verify
  passes while it leaves a weight the forward reads plain).

scripts/attention_sweep.py prints the counts per class; tests/test_attention_sweep.py checks the cases.
"""
from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, SEQ = 64, 12


@dataclass(frozen=True)
class SweepCase:
    """kind: the class of layout; name: the family; build: () -> the model in eval mode;
    inputs: () -> its keyword inputs; reads: the qualified names of the weights its forward reads as q, k or v."""

    kind: str
    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[], dict]
    reads: frozenset[str]


def _hf(config_class: str, **fields) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import transformers

        base = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=64, num_hidden_layers=1,
                    num_attention_heads=8, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)
        torch.manual_seed(0)
        config = getattr(transformers, config_class)(**{**base, **fields})
        return transformers.AutoModel.from_config(config).eval()

    return build


def _led() -> nn.Module:
    """LED: a Longformer encoder (local and global q/k/v) and a BART decoder."""
    import transformers

    torch.manual_seed(0)
    config = transformers.LEDConfig(
        vocab_size=VOCAB, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32, attention_window=[4],
        max_encoder_position_embeddings=64, max_decoder_position_embeddings=64, pad_token_id=0, bos_token_id=1,
        eos_token_id=2, decoder_start_token_id=2,
    )
    return transformers.LEDModel(config).eval()


def _tokens() -> dict:
    return {"input_ids": torch.randint(3, VOCAB, (2, SEQ))}


def _global_tokens() -> dict:
    """Longformer and LED attend globally only from the tokens global_attention_mask marks."""
    mask = torch.zeros(2, 16, dtype=torch.long)
    mask[:, 0] = 1
    return {"input_ids": torch.randint(3, VOCAB, (2, 16)), "global_attention_mask": mask}


def _hidden() -> dict:
    return {"x": torch.randn(2, SEQ, 32)}


def _qkv(prefix: str, q="q_proj", k="k_proj", v="v_proj") -> set[str]:
    return {f"{prefix}{name}.weight" for name in (q, k, v)}


def _attend(q, k, v, heads: int) -> torch.Tensor:
    """softmax(q k^T / sqrt(dh)) v per head; q, k (B, N, H dqk), v (B, N, H dv) -> (B, N, H dv)."""
    split = lambda t: t.unflatten(-1, (heads, -1)).transpose(1, 2)  # noqa: E731  (B, H, N, d)
    out = F.scaled_dot_product_attention(split(q), split(k), split(v))  # (B, H, N, dv)
    return out.transpose(1, 2).flatten(2)  # (B, N, H dv)


class WideValueAttention(nn.Module):
    """q and k heads 8 wide, v heads 16 wide (LeViT's and EfficientFormer's attn_ratio, Perceiver's v_channels)."""

    def __init__(self, dim: int = 32, num_heads: int = 2, qk_dim: int = 8, v_dim: int = 16) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.q_proj, self.k_proj = nn.Linear(dim, num_heads * qk_dim), nn.Linear(dim, num_heads * qk_dim)
        self.v_proj, self.o_proj = nn.Linear(dim, num_heads * v_dim), nn.Linear(num_heads * v_dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.o_proj(_attend(self.q_proj(x), self.k_proj(x), self.v_proj(x), self.num_heads))


class NormedOutputAttention(nn.Module):
    """The attention output LayerNorm-ed before the output projection (BitNet's attn_sub_norm, BEiT-3's)."""

    def __init__(self, dim: int = 32, num_heads: int = 4) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(dim, dim) for _ in range(3))
        self.inner_norm, self.o_proj = nn.LayerNorm(dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        context = _attend(self.q_proj(x), self.k_proj(x), self.v_proj(x), self.num_heads)
        return self.o_proj(self.inner_norm(context))


class LocalGlobalAttention(nn.Module):
    """Two sets of q/k/v: local attention inside windows of 4 tokens, global attention over every token."""

    def __init__(self, dim: int = 32, num_heads: int = 4, window: int = 4) -> None:
        super().__init__()
        self.num_heads, self.window = num_heads, window
        self.query, self.key, self.value = (nn.Linear(dim, dim) for _ in range(3))
        self.query_global, self.key_global, self.value_global = (nn.Linear(dim, dim) for _ in range(3))
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        windows = x.reshape(b * n // self.window, self.window, d)  # (B N / w, w, D)
        local = _attend(self.query(windows), self.key(windows), self.value(windows), self.num_heads).reshape(b, n, d)
        every = _attend(self.query_global(x), self.key_global(x), self.value_global(x), self.num_heads)
        return self.out_proj(local + every)


class ExpertQueryAttention(nn.Module):
    """Heads as a mixture of experts (JetMoE's MoA, SwitchHead): each token's queries come from its expert's
    input projection (experts (E, H dh, D), chosen by a router), keys and values from a shared kv_proj."""

    def __init__(self, dim: int = 32, num_heads: int = 4, experts: int = 3) -> None:
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.router = nn.Linear(dim, experts, bias=False)
        self.experts = nn.Parameter(torch.randn(experts, dim, dim) / math.sqrt(dim))  # (E, H dh, D)
        self.kv_proj, self.o_proj = nn.Linear(dim, 2 * dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        chosen = self.router(x).argmax(-1)  # (B, N)
        q = torch.einsum("bnd,bnod->bno", x, self.experts[chosen])  # (B, N, H dh)
        k, v = self.kv_proj(x).chunk(2, dim=-1)  # (B, N, H dh) each
        return self.o_proj(_attend(q, k, v, self.num_heads))


class Tiny(nn.Module):
    """One attention module behind a LayerNorm, as a model: forward(x (B, N, 32))."""

    def __init__(self, attention: nn.Module) -> None:
        super().__init__()
        self.norm, self.attn = nn.LayerNorm(32), attention

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(self.norm(x))


def _tiny(cls: type) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        torch.manual_seed(0)
        return Tiny(cls()).eval()

    return build


def _timm(variant: str, **kwargs) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import timm

        torch.manual_seed(0)
        return timm.create_model(variant, pretrained=False, num_classes=5, **kwargs).eval()

    return build


def _images(size: int = 32) -> Callable[[], dict]:
    return lambda: {"x": torch.randn(2, 3, size, size)}


_LLAMA = "layers.0.self_attn."
_TIMM_TINY = dict(img_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=4)

CASES: list[SweepCase] = [
    # 1. per-head q/k norms the prediction must call as the module does
    SweepCase("qk-norm per head", "hf-stablelm", _hf("StableLmConfig", num_key_value_heads=4, qk_layernorm=True),
              _tokens, frozenset(_qkv(_LLAMA))),
    SweepCase("qk-norm per head", "hf-cohere", _hf("CohereConfig", num_key_value_heads=4, use_qk_norm=True),
              _tokens, frozenset(_qkv(_LLAMA))),
    SweepCase("qk-norm per head", "hf-exaone4", _hf("Exaone4Config", num_key_value_heads=4), _tokens,
              frozenset(_qkv(_LLAMA))),
    SweepCase("qk-norm per head", "hf-hunyuan-v1-dense", _hf("HunYuanDenseV1Config", num_key_value_heads=4, head_dim=8),
              _tokens, frozenset(_qkv(_LLAMA))),
    SweepCase("qk-norm per head", "hf-olmo2", _hf("Olmo2Config", num_key_value_heads=4), _tokens,
              frozenset(_qkv(_LLAMA))),
    # 2a. a normalisation between the attention and the output projection
    SweepCase("norm before output", "hf-diffllama", _hf("DiffLlamaConfig", num_key_value_heads=4), _tokens,
              frozenset(_qkv(_LLAMA))),
    SweepCase("norm before output", "hf-bitnet", _hf("BitNetConfig", num_key_value_heads=4), _tokens,
              frozenset(_qkv(_LLAMA))),
    SweepCase("norm before output", "timm-beit3-style", _timm("vit_base_patch16_224", scale_attn_norm=True, **_TIMM_TINY),
              _images(), frozenset({"blocks.0.attn.qkv.weight"})),
    SweepCase("norm before output", "timm-eva-scale-attn-inner",
              _timm("eva02_tiny_patch14_224", img_size=28, patch_size=14, depth=1, scale_attn_inner=True), _images(28),
              frozenset({"blocks.0.attn.qkv.weight"})),
    SweepCase("norm before output", "custom-normed-output", _tiny(NormedOutputAttention), _hidden,
              frozenset(_qkv("attn."))),
    # 2b. q/k heads and v heads of different widths
    SweepCase("v wider than q/k", "hf-perceiver",
              _hf("PerceiverConfig", base={}, num_latents=6, d_latents=32, d_model=16, num_blocks=1,
                  num_self_attends_per_block=1, num_self_attention_heads=2, num_cross_attention_heads=1,
                  qk_channels=16, v_channels=32),
              lambda: {"inputs": torch.randn(2, 5, 16)},
              frozenset({f"encoder.{part}.attention.self.{role}.weight"
                         for part in ("cross_attention", "self_attends.0")
                         for role in ("query", "key", "value")})),
    SweepCase("v wider than q/k", "custom-wide-value", _tiny(WideValueAttention), _hidden, frozenset(_qkv("attn."))),
    # 3a. two sets of q/k/v in one module
    SweepCase("two q/k/v sets", "hf-longformer",
              _hf("LongformerConfig", num_attention_heads=4, attention_window=[4], max_position_embeddings=64),
              _global_tokens,
              frozenset(_qkv("encoder.layer.0.attention.self.", "query", "key", "value")
                        | _qkv("encoder.layer.0.attention.self.", "query_global", "key_global", "value_global"))),
    SweepCase("two q/k/v sets", "hf-led", _led, lambda: {**_global_tokens(), "decoder_input_ids": torch.randint(3, VOCAB, (2, 6))},
              frozenset(_qkv("encoder.layers.0.self_attn.longformer_self_attn.", "query", "key", "value")
                        | _qkv("encoder.layers.0.self_attn.longformer_self_attn.", "query_global", "key_global",
                               "value_global")
                        | _qkv("decoder.layers.0.self_attn.") | _qkv("decoder.layers.0.encoder_attn."))),
    SweepCase("two q/k/v sets", "custom-local-global", _tiny(LocalGlobalAttention), _hidden,
              frozenset(_qkv("attn.", "query", "key", "value") | _qkv("attn.", "query_global", "key_global",
                                                                       "value_global"))),
    # 3b. heads as a mixture of experts
    SweepCase("expert heads", "hf-jetmoe",
              _hf("JetMoeConfig", num_key_value_heads=4, kv_channels=8, num_local_experts=2, num_experts_per_tok=1),
              _tokens, frozenset({"layers.0.self_attention.experts.input_linear.weight",
                                  "layers.0.self_attention.kv_proj.weight"})),
    SweepCase("expert heads", "custom-expert-query", _tiny(ExpertQueryAttention), _hidden,
              frozenset({"attn.experts", "attn.kv_proj.weight"})),
]


def outcome(case: SweepCase) -> tuple[str, str]:
    """("covered" | "refused" | "wrong", why), as the module docstring defines them."""
    import speccond
    from speccond import SpectralConfig
    from speccond.verify import VerificationError

    model, inputs = case.build(), case.inputs()
    conditioned = copy.deepcopy(model)
    try:
        speccond.apply(conditioned, SpectralConfig(), verify_with=inputs)
    except VerificationError as error:  # apply's own layout refused by its verify: right, or a false alarm?
        unverified = copy.deepcopy(model)
        speccond.apply(unverified, SpectralConfig())
        if _conditioned_as_read(case, unverified, "")[0] == "covered" and "cannot check" not in str(error):
            return "wrong", f"verify refused apply's own layout: {str(error)[:200]}"
        return "refused", str(error)[:200]
    except (ValueError, TypeError) as error:
        return _refusal(case, model, inputs, str(error))
    except Exception as error:  # noqa: BLE001  a traceback out of apply is what the sweep looks for
        return "wrong", f"apply raised {type(error).__name__}: {str(error).splitlines()[0][:160]}"
    return _conditioned_as_read(case, conditioned, "apply")


def _conditioned_as_read(case: SweepCase, model: nn.Module, how: str) -> tuple[str, str]:
    from speccond.core.backends import attachments

    got = {item.qualified_name for item in attachments(model)}
    if got != case.reads:
        plain, extra = sorted(case.reads - got), sorted(got - case.reads)
        return "wrong", f"{how} passed verify but left {plain} plain and conditioned {extra}"
    return "covered", f"{how}: {len(got)} weights conditioned, verify passed"


def _refusal(case: SweepCase, model: nn.Module, inputs: dict, message: str) -> tuple[str, str]:
    """A refusal with a complete declaration is judged by that declaration (each placeholder filled with each
    option offered): "covered" where one conditions exactly what the forward reads and verify passes it;
    "wrong" where verify passes one that leaves a weight the forward reads plain, or refuses the one that is
    right without saying it cannot check it (a false alarm); else "refused"."""
    import speccond
    from speccond import ProjectionLayout, SpectralConfig  # noqa: F401  (read by eval)

    first = message.splitlines()[0][:160]
    match = re.search(r"SpectralConfig\(layouts=\{\n(.*?)\n\s*\}\)", message, re.DOTALL)
    if match is None:
        return "refused", _reason(message)
    verdicts = []
    for text in _fills(match.group(1)):
        config = SpectralConfig(layouts=eval("{" + text + "}"))  # noqa: S307  the declaration the message prints
        conditioned = copy.deepcopy(model)
        try:
            speccond.apply(conditioned, config, verify_with=inputs)
        except (ValueError, TypeError) as error:
            unverified = copy.deepcopy(model)
            speccond.apply(unverified, config)
            right = _conditioned_as_read(case, unverified, "")[0] == "covered"
            if right and "cannot check" not in str(error):
                return "wrong", f"verify refused the printed declaration, which is right: {str(error)[:200]}"
            verdicts.append(("refused", f"{first} (the printed declaration: {str(error)[:120]})"))
            continue
        except Exception as error:  # noqa: BLE001
            return "wrong", f"the printed declaration raised {type(error).__name__} out of apply"
        verdict, why = _conditioned_as_read(case, conditioned, "the printed declaration")
        if verdict == "wrong":
            return verdict, why
        verdicts.append((verdict, why))
    return next((v for v in verdicts if v[0] == "covered"), verdicts[0])


def _reason(message: str) -> str:
    """The line of a refusal that says why (or its first line)."""
    return next((line.strip()[:200] for line in message.splitlines() if "cannot be declared" in line),
                message.splitlines()[0][:160])


def _fills(text: str) -> list[str]:
    """The declaration with each placeholder filled by each option it offers (a number where it asks one)."""
    holes = re.findall(r"<[^<>]*>", text)
    if not holes:
        return [text]
    hole = holes[0]
    options = re.findall(r'"(\w+)"', hole) or ["1", "2", "4", "8"]
    options = [f'"{o}"' if '"' in hole else o for o in options]
    return [filled for option in options for filled in _fills(text.replace(hole, option, 1))]

"""timm families of the architecture table (tests/architectures.py): tiny models built from config
(``pretrained=False``, img_size 32 where the model takes it), each forward well under 0.3 s on one thread.

Where ``timm.create_model`` cannot take the small sizes (the variant fixes the kwargs, or the model
builds from a config dataclass), the model class is built directly from its config. The reference
attention probabilities are timm's own: :func:`timm_attentions` turns ``fused_attn`` off and captures
the input of each attention module's ``attn_drop``, which is its softmax output.
"""
from __future__ import annotations

import copy
from typing import Iterable

import torch
from torch import nn

from speccond import ProjectionLayout as L
from tests.architectures import Arch

IMAGE = 32


def images(size: int = IMAGE):
    return lambda: {"x": torch.randn(2, 3, size, size)}


def timm_model(variant: str, **kwargs):
    """A builder: timm.create_model(variant, pretrained=False, num_classes=5, **kwargs), eval mode."""

    def build() -> nn.Module:
        import timm

        return timm.create_model(variant, pretrained=False, num_classes=5, **kwargs).eval()

    return build


def timm_attentions(names: Iterable[str]):
    """(model, inputs) -> timm's own softmax probabilities {attention module name: (B, H, N, N)} for the
    attention modules ``names``: ``fused_attn`` off, the input of each one's ``attn_drop`` captured (NesT's
    (B, H, T, N, N) blocks are folded into the batch, (B * T, H, N, N))."""
    names = list(names)

    def attention(model: nn.Module, inputs: dict) -> dict[str, torch.Tensor]:
        eager = copy.deepcopy(model)
        captured: dict[str, torch.Tensor] = {}
        handles = []
        for name in names:
            module = eager.get_submodule(name)
            if hasattr(module, "fused_attn"):
                module.fused_attn = False

            def hook(_drop, args, name=name):
                captured.setdefault(name, args[0].detach())

            handles.append(module.attn_drop.register_forward_pre_hook(hook))
        try:
            with torch.no_grad():
                eager(**inputs)
        finally:
            for handle in handles:
                handle.remove()
        out = {}
        for name in names:
            probabilities = captured[name]
            if probabilities.dim() == 5:  # (B, H, T, N, N) -> (B * T, H, N, N)
                probabilities = probabilities.transpose(1, 2).flatten(0, 1)
            out[name] = probabilities
        return out

    return attention


def fused(prefix: str, heads: Iterable[int], roles: str = "qkv", name: str = "qkv", **layout) -> dict[str, L]:
    """``prefix.format(i) + name + ".weight"`` -> L(roles, heads[i]) for each layer i."""
    return {f"{prefix.format(i)}{name}.weight": L(roles, h, **layout) for i, h in enumerate(heads)}


CASES: list[Arch] = []


def _perturbed(build, *suffixes: str):
    """``build`` with the zero-initialised parameters ending in ``suffixes`` drawn from N(0, 0.5^2), so that
    the checks see them (timm starts relative position tables at zero)."""

    def perturbed() -> nn.Module:
        model = build()
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if name.endswith(suffixes):
                    parameter.normal_(0.0, 0.5)
        return model

    return perturbed


def _direct(path: str, cfg=None, **kwargs):
    """A builder for a model class built directly, ``timm.models.<path>(cfg=cfg(), num_classes=5, **kwargs)``
    (``cfg`` a function returning its config dataclass, or None)."""

    def build() -> nn.Module:
        import importlib

        module_name, cls_name = path.rsplit(".", 1)
        model_class = getattr(importlib.import_module(f"timm.models.{module_name}"), cls_name)
        return model_class(**({"cfg": cfg()} if cfg else {}), num_classes=5, **kwargs).eval()

    return build


def _mvit_cfg():
    from timm.models.mvitv2 import MultiScaleVitCfg

    return MultiScaleVitCfg(depths=(1, 1), embed_dim=16, num_heads=1, stride_kv_adaptive=(2, 2))


def _maxvit_cfg():
    from timm.models.maxxvit import MaxxVitCfg, MaxxVitTransformerCfg

    return MaxxVitCfg(
        embed_dim=(16, 32), depths=(1, 1), block_type=("M", "M"), stem_width=(8, 16),
        transformer_cfg=MaxxVitTransformerCfg(dim_head=8, window_size=(2, 2), grid_size=(2, 2)),
    )


def _existing(name: str):
    from tests import adapter_models, models

    return {
        "vit": models.timm_vit, "deit": models.timm_deit, "swin": adapter_models.timm_swin,
        "xcit": adapter_models.timm_xcit, "davit": adapter_models.timm_davit,
        "vit-attention-pool": adapter_models.timm_vit_map,
    }[name]


def _lazy(name: str):
    return lambda: _existing(name)().eval()


CASES += [
    # -- already covered by the adapter table (tests/adapter_models.py) -----------------------------------
    Arch("timm-vit", _lazy("vit"), images(), fused("blocks.{}.attn.", (4, 4)),
         attention=timm_attentions(f"blocks.{i}.attn" for i in range(2))),
    Arch("timm-deit", _lazy("deit"), images(), fused("blocks.{}.attn.", (3, 3)),
         attention=timm_attentions(f"blocks.{i}.attn" for i in range(2))),
    Arch("timm-swin", _lazy("swin"), images(),
         {"layers.0.blocks.0.attn.qkv.weight": L("qkv", 2), "layers.0.blocks.1.attn.qkv.weight": L("qkv", 2),
          "layers.1.blocks.0.attn.qkv.weight": L("qkv", 4)},
         diagnostics_refused="Swin attends inside"),
    Arch("timm-xcit", _lazy("xcit"), images(),
         {"blocks.0.attn.qkv.weight": L("qkv", 4),
          **{f"cls_attn_blocks.0.attn.{r}.weight": L(r, 4) for r in "qkv"}},
         diagnostics_refused="channel attention", reason="XCA: L2-normalised q, k keep only the correction's direction"),
    Arch("timm-davit", _lazy("davit"), images(),
         {f"stages.{s}.blocks.0.{b}.attn.qkv.weight": L("qkv", 2 * (s + 1)) for s in range(2) for b in range(2)},
         diagnostics_refused="inside windows"),
    Arch("timm-vit-attention-pool", _lazy("vit-attention-pool"), images(),
         {"blocks.0.attn.qkv.weight": L("qkv", 2), "attn_pool.q.weight": L("q", 2), "attn_pool.kv.weight": L("kv", 2)},
         attention=timm_attentions(["blocks.0.attn"])),
]

BUILD = {
    "eva": timm_model("eva02_tiny_patch14_224", img_size=IMAGE, patch_size=8, embed_dim=32, depth=2, num_heads=2,
                      ref_feat_shape=(4, 4)),
    "beit": _perturbed(
        timm_model("beit_base_patch16_224", img_size=IMAGE, patch_size=8, embed_dim=32, depth=2, num_heads=2),
        "relative_position_bias_table",
    ),
    "cait": timm_model("cait_xxs24_224", img_size=IMAGE, patch_size=8, embed_dim=32, depth=2, num_heads=2,
                       depth_token_only=1),
    "pvt-v2": timm_model("pvt_v2_b0", depths=(1, 1), embed_dims=(16, 32), num_heads=(1, 2), sr_ratios=(2, 1),
                         mlp_ratios=(2, 2)),
    "crossvit": timm_model("crossvit_tiny_240", img_size=(IMAGE, IMAGE), img_scale=(1.0, 1.0), patch_size=[8, 16],
                           embed_dim=[16, 32], depth=[[1, 1, 0]], num_heads=[2, 2], mlp_ratio=[2, 2, 1]),
    "mvitv2": _direct("mvitv2.MultiScaleVit", _mvit_cfg, img_size=(IMAGE, IMAGE)),
    "maxvit": _direct("maxxvit.MaxxVit", _maxvit_cfg, img_size=IMAGE),
    "efficientformer": _direct("efficientformer.EfficientFormer", depths=(1, 1, 1, 1), embed_dims=(16, 16, 32, 32),
                               num_vit=1),
    "tnt": timm_model("tnt_s_patch16_224", img_size=IMAGE, patch_size=8, embed_dim=32, inner_dim=8, depth=1,
                      num_heads_outer=2, num_heads_inner=2),
    "nest": _direct("nest.Nest", img_size=IMAGE, patch_size=4, num_levels=3, embed_dims=(16, 32, 32),
                    num_heads=(2, 2, 2), depths=(1, 1, 1)),
    "gcvit": _direct("gcvit.GlobalContextVit", img_size=IMAGE, window_ratio=(8, 8), embed_dim=16, depths=(1, 2),
                     num_heads=(2, 4)),
    "hiera": timm_model("hiera_tiny_224", img_size=IMAGE, embed_dim=16, num_heads=1, stages=(1, 1), q_pool=1,
                        mask_unit_size=(2, 2), patch_stride=(4, 4), patch_kernel=(7, 7), patch_padding=(3, 3)),
    "tiny-vit": _direct("tiny_vit.TinyVit", embed_dims=(16, 32), depths=(1, 1), num_heads=(1, 2), window_sizes=(2, 2)),
    "fastvit": timm_model("fastvit_t8", layers=(1, 1), embed_dims=(16, 32), mlp_ratios=(2, 2),
                          token_mixers=("repmixer", "attention"), pos_embs=(None, None), downsamples=(False, True)),
    "coat": timm_model("coat_tiny", img_size=IMAGE, embed_dims=[16, 16, 16, 16], serial_depths=[1, 1, 1, 1],
                       parallel_depth=0, num_heads=8),
    "twins": timm_model("twins_svt_small", img_size=IMAGE, embed_dims=(16, 32), num_heads=(1, 2), mlp_ratios=(2, 2),
                        depths=(2, 2), wss=(2, 2), sr_ratios=(2, 1)),
    "convit": timm_model("convit_tiny", img_size=IMAGE, patch_size=8, embed_dim=8, num_heads=4, depth=2,
                         local_up_to_layer=1),
    "levit": timm_model("levit_128s", img_size=IMAGE, embed_dim=(16, 32, 48), key_dim=8, num_heads=(2, 2, 2),
                        depth=(1, 1, 1)),
    "visformer": timm_model("visformer_tiny", img_size=IMAGE, init_channels=16, embed_dim=48, depth=(1, 1, 1),
                            num_heads=2),
    "swinv2": timm_model("swinv2_tiny_window8_256", img_size=IMAGE, patch_size=4, window_size=4, embed_dim=16,
                         depths=(1, 1), num_heads=(2, 2)),
}


def _case(name: str, params: dict, **fields) -> Arch:
    return Arch(f"timm-{name}", BUILD[name], images(224 if name == "efficientformer" else IMAGE), params, **fields)


QKV = "qkv"
WEIGHT_ONLY = "F.linear(x, qkv.weight, cat(q_bias, k_bias, v_bias)): the weight backend only"
REFUSED = "cannot be conditioned by speccond"
CASES += [
    # -- q_bias / v_bias families read qkv.weight with F.linear: weight backend only ----------------------
    _case("eva", fused("blocks.{}.attn.", (2, 2)), activation_ok=False,
          attention=timm_attentions(f"blocks.{i}.attn" for i in range(2)), reason=f"rotary q, k; {WEIGHT_ONLY}"),
    _case("beit", fused("blocks.{}.attn.", (2, 2)), activation_ok=False,
          attention=timm_attentions(f"blocks.{i}.attn" for i in range(2)), reason=f"relative position bias; {WEIGHT_ONLY}"),
    _case("swinv2", {"layers.0.blocks.0.attn.qkv.weight": L(QKV, 2), "layers.1.blocks.0.attn.qkv.weight": L(QKV, 2)},
          activation_ok=False, diagnostics_refused="cosine logits",
          reason=f"cosine attention: note, the Q/K correction keeps only its direction; {WEIGHT_ONLY}"),
    # -- fused qkv in ViT's layout -------------------------------------------------------------------------
    _case("cait", {**fused("blocks.{}.attn.", (2, 2)),
                   **{f"blocks_token_only.0.attn.{r}.weight": L(r, 2) for r in "qkv"}},
          diagnostics_refused="talking heads mix", reason="talking heads mix logits across heads; verify checks only that C acts"),
    _case("convit", {"blocks.0.attn.qk.weight": L("qk", 4), "blocks.0.attn.v.weight": L("v", 4),
                     "blocks.1.attn.qkv.weight": L(QKV, 4)},
          attention=timm_attentions(["blocks.1.attn"]), reason="GPSA: the correction conditions the content softmax only"),
    _case("fastvit", {"stages.1.blocks.0.token_mixer.qkv.weight": L(QKV, 1)},
          attention=timm_attentions(["stages.1.blocks.0.token_mixer"])),
    # -- separate projections ------------------------------------------------------------------------------
    _case("crossvit", {"blocks.0.blocks.0.0.attn.qkv.weight": L(QKV, 2), "blocks.0.blocks.1.0.attn.qkv.weight": L(QKV, 2),
                       **{f"blocks.0.fusion.{b}.attn.w{r}.weight": L(r, 2) for b in range(2) for r in "qkv"}},
          attention=timm_attentions(["blocks.0.blocks.0.0.attn", "blocks.0.blocks.1.0.attn"])),
    _case("tnt", {f"blocks.0.attn_{where}.{name}.weight": L(name, 2) for where in ("in", "out") for name in ("qk", "v")},
          attention=timm_attentions(["blocks.0.attn_in", "blocks.0.attn_out"])),
    _case("pvt-v2", {**{f"stages.{s}.blocks.0.attn.q.weight": L("q", h) for s, h in enumerate((1, 2))},
                     **{f"stages.{s}.blocks.0.attn.kv.weight": L("kv", h) for s, h in enumerate((1, 2))}},
          attention=timm_attentions(["stages.1.blocks.0.attn"]), reason="k, v on spatially reduced tokens"),
    _case("twins", {"blocks.0.0.attn.qkv.weight": L(QKV, 1), "blocks.1.0.attn.qkv.weight": L(QKV, 2),
                    **{f"blocks.{s}.1.attn.q.weight": L("q", h) for s, h in enumerate((1, 2))},
                    **{f"blocks.{s}.1.attn.kv.weight": L("kv", h) for s, h in enumerate((1, 2))}},
          diagnostics_refused="ws x ws groups", reason="locally grouped + sub-sampled global attention"),
    # -- pooled, windowed ----------------------------------------------------------------------------------
    _case("mvitv2", {"stages.0.blocks.0.attn.qkv.weight": L(QKV, 1), "stages.1.blocks.0.attn.qkv.weight": L(QKV, 2)},
          diagnostics_refused="pools and normalises", reason="pooling and norms after the projection: note"),
    _case("hiera", {"blocks.0.attn.qkv.weight": L(QKV, 1), "blocks.1.attn.qkv.weight": L(QKV, 2)},
          diagnostics_refused="mask units"),
    _case("maxvit", {f"stages.{s}.blocks.0.attn_{p}.attn.qkv.weight": L(QKV, h, arrangement="per_head")
                     for s, h in enumerate((2, 4)) for p in ("block", "grid")},
          diagnostics_refused="block or grid partitions", reason="qkv split per head (head_first)"),
    _case("gcvit", {"stages.0.blocks.0.attn.qkv.weight": L(QKV, 2), "stages.1.blocks.0.attn.qkv.weight": L(QKV, 4),
                    "stages.1.blocks.1.attn.qkv.weight": L("kv", 4)},
          diagnostics_refused="windows", reason="global blocks: queries from the global query generator, only K, V corrected"),
    _case("nest", fused("levels.{}.transformer_encoder.0.attn.", (2, 2, 2)),
          attention=timm_attentions(f"levels.{i}.transformer_encoder.0.attn" for i in range(3))),
    # -- refused -------------------------------------------------------------------------------------------
    _case("efficientformer", {}, refused=rf"efficientformer\.Attention.*{REFUSED}.*one head width",
          reason="per head q, k of key_dim and v of attn_ratio * key_dim in one weight: no single head width"),
    _case("tiny-vit", {}, refused=rf"tiny_vit\.Attention.*{REFUSED}.*one head width",
          reason="per head q, k of key_dim and v of attn_ratio * key_dim in one weight: no single head width"),
    _case("levit", {}, refused=rf"levit\.Attention.*{REFUSED}.*BatchNorm",
          reason="projections are Linear + BatchNorm (LinearNorm) with unequal per-head widths"),
    _case("visformer", {}, refused=rf"visformer\.Attention.*{REFUSED}.*1x1 nn\.Conv2d",
          reason="1x1 Conv2d qkv: a 4-D weight"),
    _case("coat", {}, refused=rf"coat\.FactorAttnConvRelPosEnc.*{REFUSED}.*no softmax\(q k\^T\)",
          reason="factorized attention q (softmax_N(k)^T v): no softmax(q k^T) to condition"),
]

def volo() -> nn.Module:
    """A tiny VOLO: one Outlooker stage (outlook attention), three plain-attention stages, two class-attention
    blocks (timm's variants fix their sizes, so the class is built directly)."""
    from timm.models.volo import VOLO

    return VOLO(layers=(1, 1, 1, 1), img_size=IMAGE, embed_dims=(16, 32, 32, 32), num_heads=(1, 2, 2, 2),
                num_classes=5).eval()


VOLO_OUTLOOKERS = r"^network\.0\."

# -- no adapter names these: the layout is inferred by probing (speccond.adapters.inferred); each ``params``
# entry is read from the family's forward. The head diagnostics refuse them.
INFERRED = "its layout was inferred by probing"
BUILD.update({
    "vit-rope": timm_model("vit_base_patch16_rope_224", img_size=IMAGE, patch_size=8, embed_dim=32, depth=2,
                           num_heads=2),
    "pe-core": timm_model("vit_pe_core_tiny_patch16_384", img_size=IMAGE, patch_size=8, embed_dim=32, depth=2,
                          num_heads=2),
    "samvit": timm_model("samvit_base_patch16", img_size=IMAGE, patch_size=8, embed_dim=32, depth=2, num_heads=2,
                         global_attn_indexes=(1,), window_size=2),
    "edgenext": timm_model("edgenext_xx_small", depths=(1, 1, 1, 1), dims=(16, 16, 32, 32), heads=(2, 2, 2, 4)),
})
CASES += [
    # AttentionRope: qkv(x).reshape(B, N, 3, H, dh): blocked; rotary q, k (PE-core also: latent attention pooling)
    _case("vit-rope", fused("blocks.{}.attn.", (2, 2)), diagnostics_refused=INFERRED, reason="layout inferred; rotary"),
    _case("pe-core", {**fused("blocks.{}.attn.", (2, 2)), "attn_pool.q.weight": L("q", 8), "attn_pool.kv.weight": L("kv", 8)},
          diagnostics_refused=INFERRED, reason="layout inferred; rotary; latent pooling (8 heads) by its adapter"),
    # SAM: qkv(x).reshape(B, h w, 3, H, dh): blocked; windowed blocks and decomposed relative positions
    _case("samvit", fused("blocks.{}.attn.", (2, 2)), diagnostics_refused=INFERRED,
          reason="layout inferred; windows, relative positions"),
    # EdgeNeXt XCA: qkv(x).reshape(B, N, 3, H, C / H): blocked; channel attention on L2-normalised q, k
    _case("edgenext", {f"stages.{s}.blocks.0.xca.qkv.weight": L(QKV, h) for s, h in ((1, 2), (2, 2), (3, 4))},
          diagnostics_refused=INFERRED, reason="layout inferred; channel attention (XCA)"),
    Arch("timm-efficientvit-mit", timm_model("efficientvit_b0"), images(),
         refused=r"LiteMLA.*ReLU linear attention.*no softmax over query-key scores",
         reason="ReLU linear attention with 1x1-convolution projections: no softmax over q k^T"),
    Arch("timm-efficientvit-msra", timm_model("efficientvit_m0", img_size=64), images(64),
         refused=r"CascadedGroupAttention.*ConvNorm.*previous head's output",
         reason="per-head 1x1 conv + BatchNorm projections, heads cascaded"),
    Arch("timm-mobilevitv2", timm_model("mobilevitv2_050"), images(64),
         refused=r"LinearSelfAttention.*separable self-attention.*no softmax over query-key scores",
         reason="separable self-attention: a softmax over one score per token, no q k^T"),
    Arch("timm-swiftformer", timm_model("swiftformer_xs"), images(64),
         refused=r"EfficientAdditiveAttention.*additive attention.*no softmax over query-key scores",
         reason="additive attention: normalised keys times one global query, no softmax(q k^T)"),
    # VOLO: its outlook attention is refused, and the rest is conditioned once it is excluded (the refusal says so)
    Arch("timm-volo", volo, images(),
         {**{f"network.{i}.0.attn.qkv.weight": L(QKV, 2) for i in (2, 3, 4)}, **{f"post_network.{i}.attn.q.weight": L("q", 2) for i in range(2)},
          **{f"post_network.{i}.attn.kv.weight": L("kv", 2) for i in range(2)}},
         diagnostics_refused=INFERRED, config={"exclude": [VOLO_OUTLOOKERS]},
         call=f"speccond.apply(model, SpectralConfig(exclude=[r'{VOLO_OUTLOOKERS}']))",
         reason="outlook attention (stage 0) refused: its weights are a Linear of the token, no q k^T; exclude it and "
                "the later stages' attention and class attention are conditioned (layouts inferred)"),
]

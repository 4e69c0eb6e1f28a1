"""The adapter table (speccond.adapters.ADAPTERS): one tiny real model per architecture, built from config, no
downloads.

Each case names, by hand, every projection weight the adapters must find and its layout, so the tests
can compare what ``speccond.apply`` found and the correction it placed with an independent expectation.
Hugging Face models are wrapped so that they return one tensor that every parameter feeds into
(last hidden state and, where the model has one, the pooler output).
"""
from __future__ import annotations

import os
import torch
from torch import nn

from speccond import ProjectionLayout as L
from tests.models import CASES as CORE_CASES
from tests.models import Case

os.environ.setdefault("HF_HUB_OFFLINE", "1")

VOCAB, SEQ = 50, 16


# -- timm -------------------------------------------------------------------------------------------------
def timm_swin() -> nn.Module:
    """head_dim=16 with 2 heads over width 24: attention width 32 != model width 24 (rectangular blocks)."""
    import timm

    return timm.create_model(
        "swin_tiny_patch4_window7_224", pretrained=False, img_size=32, patch_size=4, embed_dim=24, depths=(2, 1),
        num_heads=(2, 4), head_dim=16, window_size=4, num_classes=5,
    )


def timm_xcit() -> nn.Module:
    import timm

    return timm.create_model(
        "xcit_nano_12_p8_224", pretrained=False, img_size=32, embed_dim=32, depth=1, num_heads=4, cls_attn_layers=1,
        num_classes=5,
    )


def timm_davit() -> nn.Module:
    import timm

    return timm.create_model(
        "davit_tiny", pretrained=False, embed_dims=(16, 32), depths=(1, 1), num_heads=(2, 4), window_size=4,
        num_classes=5,
    )


def timm_vit_map() -> nn.Module:
    """A ViT pooled by attention (``global_pool="map"``: timm AttentionPoolLatent)."""
    import timm

    return timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=2,
        global_pool="map", num_classes=5,
    )


# -- Hugging Face transformers ------------------------------------------------------------------------------
class HFTensor(nn.Module):
    """A transformers model returning one tensor: last hidden state and pooler output, flattened."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        out = self.model(*inputs)
        parts = [out.last_hidden_state.flatten(1)]  # (B, N * D)
        if getattr(out, "pooler_output", None) is not None:
            parts.append(out.pooler_output.flatten(1))  # (B, D)
        return torch.cat(parts, dim=1)


_BERT_LIKE = dict(
    hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=VOCAB,
    max_position_embeddings=40, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
)


def hf_bert() -> nn.Module:
    import transformers

    return HFTensor(transformers.BertModel(transformers.BertConfig(**_BERT_LIKE)))


def hf_roberta() -> nn.Module:
    import transformers

    return HFTensor(transformers.RobertaModel(transformers.RobertaConfig(**_BERT_LIKE, pad_token_id=1)))


def hf_nystromformer() -> nn.Module:
    """4 landmarks over 16 tokens (the Nystrom path, not the exact-softmax shortcut), value conv on."""
    import transformers

    config = transformers.NystromformerConfig(
        **_BERT_LIKE, num_landmarks=4, segment_means_seq_len=SEQ, conv_kernel_size=3
    )
    return HFTensor(transformers.NystromformerModel(config))


def hf_vit() -> nn.Module:
    import transformers

    config = transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32, patch_size=8,
    )
    return HFTensor(transformers.ViTModel(config))


def hf_distilbert() -> nn.Module:
    import transformers

    config = transformers.DistilBertConfig(
        dim=32, n_layers=2, n_heads=4, hidden_dim=64, vocab_size=VOCAB, max_position_embeddings=40, dropout=0.0,
        attention_dropout=0.0,
    )
    return HFTensor(transformers.DistilBertModel(config))


def hf_gpt2() -> nn.Module:
    import transformers

    config = transformers.GPT2Config(
        n_embd=32, n_layer=2, n_head=4, vocab_size=VOCAB, n_positions=40, use_cache=False, bos_token_id=0,
        eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )
    return HFTensor(transformers.GPT2Model(config))


def _images() -> tuple:
    return (torch.randn(2, 3, 32, 32),)


def _token_ids() -> tuple:
    return (torch.randint(2, VOCAB, (2, SEQ)),)  # ids >= 2 avoid RoBERTa's padding id


def _separate(prefix: str, names: str | tuple[str, str, str], heads: int, layers: int = 2) -> dict[str, L]:
    """Separate q, k, v Linears ``prefix.format(i) + name`` for each layer i."""
    return {
        f"{prefix.format(i)}{name}.weight": L(role, heads) for i in range(layers) for name, role in zip(names, "qkv")
    }


BERT_SELF, BERT_NAMES = "model.encoder.layer.{}.attention.self.", ("query", "key", "value")


def _core(name: str) -> Case:
    return next(c for c in CORE_CASES if c.name == name)


CASES = [
    _core("timm-vit"),
    _core("timm-deit"),
    _core("torch-transformer-encoder"),
    Case(
        "timm-swin",
        timm_swin,
        _images,
        {
            "layers.0.blocks.0.attn.qkv.weight": L("qkv", 2),
            "layers.0.blocks.1.attn.qkv.weight": L("qkv", 2),
            "layers.1.blocks.0.attn.qkv.weight": L("qkv", 4),
        },
    ),
    Case(
        "timm-xcit",
        timm_xcit,
        _images,
        {"blocks.0.attn.qkv.weight": L("qkv", 4), **_separate("cls_attn_blocks.{}.attn.", "qkv", 4, layers=1)},
    ),
    Case(
        "timm-davit",
        timm_davit,
        _images,
        {f"stages.{s}.blocks.0.{b}.attn.qkv.weight": L("qkv", 2 * (s + 1)) for s in range(2) for b in range(2)},
    ),
    Case(
        "timm-vit-attention-pool",
        timm_vit_map,
        _images,
        {"blocks.0.attn.qkv.weight": L("qkv", 2), "attn_pool.q.weight": L("q", 2), "attn_pool.kv.weight": L("kv", 2)},
    ),
    Case("hf-bert", hf_bert, _token_ids, _separate(BERT_SELF, BERT_NAMES, 4)),
    Case("hf-nystromformer", hf_nystromformer, _token_ids, _separate(BERT_SELF, BERT_NAMES, 4)),
    Case("hf-roberta", hf_roberta, _token_ids, _separate(BERT_SELF, BERT_NAMES, 4)),
    Case("hf-vit", hf_vit, _images, _separate("model.layers.{}.attention.", ("q_proj", "k_proj", "v_proj"), 4)),
    Case(
        "hf-distilbert",
        hf_distilbert,
        _token_ids,
        _separate("model.transformer.layer.{}.attention.", ("q_lin", "k_lin", "v_lin"), 4),
    ),
    Case(
        "hf-gpt2",
        hf_gpt2,
        _token_ids,
        {f"model.h.{i}.attn.c_attn.weight": L("qkv", 4, storage="in_out") for i in range(2)},
    ),
]
CASE_IDS = [c.name for c in CASES]


def case(name: str) -> Case:
    return next(c for c in CASES if c.name == name)

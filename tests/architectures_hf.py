"""transformers families of the architecture table (tests/architectures.py), tiny configs built offline."""
from __future__ import annotations

import torch

from speccond import ProjectionLayout as L
from tests.architectures import Arch, hf_attentions

VOCAB, SEQ, WIDTH, HEADS = 64, 8, 32, 4
# Small and shared: 2 layers, width 32, 4 heads of 8; special token ids inside the vocabulary.
SMALL = dict(
    hidden_size=WIDTH, num_hidden_layers=2, num_attention_heads=HEADS, intermediate_size=64, vocab_size=VOCAB,
    max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2,
)


def tokens() -> dict:
    """Token ids with padding at the end of the second sample."""
    ids = torch.randint(3, VOCAB, (2, SEQ))
    mask = torch.ones(2, SEQ, dtype=torch.long)
    mask[1, -2:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def token_ids() -> dict:
    """Token ids without a mask (Nystromformer's landmark path cannot take a padding mask)."""
    return {"input_ids": torch.randint(3, VOCAB, (2, SEQ))}


def hf(config_class: str, model_class: str = "AutoModel", **fields):
    """A builder: transformers.<model_class>.from_config(<config_class>(**SMALL, **fields)), eval mode."""

    def build():
        import transformers

        config = getattr(transformers, config_class)(**{**SMALL, **fields})
        model_type = getattr(transformers, model_class)
        model = model_type.from_config(config) if model_class.startswith("Auto") else model_type(config)
        return model.eval()

    return build


def separate(prefix: str, names: tuple[str, str, str], heads: tuple[int, int, int], layers: int = 2) -> dict:
    """Separate q, k, v weights ``prefix.format(i) + name`` with their head counts, for each layer i."""
    return {
        f"{prefix.format(i)}{name}.weight": L(role, h)
        for i in range(layers) for name, role, h in zip(names, "qkv", heads)
    }


QKV_PROJ = ("q_proj", "k_proj", "v_proj")
GQA = (HEADS, 2, 2)  # 4 query heads sharing 2 key/value heads

CASES = [
    Arch("hf-llama", hf("LlamaConfig", num_key_value_heads=2), tokens,
         separate("layers.{}.self_attn.", QKV_PROJ, GQA), attention=hf_attentions),
    Arch("hf-mistral", hf("MistralConfig", num_key_value_heads=2, sliding_window=4), tokens,
         separate("layers.{}.self_attn.", QKV_PROJ, GQA), attention=hf_attentions),
    Arch("hf-gemma2", hf("Gemma2Config", num_key_value_heads=2, head_dim=8, sliding_window=4), tokens,
         separate("layers.{}.self_attn.", QKV_PROJ, GQA), attention=hf_attentions),
    Arch("hf-bert", hf("BertConfig"), tokens,
         separate("encoder.layer.{}.attention.self.", ("query", "key", "value"), (HEADS,) * 3),
         attention=hf_attentions),
    Arch("hf-nystromformer", hf("NystromformerConfig", num_landmarks=4, segment_means_seq_len=SEQ), token_ids,
         separate("encoder.layer.{}.attention.self.", ("query", "key", "value"), (HEADS,) * 3),
         diagnostics_refused="Nystrom attention approximates the softmax"),
]

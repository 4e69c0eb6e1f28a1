"""transformers families of the architecture table (tests/architectures.py), tiny configs built offline.

Every ``params`` entry is derived by hand from the family's modeling code (the comment above each case
says how its forward splits the projection), never from the adapters.
"""
from __future__ import annotations

import copy

import torch

from speccond import ProjectionLayout as L
from tests.architectures import Arch, hf_attentions

VOCAB, SEQ, WIDTH, HEADS = 64, 8, 32, 4
# Small and shared: 2 layers, width 32, 4 heads of 8; special token ids inside the vocabulary.
SMALL = dict(
    hidden_size=WIDTH, num_hidden_layers=2, num_attention_heads=HEADS, intermediate_size=64, vocab_size=VOCAB,
    max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2,
)
VISION = dict(
    hidden_size=WIDTH, num_hidden_layers=2, num_attention_heads=HEADS, intermediate_size=64, image_size=16,
    patch_size=8,
)
SEQ2SEQ = dict(
    d_model=WIDTH, encoder_layers=2, decoder_layers=2, encoder_attention_heads=HEADS, decoder_attention_heads=HEADS,
    encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=VOCAB, max_position_embeddings=64, pad_token_id=0,
    bos_token_id=1, eos_token_id=2, decoder_start_token_id=2,
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


def seq2seq_tokens() -> dict:
    """Encoder tokens with padding, and decoder tokens (T5 does not shift its inputs by itself)."""
    return {**tokens(), "decoder_input_ids": torch.randint(3, VOCAB, (2, SEQ - 2))}


def images(size: int = 16) -> dict:
    """Two RGB images: 16 x 16 with patch 8 gives 4 patches (a class token makes 5 tokens)."""
    return {"pixel_values": torch.randn(2, 3, size, size)}


def swin_images() -> dict:
    return images(32)


def audio() -> dict:
    """Whisper: 8 mel bins x 32 frames (2 x max_source_positions), and decoder tokens."""
    return {"input_features": torch.randn(2, 8, 32), "decoder_input_ids": torch.randint(3, VOCAB, (2, SEQ - 2))}


def hf(config_class: str, model_class: str = "AutoModel", base: dict = SMALL, **fields):
    """A builder: transformers.<model_class>.from_config(<config_class>(**base, **fields)), eval mode."""

    def build():
        import transformers

        config = getattr(transformers, config_class)(**{**base, **fields})
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


def fused(pattern: str, layout: L, layers: int = 2) -> dict:
    """One fused weight ``pattern.format(i)`` per layer i, all with ``layout``."""
    return {pattern.format(i): layout for i in range(layers)}


def first_call_attentions(model, inputs) -> dict:
    """ALBERT: one shared attention module runs at every depth; its probabilities at the first depth
    (the call the head diagnostics capture)."""
    from speccond.layers import attention_layers

    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    with torch.no_grad():
        out = eager(**inputs, output_attentions=True)
    (layer,) = attention_layers(model)
    return {layer.name: out.attentions[0]}


def eager_attentions(model, inputs) -> dict:
    """hf_attentions for models that cannot switch their attention implementation after construction
    (Falcon): the copy's config is set to eager before the forward, so its masks are built for eager
    attention (Falcon's output_attentions path under SDPA adds a boolean mask to the logits as 1 / 0)."""
    eager = copy.deepcopy(model)
    eager.config._attn_implementation = "eager"
    return hf_attentions(eager, inputs)


def encoder_attentions(model, inputs) -> dict:
    """SigLIP: the encoder layers' probabilities; its pooling head (nn.MultiheadAttention) reports none."""
    from speccond.layers import attention_layers

    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    with torch.no_grad():
        out = eager(**inputs, output_attentions=True)
    names = [layer.name for layer in attention_layers(model) if ".encoder." in f".{layer.name}"]
    assert len(names) == len(out.attentions), names
    return dict(zip(names, out.attentions))


QKV_PROJ = ("q_proj", "k_proj", "v_proj")
BERT_QKV = ("query", "key", "value")
GQA = (HEADS, 2, 2)  # 4 query heads sharing 2 key/value heads
MHA = (HEADS,) * 3
PER_HEAD = L("qkv", HEADS, arrangement="per_head")  # rows (H, 3, dh)
MULTI_QUERY = L("qkv", HEADS, num_kv_heads=1)  # rows [q: H dh | k: dh | v: dh]


def _seq2seq(encoder: str, self_attn: str, cross: str, names: tuple[str, str, str]) -> dict:
    return {**separate(encoder, names, MHA), **separate(self_attn, names, MHA), **separate(cross, names, MHA)}


CASES = [
    # -- Llama family: separate q_proj/k_proj/v_proj, view(B, N, -1, dh); k, v have num_key_value_heads heads
    Arch("hf-llama", hf("LlamaConfig", num_key_value_heads=2), tokens,
         separate("layers.{}.self_attn.", QKV_PROJ, GQA), attention=hf_attentions),
    Arch("hf-mistral", hf("MistralConfig", num_key_value_heads=2, sliding_window=4), tokens,
         separate("layers.{}.self_attn.", QKV_PROJ, GQA), attention=hf_attentions),
    Arch("hf-mixtral", hf("MixtralConfig", num_key_value_heads=2, num_local_experts=2, num_experts_per_tok=1,
                            experts_implementation="eager"), tokens,
         separate("layers.{}.self_attn.", QKV_PROJ, GQA), attention=hf_attentions),
    Arch("hf-qwen2", hf("Qwen2Config", num_key_value_heads=2), tokens,
         separate("layers.{}.self_attn.", QKV_PROJ, GQA), attention=hf_attentions),
    # Qwen3: the same, plus per-head q_norm / k_norm (RMSNorm over dh)
    Arch("hf-qwen3", hf("Qwen3Config", num_key_value_heads=2, head_dim=8), tokens,
         separate("layers.{}.self_attn.", QKV_PROJ, GQA), attention=hf_attentions),
    Arch("hf-gemma", hf("GemmaConfig", num_key_value_heads=2, head_dim=8), tokens,
         separate("layers.{}.self_attn.", QKV_PROJ, GQA), attention=hf_attentions),
    Arch("hf-gemma2", hf("Gemma2Config", num_key_value_heads=2, head_dim=8, sliding_window=4), tokens,
         separate("layers.{}.self_attn.", QKV_PROJ, GQA), attention=hf_attentions),
    Arch("hf-gemma3", hf("Gemma3TextConfig", num_key_value_heads=2, head_dim=8, sliding_window=4,
                         layer_types=["sliding_attention", "full_attention"]), tokens,
         separate("layers.{}.self_attn.", QKV_PROJ, GQA), attention=hf_attentions),
    # Soft-capped logits: Gemma 2 passes softcap=attn_logit_softcapping to its attention function (tanh cap);
    # Gemma 3 stores the same setting but its forward never applies it: the rebuilt heads must follow each forward
    Arch("hf-gemma2-softcap", hf("Gemma2Config", num_key_value_heads=2, head_dim=8, attn_logit_softcapping=1.0),
         tokens, separate("layers.{}.self_attn.", QKV_PROJ, GQA), attention=hf_attentions,
         reason="logits soft-capped (attn_logit_softcapping), rebuilt with the cap"),
    Arch("hf-gemma3-softcap", hf("Gemma3TextConfig", num_key_value_heads=2, head_dim=8, attn_logit_softcapping=1.0),
         tokens, separate("layers.{}.self_attn.", QKV_PROJ, GQA), attention=hf_attentions,
         reason="attn_logit_softcapping is stored but its forward does not apply it; rebuilt without the cap"),
    Arch("hf-olmo", hf("OlmoConfig"), tokens, separate("layers.{}.self_attn.", QKV_PROJ, MHA), attention=hf_attentions),
    # Phi: q_proj/k_proj/v_proj + dense, partial rotary (partial_rotary_factor 0.5); qk_layernorm: LayerNorm(dh)
    Arch("hf-phi", hf("PhiConfig"), tokens, separate("layers.{}.self_attn.", QKV_PROJ, MHA), attention=hf_attentions),
    Arch("hf-phi-qk-layernorm", hf("PhiConfig", qk_layernorm=True), tokens,
         separate("layers.{}.self_attn.", QKV_PROJ, MHA), attention=hf_attentions),
    # Phi-3: qkv_proj rows sliced [:H dh], [H dh:(H + G) dh], [(H + G) dh:]: blocked, G = 2 k/v heads
    Arch("hf-phi3", hf("Phi3Config", num_key_value_heads=2), tokens,
         fused("layers.{}.self_attn.qkv_proj.weight", L("qkv", HEADS, num_kv_heads=2)), attention=hf_attentions),
    # GPT-NeoX: query_key_value.view(B, N, H, 3 dh).chunk(3): rows (H, 3, dh); rotary on 25% of dh
    Arch("hf-gpt-neox", hf("GPTNeoXConfig"), tokens,
         fused("layers.{}.attention.query_key_value.weight", PER_HEAD), attention=hf_attentions),
    # GPT-J: separate q/k/v (+ out_proj), rotary on rotary_dim = 4 of dh = 8, pairs (2i, 2i + 1)
    Arch("hf-gptj", hf("GPTJConfig", n_embd=WIDTH, n_layer=2, n_head=HEADS, rotary_dim=4), tokens,
         separate("h.{}.attn.", QKV_PROJ, MHA), attention=hf_attentions),
    # Falcon: multi_query=False: query_key_value.view(B, N, H, 3, dh): rows (H, 3, dh); rotary
    Arch("hf-falcon", hf("FalconConfig", multi_query=False), tokens,
         fused("h.{}.self_attention.query_key_value.weight", PER_HEAD), attention=eager_attentions),
    # Falcon default multi_query: view(B, N, H + 2, dh): [q heads | k | v], one k/v head
    Arch("hf-falcon-multi-query", hf("FalconConfig", multi_query=True), tokens,
         fused("h.{}.self_attention.query_key_value.weight", MULTI_QUERY), attention=eager_attentions),
    # Falcon new_decoder_architecture: view(B, N, G, H / G + 2, dh): per kv group its 2 q heads, then k, then v
    Arch("hf-falcon-new-arch", hf("FalconConfig", new_decoder_architecture=True, num_kv_heads=2), tokens,
         fused("h.{}.self_attention.query_key_value.weight", L("qkv", HEADS, arrangement="grouped", num_kv_heads=2)),
         attention=eager_attentions),
    # Falcon with ALiBi, per head as hf-falcon; transformers' eager attention adds ALiBi twice (see the adapter)
    Arch("hf-falcon-alibi", hf("FalconConfig", multi_query=False, alibi=True), tokens,
         fused("h.{}.self_attention.query_key_value.weight", PER_HEAD),
         diagnostics_refused="adds the ALiBi bias twice"),
    # BLOOM: query_key_value.view(B, N, H, 3, dh): rows (H, 3, dh); ALiBi
    Arch("hf-bloom", hf("BloomConfig", n_layer=2, n_head=HEADS), tokens,
         fused("h.{}.self_attention.query_key_value.weight", PER_HEAD), attention=hf_attentions,
         reason="ALiBi untouched"),
    # GPTBigCode multi_query (default): c_attn(x).split((H dh, dh, dh)): blocked, one k/v head
    Arch("hf-gpt-bigcode", hf("GPTBigCodeConfig", n_embd=WIDTH, n_layer=2, n_head=HEADS), tokens,
         fused("h.{}.attn.c_attn.weight", MULTI_QUERY), attention=hf_attentions),
    # GPTBigCode multi_query=False: c_attn(x).view(B, N, H, 3 dh).split(dh): rows (H, 3, dh)
    Arch("hf-gpt-bigcode-mha", hf("GPTBigCodeConfig", n_embd=WIDTH, n_layer=2, n_head=HEADS, multi_query=False), tokens,
         fused("h.{}.attn.c_attn.weight", PER_HEAD), attention=hf_attentions),
    Arch("hf-opt", hf("OPTConfig", ffn_dim=64, word_embed_proj_dim=WIDTH), tokens,
         separate("decoder.layers.{}.self_attn.", QKV_PROJ, MHA), attention=hf_attentions),
    # GPT-2: c_attn is a Conv1D (in, out) = (D, 3 D), split(D, dim=2): blocked
    Arch("hf-gpt2", hf("GPT2Config", n_embd=WIDTH, n_layer=2, n_head=HEADS), tokens,
         fused("h.{}.attn.c_attn.weight", L("qkv", HEADS, storage="in_out")), attention=hf_attentions),
    # -- encoder-decoders: separate projections; cross-attention q from the decoder, k, v from the encoder
    # T5: q/k/v .view(B, N, -1, d_kv), scale 1, relative position bias (untouched) added to the logits
    Arch("hf-t5", hf("T5Config", d_model=WIDTH, d_kv=8, d_ff=64, num_layers=2, num_heads=HEADS,
                     decoder_start_token_id=0), seq2seq_tokens,
         _seq2seq("encoder.block.{}.layer.0.SelfAttention.", "decoder.block.{}.layer.0.SelfAttention.",
                  "decoder.block.{}.layer.1.EncDecAttention.", ("q", "k", "v")), attention=hf_attentions,
         reason="scale 1; the relative position bias added to the logits is untouched"),
    Arch("hf-bart", hf("BartConfig", base=SEQ2SEQ), tokens,
         _seq2seq("encoder.layers.{}.self_attn.", "decoder.layers.{}.self_attn.", "decoder.layers.{}.encoder_attn.",
                  QKV_PROJ), attention=hf_attentions),
    Arch("hf-whisper", hf("WhisperConfig", base=SEQ2SEQ, num_mel_bins=8, max_source_positions=16,
                          max_target_positions=16, suppress_tokens=[], begin_suppress_tokens=[]), audio,
         _seq2seq("encoder.layers.{}.self_attn.", "decoder.layers.{}.self_attn.", "decoder.layers.{}.encoder_attn.",
                  QKV_PROJ), attention=hf_attentions),
    # -- vision and text encoders: separate projections, heads contiguous
    Arch("hf-clip-text", hf("CLIPTextConfig"), tokens,
         separate("encoder.layers.{}.self_attn.", QKV_PROJ, MHA), attention=hf_attentions),
    Arch("hf-clip-vision", hf("CLIPVisionConfig", base=VISION), images,
         separate("encoder.layers.{}.self_attn.", QKV_PROJ, MHA), attention=hf_attentions),
    # SigLIP: the encoder's q_proj/k_proj/v_proj, and its pooling head's nn.MultiheadAttention in_proj_weight
    # (3 E, E) blocked, read directly by F.multi_head_attention_forward (weight backend only)
    Arch("hf-siglip-vision", hf("SiglipVisionConfig", base=VISION), images,
         {**separate("encoder.layers.{}.self_attn.", QKV_PROJ, MHA),
          "head.attention.in_proj_weight": L("qkv", HEADS)},
         attention=encoder_attentions, activation_ok=False,
         reason="the pooling head's nn.MultiheadAttention reads in_proj_weight directly: weight backend only"),
    Arch("hf-vit", hf("ViTConfig", base=VISION), images, separate("layers.{}.attention.", QKV_PROJ, MHA),
         attention=hf_attentions),
    Arch("hf-deit", hf("DeiTConfig", base=VISION), images, separate("layers.{}.attention.", QKV_PROJ, MHA),
         attention=hf_attentions),
    # BEiT: its relative position bias reaches the attention as the additive attention_mask
    Arch("hf-beit", hf("BeitConfig", base=VISION, use_relative_position_bias=True), images,
         separate("layers.{}.attention.", QKV_PROJ, MHA), attention=hf_attentions),
    Arch("hf-dinov2", hf("Dinov2Config", base=VISION), images, separate("encoder.layer.{}.attention.", QKV_PROJ, MHA),
         attention=hf_attentions),
    # Swin: per stage q_proj/k_proj/v_proj over the tokens of one window, stage s has num_heads[s] heads
    Arch("hf-swin", hf("SwinConfig", base={}, image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                       num_heads=[2, 4], window_size=4), swin_images,
         {**separate("encoder.layers.0.blocks.0.attention.", QKV_PROJ, (2,) * 3, layers=1),
          **separate("encoder.layers.1.blocks.0.attention.", QKV_PROJ, (4,) * 3, layers=1)},
         diagnostics_refused="Swin attends inside \\(shifted\\) windows"),
    # Swin V2: cosine attention (each head's q and k L2-normalised, times a learned logit scale), query/key/value
    Arch("hf-swinv2", hf("Swinv2Config", base={}, image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                         num_heads=[2, 4], window_size=4), swin_images,
         {**separate("encoder.layers.0.blocks.0.attention.self.", BERT_QKV, (2,) * 3, layers=1),
          **separate("encoder.layers.1.blocks.0.attention.self.", BERT_QKV, (4,) * 3, layers=1)},
         diagnostics_refused="Swinv2SelfAttention is not among the families",
         reason="cosine attention (found by probing): note, the Q/K correction keeps only its direction"),
    Arch("hf-bert", hf("BertConfig"), tokens, separate("encoder.layer.{}.attention.self.", BERT_QKV, MHA),
         attention=hf_attentions),
    Arch("hf-roberta", hf("RobertaConfig"), tokens, separate("encoder.layer.{}.attention.self.", BERT_QKV, MHA),
         attention=hf_attentions),
    Arch("hf-xlm-roberta", hf("XLMRobertaConfig"), tokens,
         separate("encoder.layer.{}.attention.self.", BERT_QKV, MHA), attention=hf_attentions),
    Arch("hf-electra", hf("ElectraConfig", embedding_size=16), tokens,
         separate("encoder.layer.{}.attention.self.", BERT_QKV, MHA), attention=hf_attentions),
    Arch("hf-distilbert", hf("DistilBertConfig", base={}, dim=WIDTH, n_layers=2, n_heads=HEADS, hidden_dim=64,
                             vocab_size=VOCAB, pad_token_id=0), tokens,
         separate("transformer.layer.{}.attention.", ("q_lin", "k_lin", "v_lin"), MHA), attention=hf_attentions),
    # ALBERT: one shared layer (query/key/value + dense) runs at both depths: conditioned once
    Arch("hf-albert", hf("AlbertConfig", embedding_size=16), tokens,
         separate("encoder.albert_layer_groups.0.albert_layers.0.attention.", BERT_QKV, MHA, layers=1),
         attention=first_call_attentions, reason="one layer shared by every depth: conditioned once"),
    # DeBERTa-v3 style (share_att_key, c2p + p2c): query_proj/key_proj/value_proj, transpose_for_scores
    # view(B, N, H, -1); the relative-position terms reuse query_proj/key_proj (see the adapter)
    Arch("hf-deberta-v2", hf("DebertaV2Config", relative_attention=True, pos_att_type=["p2c", "c2p"],
                             share_att_key=True, position_buckets=8, norm_rel_ebd="layer_norm"), tokens,
         separate("encoder.layer.{}.attention.self.", ("query_proj", "key_proj", "value_proj"), MHA),
         diagnostics_refused="disentangled attention",
         reason="share_att_key: the c2p / p2c position keys and queries reuse the corrected key_proj / query_proj"),
    # DeBERTa-v2 with its own pos_key_proj / pos_query_proj: those stay plain
    Arch("hf-deberta-v2-pos-proj", hf("DebertaV2Config", relative_attention=True, pos_att_type=["p2c", "c2p"],
                                      share_att_key=False, position_buckets=8), tokens,
         separate("encoder.layer.{}.attention.self.", ("query_proj", "key_proj", "value_proj"), MHA),
         diagnostics_refused="disentangled attention",
         reason="pos_key_proj / pos_query_proj stay plain; verify checks only that the correction takes effect"),
    # ModernBERT: Wqkv(x).view(B, N, 3, H, dh): blocked; rotary; layer 1 attends in a local window
    Arch("hf-modernbert", hf("ModernBertConfig", global_attn_every_n_layers=2, local_attention=4, cls_token_id=1,
                             sep_token_id=2), tokens,
         fused("layers.{}.attn.Wqkv.weight", L("qkv", HEADS)), attention=hf_attentions),
    # MPNet: q/k/v .view(B, N, -1, dh), relative position bias (from the encoder) added to the logits
    Arch("hf-mpnet", hf("MPNetConfig"), tokens, separate("encoder.layer.{}.attention.attn.", ("q", "k", "v"), MHA),
         attention=hf_attentions, reason="the relative position bias added to the logits is untouched"),
    Arch("hf-nystromformer", hf("NystromformerConfig", num_landmarks=4, segment_means_seq_len=SEQ), token_ids,
         separate("encoder.layer.{}.attention.self.", BERT_QKV, MHA),
         diagnostics_refused="Nystrom attention approximates the softmax"),
    # -- families no adapter names (docs/MODELS.md, "Attention no adapter names"): each refused with a reason
    # a reader can check, or conditioned --
    # Qwen3-Next gated attention: q_proj(x).view(B, N, H, 2 dh).chunk(2): [q_h | gate_h] per head
    Arch("hf-qwen3-next", hf("Qwen3NextConfig", num_key_value_heads=2, head_dim=8, num_hidden_layers=1,
                             layer_types=["full_attention"], num_experts=2, num_experts_per_tok=1,
                             moe_intermediate_size=16, shared_expert_intermediate_size=16,
                             experts_implementation="eager"), tokens,
         refused=r"(?s)Qwen3NextAttention.*cannot be declared.*other rows \(a gate",
         reason="q_proj holds [q_h | gate_h] per head: no ProjectionLayout leaves the gates out"),
    # DeepSeek-V3 multi-head latent attention: k, v from kv_a_proj_with_mqa -> kv_b_proj
    Arch("hf-deepseek-v3", hf("DeepseekV3Config", num_key_value_heads=4, q_lora_rank=None, kv_lora_rank=16,
                              qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=8, n_routed_experts=2,
                              num_experts_per_tok=1, moe_intermediate_size=16, first_k_dense_replace=2, n_group=1,
                              topk_group=1), tokens,
         refused=r"(?s)DeepseekV3Attention.*cannot be declared.*k and v come from a shared low-rank projection",
         reason="multi-head latent attention: k and v from a shared low-rank projection, no per-head W_K, W_V"),
    # Mamba: selective-scan mixers, no attention at all
    Arch("hf-mamba", hf("MambaConfig", base={}, hidden_size=WIDTH, num_hidden_layers=2, vocab_size=VOCAB,
                        state_size=4), token_ids,
         refused=r"MambaModel has no softmax attention.*MambaMixer.*state-space",
         reason="state-space mixers (selective scan): no softmax attention"),
    # Jamba: Mamba mixers at layer 0, Llama-style attention (no rotary) at layer 1; the mixers are not attention
    Arch("hf-jamba", hf("JambaConfig", num_key_value_heads=2, attn_layer_period=2, attn_layer_offset=1,
                        expert_layer_period=2, expert_layer_offset=1, num_experts=2, num_experts_per_tok=1,
                        mamba_d_state=4, mamba_dt_rank=4, experts_implementation="eager"), tokens,
         {f"layers.1.self_attn.{n}.weight": L(r, h) for n, r, h in zip(QKV_PROJ, "qkv", GQA)},
         diagnostics_refused="JambaAttention is not among the families",
         reason="the Mamba mixers are state-space layers, left as they are; the attention layers conditioned"),
]

# -- no adapter names these: the layout is inferred by probing (speccond.adapters.inferred); each ``params``
# entry is read from the family's forward, not from the inference. The head diagnostics refuse them.
INFERRED = "its layout was inferred by probing"
T5_SMALL = dict(d_model=WIDTH, d_kv=8, d_ff=64, num_layers=2, num_heads=HEADS, vocab_size=VOCAB, decoder_start_token_id=0)
LONGT5_DECODER = {**separate("decoder.block.{}.layer.0.SelfAttention.", ("q", "k", "v"), MHA),
                  **separate("decoder.block.{}.layer.1.EncDecAttention.", ("q", "k", "v"), MHA)}
CASES += [
    # MPT: Wqkv(x).chunk(3, dim=2), each .view(B, N, H, dh): blocked; ALiBi position bias added to the logits
    Arch("hf-mpt", hf("MptConfig", base={}, d_model=WIDTH, n_heads=HEADS, n_layers=2, vocab_size=VOCAB, max_seq_len=64,
                      pad_token_id=0), tokens,
         fused("blocks.{}.attn.Wqkv.weight", L("qkv", HEADS)), diagnostics_refused=INFERRED,
         reason="layout inferred; ALiBi bias untouched"),
    # DBRX: Wqkv(x).clamp(-clip, clip).split([H dh, G dh, G dh]): blocked, 2 key/value heads; rotary. transformers
    # cannot run clip_qkv=None, so the clamp is set far above the values (verify of an active clamp)
    Arch("hf-dbrx", hf("DbrxConfig", base={}, d_model=WIDTH, n_heads=HEADS, n_layers=2, vocab_size=VOCAB, max_seq_len=64,
                       pad_token_id=0, attn_config={"kv_n_heads": 2, "clip_qkv": 1e3, "rope_theta": 1e4},
                       ffn_config={"ffn_hidden_size": 32, "moe_num_experts": 2, "moe_top_k": 1}), tokens,
         fused("blocks.{}.norm_attn_norm.attn.Wqkv.weight", L("qkv", HEADS, num_kv_heads=2)),
         diagnostics_refused=INFERRED, reason="layout inferred; grouped-query, qkv clamp"),
    # LongT5: q/k/v .view(B, N, H, d_kv) in every attention; the encoder attends in local blocks, or local
    # blocks plus transient global tokens whose keys and values come from the same k and v Linears
    Arch("hf-longt5-local", hf("LongT5Config", base=T5_SMALL, encoder_attention_type="local", local_radius=2),
         seq2seq_tokens, {**separate("encoder.block.{}.layer.0.LocalSelfAttention.", ("q", "k", "v"), MHA),
                          **LONGT5_DECODER}, diagnostics_refused=INFERRED, reason="layout inferred; local blocks"),
    # Refused: a transient-global layer without its own relative bias runs only on the position bias the first
    # layer passes down (called alone, transformers reads a gradient_checkpointing attribute it never set), so
    # the probe cannot call layers 1.. alone; the first layer alone would be conditioned, so nothing is
    Arch("hf-longt5-tglobal", hf("LongT5Config", base=T5_SMALL, encoder_attention_type="transient-global",
                                 local_radius=2, global_block_size=2), seq2seq_tokens,
         refused=r"encoder\.block\.1\.layer\.0\.TransientGlobalSelfAttention \(transformers\.models\.longt5",
         reason="layers after the first cannot be called alone to probe their layout (they need the first "
                "layer's position bias); declare q, k, v (separate, 4 heads) by hand"),
    # ModernBERT decoder: separate q_proj/k_proj/v_proj .view(B, N, -1, dh), output Wo; rotary, sliding window
    Arch("hf-modernbert-decoder", hf("ModernBertDecoderConfig", cls_token_id=1, sep_token_id=2,
                                     global_attn_every_n_layers=2, local_attention=4), tokens,
         separate("layers.{}.attn.", QKV_PROJ, MHA), diagnostics_refused=INFERRED, reason="layout inferred"),
    # CodeGen: qkv_proj(x).view(B, N, mp_num = 4, 3 local).split(local) as query, value, key: with 4 heads one
    # head per shard, rows (H, [q | v | k], dh): per head, roles q, v, k
    Arch("hf-codegen", hf("CodeGenConfig", base={}, n_embd=WIDTH, n_layer=2, n_head=HEADS, vocab_size=VOCAB,
                          n_positions=64, rotary_dim=4, bos_token_id=1, eos_token_id=2), tokens,
         fused("h.{}.attn.qkv_proj.weight", L("qvk", HEADS, arrangement="per_head")), diagnostics_refused=INFERRED,
         reason="layout inferred: mp_num shards [q | v | k], one head each at 4 heads"),
    # Persimmon: query_key_value(x).view(B, N, H, 3, dh): per head; partial rotary
    Arch("hf-persimmon", hf("PersimmonConfig"), tokens,
         fused("layers.{}.self_attn.query_key_value.weight", PER_HEAD), diagnostics_refused=INFERRED,
         reason="layout inferred; per head, partial rotary"),
    # Hiera: qkv(x).reshape(B, -1, windows, 3, heads, dh): blocked; stage s attends inside mask units
    Arch("hf-hiera", hf("HieraConfig", base={}, embed_dim=16, num_heads=[1, 2], depths=[1, 1], image_size=[32, 32],
                        patch_stride=[4, 4], patch_size=[7, 7], patch_padding=[3, 3], masked_unit_size=[2, 2],
                        query_stride=[2, 2], embed_dim_multiplier=2.0, num_query_pool=1), swin_images,
         {"encoder.stages.0.layers.0.attn.qkv.weight": L("qkv", 1), "encoder.stages.1.layers.0.attn.qkv.weight": L("qkv", 2)},
         diagnostics_refused=INFERRED, reason="layout inferred; mask-unit attention"),
]

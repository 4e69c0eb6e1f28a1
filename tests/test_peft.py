"""PEFT and speccond, both ways (docs/GUIDE.md, "LoRA and the other PEFT tuners").

- LoRA (and LoHa, LoKr, VeRA, IA3, DoRA) on a conditioned model, and speccond.apply on a PEFT model:
  after training the adapters, merge_and_unload (plain and safe), merge/unmerge, and saving the adapter
  and loading it onto a freshly conditioned base all give the function of the unmerged model; the model
  stays conditioned, and speccond.remove afterwards still gives the same function;
- the weight backend is exact for every tuner: writes into the W + C it hands out (PEFT's merge writes
  ``base_layer.weight.data``) are stored as (value - C) in W (speccond.core.effective_weight);
- the activation backend under a tuner that rescales the output (IA3, DoRA) is refused: by apply on a
  PEFT model, and at the first forward when PEFT wrapped a conditioned model; LoRA for
  nn.MultiheadAttention is refused by apply;
- the diagnostics read W + C + delta W of unmerged additive tuners (LoRA, LoHa, LoKr, VeRA) without merging,
  as the merged model gives them, and refuse a layer whose unmerged tuner rescales (IA3, DoRA);
- an adapter saved with speccond.save_adapter records its base's conditioning (speccond_base.json), and
  speccond.load_adapter refuses a base conditioned differently or not at all.
"""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from speccond import SpectralConfig
import speccond
from speccond.core.backends import attachments
from speccond.core.peft_layers import is_tuner_layer

peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")

TARGETS = ["query", "key", "value"]
TUNERS = {
    "lora": lambda: peft.LoraConfig(target_modules=TARGETS, r=4, init_lora_weights=False),
    "dora": lambda: peft.LoraConfig(target_modules=TARGETS, r=4, use_dora=True, init_lora_weights=False),
    "ia3": lambda: peft.IA3Config(target_modules=TARGETS, feedforward_modules=[], init_ia3_weights=False),
    "loha": lambda: peft.LoHaConfig(target_modules=TARGETS, r=4, init_weights=False),
    "lokr": lambda: peft.LoKrConfig(target_modules=TARGETS, r=4, init_weights=False),
    "vera": lambda: peft.VeraConfig(target_modules=TARGETS, r=4, init_weights=False),
}
RESCALING = {"dora", "ia3"}  # rescale the base layer's output: not with the activation backend
CORRECTIONS = {"identity": dict(lam=10.0), "svd": dict(correction="svd"), "auto": dict(lam="auto"),
               "rotated": dict(lam="auto", target_kappa=5.0, key_basis="orthogonal")}  # k: lam R per head
ORDERS = ("lora_on_conditioned", "conditioned_peft_model")
TOLERANCE = 1e-5  # relative, float32: a merge rounds each weight entry once (and W + C + delta - C once more)


def bert() -> nn.Module:
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
    )
    return transformers.BertForSequenceClassification(config).eval()


IDS = torch.randint(3, 64, (2, 7), generator=torch.Generator().manual_seed(1))


def logits(model: nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=IDS).logits


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def train(model: nn.Module, steps: int = 3) -> None:
    """A few SGD steps on the trainable (adapter) parameters, so the adapters are far from their init."""
    optimiser = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    for _ in range(steps):
        model(input_ids=IDS).logits.square().sum().backward()
        optimiser.step()
        optimiser.zero_grad()


def conditioned_peft(tuner: str, backend: str, order: str, correction: str = "identity") -> nn.Module:
    config = SpectralConfig(backend=backend, **CORRECTIONS[correction])
    model = bert()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the collapse warning of lam = 10
        if order == "lora_on_conditioned":
            speccond.apply(model, config)
            return peft.get_peft_model(model, TUNERS[tuner]())
        peft_model = peft.get_peft_model(model, TUNERS[tuner]())
        speccond.apply(peft_model, config)
        return peft_model


EXACT = [
    (t, b, o) for t in TUNERS for b in ("weight", "activation") for o in ORDERS
    if not (b == "activation" and t in RESCALING)
]


@pytest.mark.parametrize("tuner,backend,order", EXACT, ids=["-".join(c) for c in EXACT])
@pytest.mark.parametrize("safe", [False, True], ids=["merge", "safe_merge"])
def test_merge_and_unload_keeps_the_function(tuner, backend, order, safe):
    model = conditioned_peft(tuner, backend, order)
    train(model)
    unmerged = logits(model)
    stored = [found.stored_weight().detach().clone() for found in attachments(model)]
    conditioned = len(list(attachments(model)))
    merged = model.merge_and_unload(safe_merge=safe)
    assert relative(logits(merged), unmerged) < TOLERANCE
    for found, before in zip(attachments(merged), stored):  # the update landed in every stored W
        assert relative(found.stored_weight().detach(), before) > 1e-3, found.qualified_name
    assert len(list(attachments(merged))) == conditioned == 2 * 3  # q, k, v of 2 layers, still conditioned
    speccond.remove(merged, merge=True)
    assert not speccond.is_conditioned(merged)
    assert all(type(m) is nn.Linear for n, m in merged.named_modules() if n.endswith(tuple(TARGETS)))
    assert relative(logits(merged), unmerged) < TOLERANCE


@pytest.mark.parametrize("backend", ["weight", "activation"])
@pytest.mark.parametrize("correction", list(CORRECTIONS))
@pytest.mark.parametrize("order", ORDERS)
def test_merge_unmerge_and_adapter_round_trip(tmp_path, backend, correction, order):
    model = conditioned_peft("lora", backend, order, correction)
    train(model)
    unmerged = logits(model)
    model.merge_adapter()
    assert relative(logits(model), unmerged) < TOLERANCE
    model.unmerge_adapter()
    assert relative(logits(model), unmerged) < TOLERANCE
    model.save_pretrained(tmp_path)  # the adapter only: PEFT's own format
    fresh = bert()
    config = SpectralConfig(backend=backend, **CORRECTIONS[correction])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if order == "lora_on_conditioned":
            speccond.apply(fresh, config)
            reloaded = peft.PeftModel.from_pretrained(fresh, tmp_path)
        else:
            reloaded = peft.PeftModel.from_pretrained(fresh, tmp_path)
            speccond.apply(reloaded, config)  # C from the same frozen base weights
    assert torch.equal(logits(reloaded), unmerged)
    assert relative(logits(reloaded.merge_and_unload()), unmerged) < TOLERANCE


def test_the_correction_sits_on_the_layer_peft_wraps():
    model = conditioned_peft("lora", "weight", "conditioned_peft_model")
    names = sorted(found.qualified_name for found in attachments(model))
    assert names[0] == "base_model.model.bert.encoder.layer.0.attention.self.key.base_layer.weight"
    assert all(".base_layer." in name for name in names) and len(names) == 6


def test_a_declared_layout_matches_the_name_the_user_wrote():
    """A pattern written for the plain model (``...query.weight$``) still matches under PEFT's wrapper."""
    model = peft.get_peft_model(bert(), TUNERS["lora"]())
    layout = speccond.ProjectionLayout(roles="q", num_heads=4)
    config = SpectralConfig(layouts={r"layer\.0\.attention\.self\.query\.weight$": layout}, lam=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = speccond.apply(model, config)
    declared = [row for row in report.rows if row.module.endswith("layer.0.attention.self.query.base_layer")]
    assert len(declared) == 1 and declared[0].parameter == "weight" and declared[0].scale == 1.0


@pytest.mark.parametrize("tuner", sorted(RESCALING))
def test_activation_backend_under_a_rescaling_tuner_is_refused(tuner):
    model = bert()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    peft_model = peft.get_peft_model(model, TUNERS[tuner]())
    with pytest.raises(ValueError, match=r"rescaled with the output.*backend='weight'"):
        speccond.apply(peft_model, SpectralConfig(backend="activation"))
    assert not speccond.is_conditioned(peft_model)
    base = peft_model.get_base_model()
    assert all(torch.equal(base.state_dict()[k], v) for k, v in state.items() if k in base.state_dict())

    conditioned = bert()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        speccond.apply(conditioned, SpectralConfig(backend="activation"))
    wrapped = peft.get_peft_model(conditioned, TUNERS[tuner]())
    with pytest.raises(RuntimeError, match=r"wrapped by PEFT.*backend='weight'"):
        logits(wrapped)


def test_lora_for_multihead_attention_is_refused():
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

        def forward(self, x):
            return self.attn(x, x, x)[0]

    model = peft.get_peft_model(Block(), peft.LoraConfig(target_modules=["attn"], r=2))
    with pytest.raises(ValueError, match=r"deletes and re-registers.*target_modules"):
        speccond.apply(model, SpectralConfig())
    assert not speccond.is_conditioned(model)


@pytest.mark.parametrize("tuner", ["ia3", "dora"])
def test_diagnostics_refuse_unmerged_rescaling_tuners_and_describe_merged_ones(tuner):
    from speccond.diagnostics import attention_entropy, projection_spectra

    model = conditioned_peft(tuner, "weight", "lora_on_conditioned", "svd")
    train(model)
    inputs = (IDS,)
    with pytest.raises(ValueError, match=r"PEFT tuner layers .*query.* merge"):
        projection_spectra(model)
    with pytest.raises(ValueError, match=r"PEFT tuner layers .*merge"):
        attention_entropy(model, inputs)
    model.merge_adapter()  # now the weights hold the update
    spectra = projection_spectra(model)
    assert len(spectra.rows) > 0
    query = model.get_base_model().bert.encoder.layer[0].attention.self.query
    merged_q = query.base_layer.weight.detach().double()  # the update merged into W + C
    row = next(r for r in spectra.rows if r["layer"] == 0 and r["projection"] == "q" and r["head"] is None)
    assert row["sigma_max"] == pytest.approx(float(torch.linalg.matrix_norm(merged_q, ord=2)), rel=1e-6)
    assert len(attention_entropy(model, inputs).rows) > 0


ADDITIVE = ["lora", "loha", "lokr", "vera"]


@pytest.mark.parametrize("backend", ["weight", "activation"])
@pytest.mark.parametrize("tuner", ADDITIVE)
def test_spectra_and_entropy_follow_unmerged_adapters(tuner, backend):
    """During LoRA training the spectra and entropy read W + C + delta W without merging: the figures
    the merged model gives, not those of W + C (adapters disabled); the model is left as it was."""
    from speccond.diagnostics import attention_entropy, projection_spectra

    model = conditioned_peft(tuner, backend, "lora_on_conditioned", "svd")
    train(model)
    before = logits(model)
    spectra, entropy = projection_spectra(model).rows, attention_entropy(model, (IDS,)).rows
    assert torch.equal(logits(model), before) and not any(getattr(m, "merged", False) for m in model.modules())
    with model.disable_adapter():
        base_spectra = projection_spectra(model).rows
    model.merge_adapter()
    merged_spectra, merged_entropy = projection_spectra(model).rows, attention_entropy(model, (IDS,)).rows
    for row, merged, base in zip(spectra, merged_spectra, base_spectra):
        assert row["kappa"] == pytest.approx(merged["kappa"], rel=1e-4)
    assert max(abs(r["kappa"] - b["kappa"]) / b["kappa"] for r, b in zip(spectra, base_spectra)) > 1e-3
    for row, merged in zip(entropy, merged_entropy):
        assert row["entropy"] == pytest.approx(merged["entropy"], abs=1e-5)


def adapter_from(tmp_path, config: SpectralConfig | None, save=speccond.save_adapter) -> tuple:
    """A LoRA adapter trained on bert() conditioned with ``config`` (None: plain), saved to tmp_path/adapter:
    (the folder, the logits of the trained adapter model)."""
    model = bert()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if config is not None:
            speccond.apply(model, config)
        peft_model = peft.get_peft_model(model, TUNERS["lora"]())
    train(peft_model)
    folder = tmp_path / "adapter"
    save(peft_model, folder) if save is speccond.save_adapter else peft_model.save_pretrained(folder)
    return folder, logits(peft_model)


def base_with(config: SpectralConfig | None, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = bert() if seed == 0 else transformers.BertForSequenceClassification(bert().config).eval()
    if config is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            speccond.apply(model, config)
    return model


@pytest.mark.parametrize("correction", list(CORRECTIONS))
def test_an_adapter_records_its_base_and_loads_onto_the_same_conditioning(tmp_path, correction):
    config = SpectralConfig(**CORRECTIONS[correction])
    folder, trained = adapter_from(tmp_path, config)
    record = __import__("json").loads((folder / "speccond_base.json").read_text())
    assert record["conditioned"] and len(record["sites"]) == 6
    assert "bert.encoder.layer.0.attention.self.query.weight" in record["sites"]
    assert (folder / "adapter_config.json").is_file()  # still PEFT's own adapter folder
    reloaded = speccond.load_adapter(base_with(config), folder)
    assert torch.equal(logits(reloaded), trained)
    plain = speccond.load_adapter(base_with(None), adapter_from(tmp_path / "plain", None)[0])
    assert isinstance(plain, peft.PeftModel)  # a plain adapter onto a plain base: as PEFT loads it


LAM10 = SpectralConfig(lam=10.0)
MISMATCHED = {  # trained on, loaded onto (seed of the base's weights), what the refusal says
    "conditioned onto plain": (LAM10, None, 0, r"trained on a spectrally conditioned base .* this base is not conditioned"),
    "plain onto conditioned": (None, LAM10, 0, r"trained on a plain base .* speccond\.remove\(base, merge=False\)"),
    "other lam": (LAM10, SpectralConfig(lam=5.0), 0, r"conditioned with identity [qkv]=5 .*here, and the adapter was trained with identity [qkv]=10"),
    "svd onto identity": (SpectralConfig(correction="svd"), LAM10, 0, r"identity [qkv]=10 .*here, and the adapter was trained with svd/head [qkv]"),
    "svd from other weights": (SpectralConfig(correction="svd"), SpectralConfig(correction="svd"), 1, r"\|\|C\|\| = .* C came from other weights"),
    "fewer projections": (LAM10, SpectralConfig(lam=10.0, exclude=r"layer\.1\."), 0, r"not conditioned here: bert\.encoder\.layer\.1"),
}


@pytest.mark.parametrize("case", list(MISMATCHED))
def test_an_adapter_refuses_a_base_conditioned_otherwise(tmp_path, case):
    trained_on, loaded_onto, seed, message = MISMATCHED[case]
    folder, _ = adapter_from(tmp_path, trained_on)
    base = base_with(loaded_onto, seed)
    with pytest.raises(ValueError, match=message):
        speccond.load_adapter(base, folder)
    assert not any(is_tuner_layer(m) for m in base.modules())  # refused before PEFT touched the base


def test_an_unrecorded_adapter_is_refused_on_a_conditioned_base(tmp_path):
    """An adapter saved with PEFT's own save_pretrained says nothing about its base: not onto a conditioned one."""
    folder, trained = adapter_from(tmp_path, LAM10, save=None)
    with pytest.raises(ValueError, match=r"has no speccond_base\.json.*speccond\.save_adapter"):
        speccond.load_adapter(base_with(LAM10), folder)
    with pytest.raises(TypeError, match="expects a PEFT model"):
        speccond.save_adapter(bert(), tmp_path / "x")

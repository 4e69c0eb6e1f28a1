"""Checkpoints of conditioned models (docs/GUIDE.md, "Saving and loading"): they say that they are
conditioned, and how.

- every state dict of a conditioned model carries a marker per correction: a plain model's strict
  load_state_dict reports it as unexpected, a conditioned model's checks it describes its own correction;
- transformers round trips: speccond.save_pretrained (and model.save_pretrained / Trainer.save_model alone)
  then speccond.from_pretrained give bit-for-bit the same outputs, for BERT and Llama (grouped-query), both
  backends and every correction, after a training step (so a fresh SVD / lam="auto" would differ);
- the naive path (transformers' from_pretrained of a conditioned checkpoint, then speccond.apply) is
  detected, never conditioned on random q, k, v;
- speccond's loaders refuse a conditioned checkpoint into a plain model and a plain one into a conditioned
  model; checkpoints written before the markers still load.
"""
from __future__ import annotations

import json
import logging
import re
import warnings

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from speccond import checkpoint as ckpt
import speccond
from speccond.checkpoint_files import refuse_partly_loaded
from speccond.core.backends import attachments
from speccond.core.correction import MARKER

transformers = pytest.importorskip("transformers")

CORRECTIONS = {
    "identity": dict(lam=10.0),
    "svd": dict(correction="svd"),
    "auto": dict(lam="auto"),
}
BACKENDS = ("weight", "activation")


def bert(**overrides):
    config = transformers.BertConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, **overrides,
    )
    return transformers.BertForSequenceClassification(config)


def llama(**overrides):
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, pad_token_id=0, bos_token_id=1, eos_token_id=2, **overrides,
    )
    return transformers.LlamaForCausalLM(config)


MODELS = {"bert": bert, "llama": llama}
AUTO_CLASSES = {"bert": "AutoModelForSequenceClassification", "llama": "AutoModelForCausalLM"}
TABLE = [(m, b, c) for m in MODELS for b in BACKENDS for c in CORRECTIONS]
IDS = ["-".join(case) for case in TABLE]


@pytest.fixture(autouse=True)
def _quiet_transformers():
    """transformers' load report and progress bars are noise here; what matters is asserted."""
    previous = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    yield
    transformers.utils.logging.enable_progress_bar()
    transformers.logging.set_verbosity(previous)


def _ids() -> torch.Tensor:
    return torch.randint(3, 64, (2, 10), generator=torch.Generator().manual_seed(1))  # (B, N)


def _logits(model: nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(input_ids=_ids()).logits


def _trained(name: str, backend: str, correction: str, **overrides) -> nn.Module:
    """A conditioned model after one SGD step: W has moved since C was computed."""
    torch.manual_seed(0)
    model = MODELS[name](**overrides)
    _apply(model, backend=backend, **CORRECTIONS[correction])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model.train()
    model(input_ids=_ids()).logits.square().mean().backward()
    optimizer.step()
    return model.eval()


def _apply(model: nn.Module, **fields) -> None:
    """speccond.apply without its warnings (lam = 10 collapses attention; lam = 1 is below Theorem 3.8's 2)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        speccond.apply(model, speccond.SpectralConfig(**fields))


def _markers(state) -> list[str]:
    return [k for k in state if k.endswith(f".{MARKER}")]


# 1. a state dict says that it is conditioned --------------------------------------------------------------
@pytest.mark.parametrize("correction", CORRECTIONS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_correction_saves_a_marker_that_a_plain_model_rejects(backend, correction):
    model = _trained("bert", backend, correction)
    state = model.state_dict()
    found = list(attachments(model))
    assert len(_markers(state)) == len(found) == 6  # q, k, v of 2 layers
    recorded = ckpt.conditioning(state)
    assert list(recorded) == [f.qualified_name for f in found]
    assert {r["backend"] for r in recorded.values()} == {backend}
    plain = bert()
    with pytest.raises(RuntimeError, match=rf"Unexpected key\(s\).*\.{MARKER}"):
        plain.load_state_dict(state)  # even the activation backend's numeric identity, which saves nothing else
    merged = speccond.remove(model, merge=True)
    assert list(merged.state_dict()) == list(plain.state_dict())  # the merged model: exactly the vanilla keys


def test_a_marker_of_another_correction_is_refused_by_load_state_dict():
    torch.manual_seed(0)
    saved, other = bert(), bert()
    _apply(saved, lam=10.0, backend="activation")
    _apply(other, lam=1.0, backend="activation")
    # No tensor but the marker differs: without it lam = 10 would load into lam = 1 silently.
    with pytest.raises(RuntimeError, match=r"query.spectral_correction.speccond: the checkpoint's correction is identity q=10 \(.*\) but this model's is identity q=1 \(.*load_conditioned"):
        other.load_state_dict(saved.state_dict())


def test_the_marker_survives_dtype_casts_and_stays_out_of_training():
    model = bert()
    _apply(model, correction="svd")
    before = {k: v.clone() for k, v in model.state_dict().items() if k.endswith(MARKER)}
    model.to(torch.bfloat16)
    after = {k: v for k, v in model.state_dict().items() if k.endswith(MARKER)}
    assert all(v.dtype == torch.uint8 and torch.equal(v, before[k]) for k, v in after.items())
    assert all(not b.requires_grad for b in model.buffers())
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in bert().parameters())


# 2. transformers round trips ------------------------------------------------------------------------------
@pytest.mark.parametrize("saver", ["speccond", "transformers"])
@pytest.mark.parametrize("name, backend, correction", TABLE, ids=IDS)
def test_saved_model_reloads_conditioned_bit_for_bit(tmp_path, name, backend, correction, saver):
    model = _trained(name, backend, correction)
    if correction != "identity":  # the saved C is not what the current W would give: it must be loaded
        found = next(attachments(model))
        assert not torch.equal(found.correction.recomputed(found.stored_weight()), _follows(found.correction))
    expected = _logits(model)
    if saver == "speccond":
        speccond.save_pretrained(model, tmp_path)
        record = json.loads((tmp_path / ckpt.CONFIG_FILE).read_text())
        assert record["config"]["backend"] == backend and record["config"]["targets"] is None
    else:  # model.save_pretrained alone (what Trainer.save_model calls): the markers say the rest
        model.save_pretrained(tmp_path)
        assert not (tmp_path / ckpt.CONFIG_FILE).exists()
    cls = getattr(transformers, AUTO_CLASSES[name]) if saver == "transformers" else type(model)
    reloaded = speccond.from_pretrained(cls, tmp_path)
    assert not reloaded.training
    assert torch.equal(_logits(reloaded), expected)
    assert speccond.describe(reloaded).rows == speccond.describe(model).rows  # same blocks, lams, kappas
    again = load_file(tmp_path / "model.safetensors")
    assert all(torch.equal(v, again[k]) for k, v in reloaded.state_dict().items() if k in again)


def _follows(correction) -> torch.Tensor:
    return correction.matrix if correction.kind == "svd" else correction.values


def test_a_subset_with_mixed_lams_is_inferred_exactly(tmp_path):
    torch.manual_seed(0)
    model = bert()
    _apply(model, lam="auto", lam_v=0.0, targets=r"layer\.1\.", backend="activation")
    expected = _logits(model)
    model.save_pretrained(tmp_path)  # no speccond.json: inferred from the markers
    reloaded = speccond.from_pretrained(type(model), tmp_path)
    assert [f.qualified_name for f in attachments(reloaded)] == [
        "bert.encoder.layer.1.attention.self.query.weight", "bert.encoder.layer.1.attention.self.key.weight",
    ]
    assert torch.equal(_logits(reloaded), expected)


def test_sharded_and_tied_checkpoints_reload_exactly(tmp_path):
    model = _trained("llama", "weight", "svd", tie_word_embeddings=True)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    expected = _logits(model)
    speccond.save_pretrained(model, tmp_path, max_shard_size="20KB")
    assert (tmp_path / ckpt.WEIGHTS_INDEX).is_file() and not (tmp_path / ckpt.WEIGHTS).exists()
    reloaded = speccond.from_pretrained(transformers.LlamaForCausalLM, tmp_path)
    assert reloaded.lm_head.weight is reloaded.model.embed_tokens.weight  # saved once, loaded once
    assert torch.equal(_logits(reloaded), expected)


def test_save_pretrained_refuses_what_it_cannot_describe(tmp_path):
    with pytest.raises(ValueError, match="not spectrally conditioned.*model.save_pretrained"):
        speccond.save_pretrained(bert(), tmp_path)
    with pytest.raises(TypeError, match="transformers model.*load_conditioned"):
        speccond.save_pretrained(nn.Linear(2, 2), tmp_path)
    with pytest.raises(ValueError, match="not one"):
        speccond.from_pretrained(transformers.BertModel, tmp_path / "missing")


# 3. the naive path: transformers' from_pretrained, then speccond.apply ---------------------------------
@pytest.mark.parametrize("name, backend, correction", TABLE, ids=IDS)
def test_transformers_from_pretrained_of_a_conditioned_checkpoint_is_detected(tmp_path, name, backend, correction):
    model = _trained(name, backend, correction)
    expected = _logits(model)
    model.save_pretrained(tmp_path)
    naive = getattr(transformers, AUTO_CLASSES[name]).from_pretrained(tmp_path)
    lost = "initialised them at random" if backend == "weight" else "dropped its saved corrections"
    call = re.escape(f"speccond.from_pretrained({type(naive).__name__}, '{tmp_path}')")
    with pytest.raises(ValueError, match=rf"{lost}.*{call}"):
        refuse_partly_loaded(naive)
    saved = load_file(tmp_path / "model.safetensors")
    for key, value in naive.state_dict().items():
        moved = key.removesuffix("weight") + "parametrizations.weight.original"
        if key.endswith(".weight") and moved in saved:  # the weight backend's q, k, v: what apply would have conditioned, at random
            assert not torch.equal(value, saved[moved])
        elif key in saved:
            assert torch.equal(value, saved[key])
    built = type(model)(naive.config)  # built from the config only: the documented reload route passes
    assert built.config._name_or_path == str(tmp_path)
    refuse_partly_loaded(built)
    speccond.load_conditioned(naive, tmp_path)  # the model in hand, conditioned as saved: exact
    assert torch.equal(_logits(naive), expected)
    refuse_partly_loaded(naive)  # every weight now from the checkpoint


@pytest.mark.parametrize("name", MODELS)
def test_plain_models_pass_the_naive_path_check(tmp_path, name):
    MODELS[name]().save_pretrained(tmp_path)
    for plain in (MODELS[name](), getattr(transformers, AUTO_CLASSES[name]).from_pretrained(tmp_path), nn.Linear(2, 2)):
        refuse_partly_loaded(plain)


def test_apply_refuses_a_model_that_transformers_loaded_from_a_conditioned_checkpoint(tmp_path):
    model = _trained("bert", "weight", "svd")
    model.save_pretrained(tmp_path)
    naive = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="initialised them at random.*speccond.from_pretrained"):
        speccond.apply(naive, speccond.SpectralConfig(correction="svd"))
    assert not speccond.is_conditioned(naive)


# 4. speccond's loaders refuse what does not match -------------------------------------------------------
def test_load_conditioned_refuses_plain_and_mismatched_checkpoints(tmp_path):
    model = _trained("bert", "activation", "identity")
    save_file(model.state_dict(), tmp_path / "conditioned.safetensors")
    plain_state = bert().state_dict()
    with pytest.raises(ValueError, match="no speccond marker.*not a conditioned checkpoint.*load_state_dict"):
        speccond.load_conditioned(bert(), plain_state)
    conditioned = bert()
    _apply(conditioned, lam=10.0, backend="activation")
    with pytest.raises(ValueError, match="no speccond marker"):
        speccond.load_conditioned(conditioned, plain_state)  # a plain checkpoint into a conditioned model
    svd = bert()
    _apply(svd, correction="svd", backend="activation")
    before = {k: v.clone() for k, v in svd.state_dict().items()}
    with pytest.raises(ValueError, match=r"self\.key\.weight: the checkpoint's correction is identity k=10 \(.*\), this model's is svd/head k \("):
        speccond.load_conditioned(svd, tmp_path / "conditioned.safetensors")
    assert all(torch.equal(v, before[k]) for k, v in svd.state_dict().items())  # nothing copied
    subset = bert()
    _apply(subset, lam=10.0, backend="activation", targets=r"layer\.0\.")
    with pytest.raises(ValueError, match=r"the checkpoint conditions \['bert.encoder.layer.1"):
        speccond.load_conditioned(subset, tmp_path / "conditioned.safetensors")
    fresh = bert()  # a plain model: conditioned as saved, then loaded exactly
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # lam = 10's collapse warning, again
        assert speccond.load_conditioned(fresh, tmp_path / "conditioned.safetensors") is fresh
    assert torch.equal(_logits(fresh), _logits(model))


def test_load_conditioned_leaves_a_plain_model_plain_when_the_checkpoint_does_not_fit():
    model = _trained("bert", "weight", "svd")
    state = dict(model.state_dict())
    state["classifier.weight"] = torch.zeros(3, 32)  # another head: (3, D) against (2, D)
    fresh = bert()
    with pytest.raises(ValueError, match="shapes differ.*classifier.weight"):
        speccond.load_conditioned(fresh, state)
    assert not speccond.is_conditioned(fresh) and not getattr(fresh, ckpt.LOADED, False)


def test_load_conditioned_conditions_any_module_as_saved(tmp_path):
    """Not only transformers: a declared layout on a module of one's own, saved with safetensors."""
    layout = speccond.ProjectionLayout("qkv", num_heads=2)

    def build():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 8), nn.ModuleDict({"qkv": nn.Linear(8, 24)}))

    model = build()
    _apply(model, lam="auto", layouts={r"qkv\.weight$": layout})
    with torch.no_grad():
        model[1]["qkv"].parametrizations.weight.original.mul_(3)  # trained: "auto"'s lams no longer fit W
    save_file(model.state_dict(), tmp_path / "model.safetensors")
    fresh = speccond.load_conditioned(build(), tmp_path / "model.safetensors")
    x = torch.randn(4, 8)
    assert torch.equal(fresh[1]["qkv"](fresh[0](x)), model[1]["qkv"](model[0](x)))
    assert speccond.describe(fresh).rows[0].head_lams == speccond.describe(model).rows[0].head_lams


def test_the_harness_loader_names_load_conditioned(tmp_path):
    from speccond.harness.training import checkpoint as runs

    conditioned = bert()
    _apply(conditioned, lam="auto")
    folder = runs.save(tmp_path, 1, 0, conditioned, {})
    with pytest.raises(ValueError, match="checkpoint is of a spectrally conditioned model.*load_conditioned"):
        runs.load(folder, bert())
    folder = runs.save(tmp_path, 2, 0, bert(), {})
    with pytest.raises(ValueError, match="this model is spectrally conditioned and the checkpoint is not"):
        runs.load(folder, conditioned)


# 5. checkpoints written before the markers --------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_checkpoints_without_markers_still_load(tmp_path, backend, caplog):
    from speccond.data.store import sha256
    from speccond.harness.training import checkpoint as runs

    model = _trained("bert", backend, "auto")
    expected = _logits(model)
    old = {k: v for k, v in model.state_dict().items() if not k.endswith(MARKER)}  # as speccond wrote it before
    config = speccond.SpectralConfig(lam="auto", backend=backend)

    def fresh():
        torch.manual_seed(5)
        built = bert()
        speccond.apply(built, config)
        return built

    loaded = fresh()
    with caplog.at_level(logging.DEBUG, logger="speccond.core.correction"):
        assert loaded.load_state_dict(old, strict=True).missing_keys == []  # torch, strict
    assert "no marker" in caplog.text
    assert torch.equal(_logits(loaded), expected)

    folder = runs.save(tmp_path, 3, 0, model, {})  # a run directory's checkpoint, rewritten without markers
    save_file({k: v.contiguous() for k, v in old.items()}, folder / "model.safetensors")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["model_sha256"] = sha256(folder / "model.safetensors")
    (folder / "manifest.json").write_text(json.dumps(manifest))
    harness = fresh()
    runs.load(folder, harness)
    assert torch.equal(_logits(harness), expected)

    with pytest.raises(ValueError, match="no speccond marker.*config="):
        speccond.load_conditioned(bert(), old)
    plain = bert()
    speccond.load_conditioned(plain, old, config=config)  # the config it was trained with
    assert torch.equal(_logits(plain), expected)


# 6. Trainer ------------------------------------------------------------------------------------------------
def test_trainer_save_model_reloads_conditioned(tmp_path):
    pytest.importorskip("accelerate", reason="transformers.Trainer needs accelerate")
    model = _trained("bert", "weight", "svd")
    data = [{"input_ids": _ids()[i % 2], "labels": torch.tensor(i % 2)} for i in range(8)]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), max_steps=2, report_to=[], use_cpu=True, save_strategy="no",
        per_device_train_batch_size=4, learning_rate=1e-3, disable_tqdm=True,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, eval_dataset=data)
    trainer.train()
    metrics = trainer.evaluate()
    trainer.save_model(str(tmp_path / "saved"))  # calls model.save_pretrained: markers, no speccond.json
    reloaded = speccond.from_pretrained(transformers.BertForSequenceClassification, tmp_path / "saved")
    assert transformers.Trainer(model=reloaded, args=args, eval_dataset=data).evaluate()["eval_loss"] == metrics["eval_loss"]
    assert torch.equal(_logits(reloaded), _logits(model))

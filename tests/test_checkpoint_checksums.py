"""Saved conditioned models carry a checksum that loading verifies (docs/RELIABILITY_LIBRARY.md,
"What is checked on load").

safetensors has no checksum of its own: one flipped exponent bit once turned W[0,0] into -1.07e37 and every
output into NaN, loaded without a word. speccond.save_conditioned records the SHA-256 of the tensors in the
file's metadata, speccond.save_pretrained the SHA-256 of each weight file in speccond.json; load_conditioned
(and from_pretrained) refuse a file that differs, naming it and what to do, and leave the model as it was.
Files written before (or by other savers) still load, with a logged note that they are unverified.
"""
from __future__ import annotations

import json
import logging
import struct

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

import speccond

LAYOUT = speccond.ProjectionLayout("qkv", num_heads=2)
CONFIG = speccond.SpectralConfig(lam=10.0, layouts={r"qkv\.weight$": LAYOUT})


def build() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.ModuleDict({"qkv": nn.Linear(8, 24)}))


def conditioned() -> nn.Module:
    model = build()
    speccond.apply(model, CONFIG)
    return model


def _flip_exponent(path, key: str) -> None:
    """Flip the top bit of the exponent of ``key``'s first float32 (little-endian: its 4th byte)."""
    raw = bytearray(path.read_bytes())
    (length,) = struct.unpack("<Q", raw[:8])
    start, _ = json.loads(raw[8 : 8 + length])[key]["data_offsets"]
    raw[8 + length + start + 3] ^= 0x40
    path.write_bytes(bytes(raw))


def _plain_state(model: nn.Module) -> dict:
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_a_saved_model_loads_back_exactly(tmp_path):
    model = conditioned()
    path = speccond.save_conditioned(model, tmp_path / "model.safetensors")
    fresh = speccond.load_conditioned(build(), path)
    x = torch.randn(3, 8)
    assert torch.equal(fresh[1]["qkv"](fresh[0](x)), model[1]["qkv"](model[0](x)))


@pytest.mark.parametrize("damage", ["exponent", "truncated"])
def test_a_damaged_file_is_refused_and_the_model_left_plain(tmp_path, damage):
    path = speccond.save_conditioned(conditioned(), tmp_path / "model.safetensors")
    if damage == "exponent":
        _flip_exponent(path, "1.qkv.parametrizations.weight.original")
    else:
        path.write_bytes(path.read_bytes()[:-40])
    fresh = build()
    before = _plain_state(fresh)
    with pytest.raises(ValueError) as error:
        speccond.load_conditioned(fresh, path)
    message = str(error.value)
    assert str(path) in message and "damaged" in message and "\n" not in message
    assert "copy" in message  # what to do: restore it from a copy or save it again
    assert not speccond.is_conditioned(fresh)
    assert all(torch.equal(v, before[k]) for k, v in fresh.state_dict().items())


def test_a_file_without_a_checksum_loads_with_a_note(tmp_path, caplog):
    model = conditioned()
    save_file(model.state_dict(), tmp_path / "model.safetensors")  # as written before checksums
    with caplog.at_level(logging.INFO, logger="speccond"):
        speccond.load_conditioned(build(), tmp_path / "model.safetensors")
    notes = [r.getMessage() for r in caplog.records if "unverified" in r.getMessage()]
    assert notes and str(tmp_path / "model.safetensors") in notes[0]


def test_save_pretrained_records_and_from_pretrained_checks_each_weight_file(tmp_path, caplog):
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
    )
    model = transformers.BertModel(config)
    speccond.apply(model, speccond.SpectralConfig(lam=10.0))
    speccond.save_pretrained(model, tmp_path)
    record = json.loads((tmp_path / "speccond.json").read_text())
    assert set(record["sha256"]) == {"model.safetensors"}
    with caplog.at_level(logging.INFO, logger="speccond"):
        speccond.from_pretrained(transformers.BertModel, tmp_path)  # verified: loads, and says nothing is unverified
    assert not [r for r in caplog.records if "unverified" in r.getMessage()], caplog.text
    _flip_exponent(tmp_path / "model.safetensors", "encoder.layer.0.attention.self.query.parametrizations.weight.original")
    with pytest.raises(ValueError, match=r"model\.safetensors is damaged: its SHA-256 .* speccond\.json recorded"):
        speccond.from_pretrained(transformers.BertModel, tmp_path)
    del record["sha256"]  # a folder saved before checksums: loads, unverified
    (tmp_path / "speccond.json").write_text(json.dumps(record))
    with caplog.at_level(logging.INFO, logger="speccond"):
        speccond.from_pretrained(transformers.BertModel, tmp_path)
    assert any("unverified" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "model, path, error, match",
    [
        ("plain", "model.safetensors", ValueError, "not spectrally conditioned"),
        ("conditioned", "model.pt", ValueError, r"'.*model\.pt'.*\.safetensors"),
        ("conditioned", "missing/model.safetensors", ValueError, "folder .*missing.* does not exist"),
        ("conditioned", 3, TypeError, "a path .* got int 3"),
    ],
)
def test_save_conditioned_refuses_bad_input_before_writing(tmp_path, model, path, error, match):
    module = conditioned() if model == "conditioned" else build()
    target = tmp_path / path if isinstance(path, str) else path
    with pytest.raises(error, match=match):
        speccond.save_conditioned(module, target)
    assert list(tmp_path.iterdir()) == []


# --- inspect --checkpoint: the file is checked before a figure is printed ------------------------------------
INSPECTED = ["timm:vit_tiny_patch16_224", "--set", "img_size=32", "--set", "depth=1", "--lam", "10"]  # as saved below


def _inspected_checkpoint(tmp_path, **sizes):
    """A run checkpoint (harness/training/checkpoint.py: model.safetensors beside its manifest.json) of the model
    ``speccond inspect INSPECTED`` conditions (lam = 10, identity)."""
    from speccond.harness.models.named import build_named_model
    from speccond.harness.training import checkpoint

    model = build_named_model(INSPECTED[0], {"img_size": 32, "depth": 1, **sizes})
    speccond.apply(model, speccond.SpectralConfig(lam=10.0))
    return checkpoint.save(tmp_path / "run", 3, 0, model, {"optimizer": {}}) / "model.safetensors"


@pytest.mark.parametrize("damage, message", [
    ("exponent", r"model.safetensors is damaged: its SHA-256 differs from the one .*manifest.json records; restore"),
    ("truncated", r"model.safetensors is damaged: its SHA-256 differs"),
    ("truncated, no manifest", r"model.safetensors is damaged: unreadable as safetensors"),
    ("another shape", r"model.safetensors does not fit this model \(missing \[\], unexpected \[\], other shapes "
                      r"\[.*\(the model's \(192, 192\)\).*build the model with the settings it was saved with"),
])
def test_inspect_refuses_a_damaged_or_mismatched_checkpoint_in_one_line(tmp_path, capsys, damage, message):
    import re

    from speccond.harness.cli import main

    path = _inspected_checkpoint(tmp_path, **({"embed_dim": 96} if damage == "another shape" else {}))
    if damage == "exponent":
        _flip_exponent(path, "blocks.0.attn.qkv.parametrizations.weight.original")
    elif damage.startswith("truncated"):
        path.write_bytes(path.read_bytes()[:-40])
    if damage.endswith("no manifest"):
        (path.parent / "manifest.json").unlink()
    assert main(["inspect", *INSPECTED, "--checkpoint", str(path)]) == 2
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if line.startswith("speccond inspect: error: ")]
    assert len(errors) == 1 and re.search(message, errors[0]) and "Traceback" not in captured.err, captured.err
    assert "sigma_max" not in captured.out  # no table of the damaged weights


def test_inspect_reads_an_intact_run_checkpoint(tmp_path, capsys):
    from speccond.harness.cli import main

    assert main(["inspect", *INSPECTED, "--checkpoint", str(_inspected_checkpoint(tmp_path))]) == 0
    assert "sigma_max" in capsys.readouterr().out

"""speccond.monitor: the same metrics, measured from the training forward itself, reach TensorBoard and CSV
loggers under the transformers Trainer (whatever the callback order), under Lightning and from a plain
loop; the values are the diagnostics' values; no second forward pass; no hook outlives a measured step."""
from __future__ import annotations

import gc
import math
import subprocess
import sys
import weakref
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from speccond import diagnostics as dx
import speccond
from speccond.layers import attention_layers
from speccond.monitor import Monitor, Schedule, read_csv_metrics

timm = pytest.importorskip("timm")
RTOL = 1e-4  # float32 spectra and entropy against the diagnostics' float64


def vit(correction: dict | None = None):
    torch.manual_seed(0)
    model = timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=2, num_classes=3
    )
    if correction is not None:
        speccond.apply(model, speccond.SpectralConfig(**correction))
    return model


def images(batch: int = 4) -> torch.Tensor:
    return torch.randn(batch, 3, 32, 32, generator=torch.Generator().manual_seed(1))  # (B, C, H, W)


def train_steps(model, monitor, steps: int, batch: torch.Tensor) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    labels = torch.arange(batch.shape[0]) % 3
    for step in range(steps):
        with monitor.step(step):
            loss = F.cross_entropy(model(batch), labels)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()


def event_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value)]} from every TensorBoard event file under ``folder``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, list[tuple[int, float]]] = {}
    for events in sorted(folder.rglob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(events), size_guidance={"scalars": 0})
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            out.setdefault(tag, []).extend((e.step, e.value) for e in accumulator.Scalars(tag))
    return out


def close(a: float, b: float, rtol: float = RTOL) -> bool:
    return math.isclose(a, b, rel_tol=rtol, abs_tol=1e-6)


# -- values: the diagnostics' values, for the same batch and weights -------------------------------------------
@pytest.mark.parametrize("correction", [None, {"lam": "auto"}, {"correction": "svd"}], ids=["plain", "auto", "svd"])
def test_values_equal_the_diagnostics(tmp_path, correction):
    model, batch = vit(correction).eval(), images()
    monitor = Monitor(model, writer=tmp_path / "m.csv", every=1)
    with monitor.step(0):
        model(batch)
    got = monitor.last
    for row in dx.attention_entropy(model, (batch,)):
        assert close(got[f"speccond/entropy/layer{row['layer']}/head{row['head']}"], row["entropy"])
    spectra = dx.projection_spectra(model)
    for row in spectra:
        path = f"layer{row['layer']}/{row['projection']}" + ("" if row["head"] is None else f"/head{row['head']}")
        assert close(got[f"speccond/kappa/{path}"], row["kappa"])
        if row["head"] is None:
            assert close(got[f"speccond/sigma_max/{path}"], row["sigma_max"])
            assert close(got[f"speccond/sigma_min/{path}"], row["sigma_min"])
    head_kappas = [r["kappa"] for r in spectra if r["head"] is not None]
    assert close(got["speccond/kappa/mean"], sum(head_kappas) / len(head_kappas))
    assert close(got["speccond/kappa/max"], max(head_kappas))


def test_the_schedule_samples_layers_and_heads(tmp_path):
    model = vit().eval()
    monitor = Monitor(model, writer=tmp_path / "m.csv", every=1, layers=[1], heads=[0, 2])
    with monitor.step(0):
        model(images())
    layers = {name.split("/")[2] for name in monitor.last if "/layer" in name}
    heads = {name.split("/")[-1] for name in monitor.last if "/head" in name}
    assert layers == {"layer1"} and heads == {"head0", "head2"}


def test_entropy_in_bfloat16_autocast_matches_float32(tmp_path):
    model, batch = vit().eval(), images()
    monitor = Monitor(model, writer=tmp_path / "m.csv", every=1, spectra=False)
    with monitor.step(0), torch.autocast("cpu", dtype=torch.bfloat16):
        model(batch)
    for row in dx.attention_entropy(model, (batch,)):  # the layer inputs carry bfloat16 rounding: 2e-2
        assert close(monitor.last[f"speccond/entropy/layer{row['layer']}/head{row['head']}"], row["entropy"], 2e-2)


# -- cost: no second forward; hooks only on due steps; nothing of the batch kept --------------------------------
def test_the_monitor_adds_no_forward_pass(tmp_path):
    model = vit()
    calls = []
    model.register_forward_hook(lambda *_: calls.append(1))
    train_steps(model, Monitor(model, writer=tmp_path / "m.csv", every=1), steps=3, batch=images())
    assert len(calls) == 3


def test_hooks_only_while_measuring_and_no_activation_outlives_the_step(tmp_path):
    model = vit()
    modules = [layer.module for layer in attention_layers(model)]
    monitor = Monitor(model, writer=tmp_path / "m.csv", every=2)
    seen = []
    modules[0].register_forward_pre_hook(lambda _m, args: seen.append(weakref.ref(args[0])))
    labels = torch.arange(4) % 3
    for step in range(3):
        with monitor.step(step):
            assert sum(len(m._forward_pre_hooks) for m in modules) == 1 + (2 if step % 2 == 0 else 0)
            loss = F.cross_entropy(model(images()), labels)
            loss.backward()
            del loss
        assert sum(len(m._forward_pre_hooks) for m in modules) == 1  # only the test's own
    gc.collect()
    assert len(seen) == 3 and all(ref() is None for ref in seen)


# -- front ends: the plain loop -------------------------------------------------------------------------------------
def test_plain_loop_writes_tensorboard_and_csv(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    model, batch = vit({"correction": "svd"}), images()
    writer = SummaryWriter(str(tmp_path / "tb"))
    train_steps(model, Monitor(model, writer=writer, every=2), steps=3, batch=batch)
    writer.close()
    csv_monitor = Monitor(model, writer=tmp_path / "m.csv", every=2)
    train_steps(model, csv_monitor, steps=3, batch=batch)
    scalars, rows = event_scalars(tmp_path / "tb"), read_csv_metrics(tmp_path / "m.csv")
    assert set(scalars) == set(rows) == set(csv_monitor.last)
    assert [step for step, _ in scalars["speccond/kappa/mean"]] == [0, 2] == [s for s, _ in rows["speccond/kappa/mean"]]
    assert rows["speccond/kappa/layer1/v/head2"][-1][1] == csv_monitor.last["speccond/kappa/layer1/v/head2"]


def test_bad_schedule_and_writer_say_what_to_do(tmp_path):
    with pytest.raises(ValueError, match="every must be a whole number of steps >= 1, got 0"):
        Schedule(every=0)
    with pytest.raises(ValueError, match="heads must be None"):
        Schedule(heads=3)
    with pytest.raises(ValueError, match="not a .csv file"):
        Monitor(vit(), writer=tmp_path / "m.txt")
    with pytest.raises(TypeError, match="add_scalar"):
        Monitor(vit(), writer=object())
    assert not (tmp_path / "m.txt").exists()


def test_import_speccond_loads_neither_transformers_nor_lightning_nor_tensorboard():
    code = "import sys, speccond, speccond.monitor; print([m for m in ('transformers', 'lightning', 'tensorboard') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# -- front ends: transformers.Trainer -------------------------------------------------------------------------------
@pytest.mark.parametrize("place", ["after", "before"], ids=["callbacks-arg-after-tensorboard", "inserted-first"])
def test_trainer_callback_reaches_tensorboard_whatever_the_order(tmp_path, place):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    pytest.importorskip("tensorboard")
    from speccond.monitor import SpecCondCallback

    config = transformers.BertConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
    )
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config)
    calls = []
    model.register_forward_hook(lambda *_: calls.append(1))
    ids = torch.randint(3, 64, (8, 12), generator=torch.Generator().manual_seed(0))
    data = [{"input_ids": ids[i], "labels": torch.tensor(i % 2)} for i in range(8)]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), max_steps=4, report_to=["tensorboard"], use_cpu=True, save_strategy="no",
        per_device_train_batch_size=2, learning_rate=1e-3, disable_tqdm=True, logging_steps=50,
    )
    callback = SpecCondCallback(every=2)
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=data, callbacks=[callback] if place == "after" else None
    )
    if place == "before":
        trainer.callback_handler.callbacks.insert(0, callback)
    trainer.train()
    assert len(calls) == 4  # one forward per step: the monitor adds none
    assert trainer.callback_handler.callbacks[0] is callback
    scalars = {tag.removeprefix("train/"): v for tag, v in event_scalars(tmp_path).items()}  # the Trainer's prefix
    assert {tag for tag in scalars if tag.startswith("speccond/")} == set(callback.last)
    assert [step for step, _ in scalars["speccond/kappa/mean"]] == [1, 3]  # measured at steps 0, 2; logged after
    assert math.isclose(scalars["speccond/entropy/layer1/head3"][-1][1], callback.last["speccond/entropy/layer1/head3"], rel_tol=1e-6)


# -- front ends: Lightning ------------------------------------------------------------------------------------------
def test_lightning_callback_reaches_csv_and_tensorboard_loggers(tmp_path):
    pl = pytest.importorskip("lightning.pytorch")
    pytest.importorskip("tensorboard")
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    from speccond.monitor import SpecCondLightningCallback

    class Classifier(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = vit({"correction": "svd"})

        def training_step(self, batch, _index):
            x, y = batch
            return F.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-3)

    data = torch.utils.data.TensorDataset(images(8), torch.arange(8) % 3)
    callback = SpecCondLightningCallback(every=2)
    trainer = pl.Trainer(
        max_steps=3, accelerator="cpu", callbacks=[callback], enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=50,
        logger=[CSVLogger(tmp_path, name="csv"), TensorBoardLogger(tmp_path, name="tb")],
    )
    trainer.fit(Classifier(), torch.utils.data.DataLoader(data, batch_size=2))
    import csv

    with next((tmp_path / "csv").rglob("metrics.csv")).open() as handle:
        rows = list(csv.DictReader(handle))
    logged = {key for row in rows for key, value in row.items() if key.startswith("speccond/") and value}
    assert logged == set(callback.last)
    assert [int(r["step"]) for r in rows if r["speccond/kappa/mean"]] == [1, 3]
    scalars = event_scalars(tmp_path / "tb")
    assert {tag for tag in scalars if tag.startswith("speccond/")} == set(callback.last)
    assert [step for step, _ in scalars["speccond/entropy/mean"]] == [1, 3]

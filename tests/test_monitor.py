"""speccond.monitor: the same metrics, measured from the training forward itself, reach TensorBoard and CSV
loggers under the transformers Trainer (whatever the callback order), under Lightning and from a plain
loop; the values are the diagnostics' values; no second forward pass; no hook outlives a measured step."""
from __future__ import annotations

import gc
import math
import subprocess
import sys
import warnings
import weakref
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from speccond import diagnostics as dx
import speccond
from speccond.layers import attention_layers
from speccond.monitor import Monitor, Schedule, read_csv_metrics
from tests.hidden_attention import Pooled, Router, SdpaMixer

timm = pytest.importorskip("timm")
RTOL = 1e-4  # float32 spectra and entropy against the diagnostics' float64
MEASURED_AT = [0, 2]  # every=2 over 3 or 4 steps: the global steps of the forwards measured, logged as such by all front ends


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
    assert [step for step, _ in scalars["speccond/kappa/mean"]] == MEASURED_AT == [s for s, _ in rows["speccond/kappa/mean"]]
    assert rows["speccond/kappa/layer1/v/head2"][-1][1] == csv_monitor.last["speccond/kappa/layer1/v/head2"]


def test_a_step_begun_again_per_micro_batch_is_measured_once(tmp_path):
    """Gradient accumulation written as one `monitor.step(optimiser_step)` per micro-batch: one row per step and
    metric, the first micro-batch's (its entropy equals the diagnostics' on it); it once wrote one per micro-batch."""
    model = vit({"correction": "svd"})
    monitor = Monitor(model, writer=tmp_path / "m.csv", every=1)
    micro = [images(2), torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(7))]
    expected = dx.attention_entropy(model, (micro[0],))  # the weights step 0's first micro-batch meets
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    for step in range(2):
        for batch in micro:
            with monitor.step(step):
                (F.cross_entropy(model(batch), torch.zeros(2, dtype=torch.long)) / len(micro)).backward()
        optimizer.step()
        optimizer.zero_grad()
    rows = read_csv_metrics(tmp_path / "m.csv")
    assert all([step for step, _ in points] == [0, 1] for points in rows.values())
    for row in expected:
        assert close(rows[f"speccond/entropy/layer{row['layer']}/head{row['head']}"][0][1], row["entropy"])


def test_a_loop_that_starts_again_at_step_0_is_measured_again():
    """Only the step just measured, begun again at once, is passed over: a second loop over the same Monitor
    (every=3, steps 0 to 1, then 0 again) measures its step 0."""
    model, batch = vit(), images(2)
    monitor = Monitor(model, writer=None, every=3)
    measured = []
    for step in (0, 1, 0):
        monitor.last = {}
        with monitor.step(step):
            model(batch)
        measured.append(bool(monitor.last))
    assert measured == [True, False, True]


def test_a_resumed_run_is_read_in_place_of_the_steps_it_repeats(tmp_path):
    """Interrupted after measuring steps 0, 2 and 4, resumed from a checkpoint at step 2 with other weights: the
    CSV is read as 0 from the first run, then 2 and 4 from the resumed one, as TensorBoard reads its events."""
    model, batch = vit({"correction": "svd"}), images()
    first = Monitor(model, writer=tmp_path / "m.csv", every=2)
    for step in range(5):
        with first.step(step):
            model(batch)
    at_zero = read_csv_metrics(tmp_path / "m.csv")["speccond/kappa/mean"][0]  # (0, its value)
    resumed_model = vit({"lam": "auto"})
    resumed = Monitor(resumed_model, writer=tmp_path / "m.csv", every=2)
    later = {}
    for step in range(2, 5):
        with resumed.step(step):
            resumed_model(batch)
        later[step] = dict(resumed.last)
    kappas = read_csv_metrics(tmp_path / "m.csv")["speccond/kappa/mean"]
    assert kappas == [at_zero, (2, later[2]["speccond/kappa/mean"]), (4, later[4]["speccond/kappa/mean"])]
    assert kappas[1][1] != at_zero[1]  # the resumed model's figures, not the first run's


def test_writer_none_measures_and_writes_nothing(tmp_path):
    """What a rank other than 0 may pass (it writes nothing anyway: tests/test_monitor_distributed.py)."""
    model = vit({"correction": "svd"})
    monitor = Monitor(model, writer=None, every=2)
    train_steps(model, monitor, steps=3, batch=images())
    assert monitor.last["speccond/kappa/mean"] > 0 and "speccond/entropy/mean" in monitor.last
    assert list(tmp_path.iterdir()) == []


def test_bad_schedule_and_writer_say_what_to_do(tmp_path):
    with pytest.raises(ValueError, match="every must be a whole number of steps >= 1, got 0"):
        Schedule(every=0)
    with pytest.raises(ValueError, match="heads must be None"):
        Schedule(heads=3)
    with pytest.raises(ValueError, match="not a .csv file"):
        Monitor(vit(), writer=tmp_path / "m.txt")
    with pytest.raises(TypeError, match=r"add_scalar.*or None \(write nothing\), got object"):
        Monitor(vit(), writer=object())
    assert not (tmp_path / "m.txt").exists()


def test_import_speccond_loads_neither_transformers_nor_lightning_nor_tensorboard():
    code = "import sys, speccond, speccond.monitor; print([m for m in ('transformers', 'lightning', 'tensorboard') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# -- front ends: transformers.Trainer -------------------------------------------------------------------------------
@pytest.mark.parametrize("place", ["after", "before"], ids=["callbacks-arg-after-tensorboard", "inserted-first"])
def test_trainer_callback_reaches_tensorboard_whatever_the_order(tmp_path, place):
    """Logged at the global step of the forward measured (0, 2: the plain loop's steps, not the Trainer's count
    after the update, 1, 3), without changing when the Trainer logs its loss (every logging_steps=3: at 3, the
    end of the forward measured at 2, as well; not forced at 1)."""
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
        per_device_train_batch_size=2, learning_rate=1e-3, disable_tqdm=True, logging_steps=3,
    )
    callback = SpecCondCallback(every=2)
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=data, callbacks=[callback] if place == "after" else None
    )
    if place == "before":
        trainer.callback_handler.callbacks.insert(0, callback)
    trainer.train()
    assert len(calls) == 4  # one forward per step: the monitor adds none
    scalars = {tag.removeprefix("train/"): v for tag, v in event_scalars(tmp_path).items()}  # the Trainer's prefix
    assert {tag for tag in scalars if tag.startswith("speccond/")} == set(callback.last)
    assert [step for step, _ in scalars["speccond/kappa/mean"]] == MEASURED_AT
    assert [step for step, _ in scalars["loss"]] == [3]  # the Trainer's own log, every logging_steps
    history = [row["step"] for row in trainer.state.log_history if "speccond/kappa/mean" in row]
    assert history == MEASURED_AT
    assert math.isclose(scalars["speccond/entropy/layer1/head3"][-1][1], callback.last["speccond/entropy/layer1/head3"], rel_tol=1e-6)


# -- front ends: Lightning ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("accumulate", [1, 2], ids=["each-batch", "accumulating-2"])
def test_lightning_callback_reaches_csv_and_tensorboard_loggers(tmp_path, accumulate):
    """Logged once per due step, at the global step of the forward measured (0, 2: the plain loop's steps, not
    trainer.global_step after the update, 1, 3); accumulating, at the end of its first micro-batch."""
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
        max_steps=3, accelerator="cpu", callbacks=[callback], enable_checkpointing=False, accumulate_grad_batches=accumulate,
        enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=50,
        logger=[CSVLogger(tmp_path, name="csv"), TensorBoardLogger(tmp_path, name="tb")],
    )
    trainer.fit(Classifier(), torch.utils.data.DataLoader(data, batch_size=2))
    import csv

    with next((tmp_path / "csv").rglob("metrics.csv")).open() as handle:
        rows = list(csv.DictReader(handle))
    logged = {key for row in rows for key, value in row.items() if key.startswith("speccond/") and value}
    assert logged == set(callback.last)
    assert [int(r["step"]) for r in rows if r["speccond/kappa/mean"]] == MEASURED_AT
    scalars = event_scalars(tmp_path / "tb")
    assert {tag for tag in scalars if tag.startswith("speccond/")} == set(callback.last)
    assert [step for step, _ in scalars["speccond/entropy/mean"]] == MEASURED_AT


# -- a model the schedule cannot measure in full is refused before the first measurement -----------------------
class _NamedAttention(torch.nn.Module):
    """Attention with query/key/value projections that no named adapter claims: with the inferred adapter off
    (its layout is otherwise probed), attention no adapter recognises."""

    def __init__(self, dim: int = 32, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value, self.out = (torch.nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x):  # x (B, N, D)
        batch, tokens, dim = x.shape
        q, k, v = (p(x).reshape(batch, tokens, self.heads, -1).transpose(1, 2) for p in (self.query, self.key, self.value))
        weights = (q @ k.transpose(-1, -2) / math.sqrt(dim // self.heads)).softmax(-1)  # (B, H, N, N)
        return self.out((weights @ v).transpose(1, 2).reshape(batch, tokens, dim))


@pytest.mark.parametrize("model", [
    pytest.param(lambda: timm.create_model("resnet18", pretrained=False, num_classes=3), id="no-attention"),
    pytest.param(lambda: SdpaMixer(), id="attention-nothing-finds"),
])
def test_a_model_with_no_attention_layer_found_is_refused_before_the_writer(tmp_path, model):
    with pytest.raises(ValueError, match=r"^speccond.monitor: found no attention layer in \w+ .*what it reports would be empty"):
        Monitor(model(), writer=tmp_path / "m.csv")
    assert not (tmp_path / "m.csv").exists()


def test_a_spectra_only_monitor_refuses_attention_no_adapter_recognises(tmp_path, monkeypatch):
    from speccond.adapters.inferred import InferredAttentionAdapter

    monkeypatch.setattr(InferredAttentionAdapter, "matches", lambda self, module: False)
    model = torch.nn.Sequential(_NamedAttention(), _NamedAttention())
    with pytest.raises(ValueError, match="recognised by no speccond adapter.*0 \\(_NamedAttention\\), 1 \\(_NamedAttention\\)"):
        Monitor(model, writer=tmp_path / "m.csv", entropy=False)  # before: an empty set of metrics every step


@pytest.mark.parametrize("sample, message", [
    ({"layers": [2]}, r"layers=\(2,\) names layer 2, but the model has 2 attention layers \(0 to 1\)"),
    ({"layers": [0, 5, 7]}, r"names layer 5, 7, but the model has 2"),
    ({"heads": [1, 3]}, r"heads=\(1, 3\) names head 3, but the measured layers have at most 3 heads \(0 to 2\)"),
])
def test_layers_or_heads_the_model_lacks_are_refused(tmp_path, sample, message):
    with pytest.raises(ValueError, match=message):  # before: nothing logged for them, with no word
        Monitor(vit(), writer=tmp_path / "m.csv", **sample)
    assert not (tmp_path / "m.csv").exists()


def test_a_head_some_measured_layers_lack_is_measured_where_it_exists():
    # layers of 3 and 6 heads (Swin's stages): head 4 exists in layer 1 only
    assert Schedule(heads=[4]).missing_from([3, 6]) == ""
    assert "at most 3 heads" in Schedule(layers=[0], heads=[4]).missing_from([3, 6])
    assert Schedule(layers=[1], heads=[4]).missing_from([3, 6]) == ""
    assert Schedule().missing_from([3, 6]) == ""


def test_the_trainer_and_lightning_callbacks_refuse_before_the_first_step(tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    pl = pytest.importorskip("lightning.pytorch")
    from speccond.monitor import SpecCondCallback, SpecCondLightningCallback

    config = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64)
    model = transformers.BertForSequenceClassification(config)
    calls = []
    model.register_forward_hook(lambda *_: calls.append(1))
    data = [{"input_ids": torch.randint(3, 64, (12,)), "labels": torch.tensor(i % 2)} for i in range(4)]
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "hf"), max_steps=2, report_to=[], use_cpu=True,
                                          save_strategy="no", per_device_train_batch_size=2, disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[SpecCondCallback(layers=[4])])
    with pytest.raises(ValueError, match="names layer 4, but the model has 2 attention layers"):
        trainer.train()
    assert calls == [] and trainer.state.global_step == 0

    class Classifier(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = vit()

        def training_step(self, batch, _index):
            calls.append(1)
            return F.cross_entropy(self.net(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-3)

    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(images(4), torch.arange(4) % 3), batch_size=2)
    trainer = pl.Trainer(max_steps=2, accelerator="cpu", callbacks=[SpecCondLightningCallback(heads=[5])],
                         logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    with pytest.raises(ValueError, match="names head 5, but the measured layers have at most 3 heads"):
        trainer.fit(Classifier(), loader)
    assert calls == [] and trainer.global_step == 0


# -- the first measured step is watched for attention that runs outside every found layer (diagnostics/census.py) --
def _regress(model, monitor, steps: int) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    for step in range(steps):
        with monitor.step(step):
            F.mse_loss(model(images()), torch.zeros(4, 192)).backward()
            optimizer.step()
            optimizer.zero_grad()


def test_attention_outside_every_found_layer_is_refused_at_the_first_measured_step(tmp_path):
    model = Pooled(vit(), SdpaMixer(192, 3))
    monitor = Monitor(model, writer=tmp_path / "m.csv", every=1)  # structure finds the ViT's layers only
    with pytest.raises(ValueError, match=r"attention ran in pool \(SdpaMixer, 1 call\) of Pooled, outside every"):
        _regress(model, monitor, 2)  # before: the ViT's metrics alone, the pool's attention left out
    assert not (tmp_path / "m.csv").exists() or not read_csv_metrics(tmp_path / "m.csv")
    assert not torch.nn.modules.module._global_forward_pre_hooks and not torch.nn.modules.module._global_forward_hooks


def test_a_router_softmax_is_not_attention_and_only_the_first_measured_step_is_watched(tmp_path, monkeypatch):
    from speccond.monitor import measurement

    model = Pooled(vit(), Router())
    monitor = Monitor(model, writer=tmp_path / "m.csv", every=1)
    watches = []
    real = measurement.watched

    def counting(*args):
        watches.append(1)
        return real(*args)

    monkeypatch.setattr(measurement, "watched", counting)
    _regress(model, monitor, 3)
    assert len(watches) == 1  # steps 0, 1 and 2 measured; step 0 alone watched
    assert {name.split("/")[2] for name in monitor.last if "/entropy/layer" in name} == {"layer0", "layer1"}


def test_a_compiled_model_is_watched_eagerly_and_measured(tmp_path):
    eager = Monitor(vit(), writer=tmp_path / "eager.csv", every=1)
    train_steps(eager.model, eager, 1, images())
    compiled = torch.compile(vit())
    monitor = Monitor(compiled, writer=tmp_path / "m.csv", every=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the watch's global hooks beside an OptimizedModule warn nothing
        train_steps(compiled, monitor, 1, images())  # dynamo cannot trace the watch: that step runs eagerly
    assert monitor.last.keys() == eager.last.keys()
    assert all(close(monitor.last[name], eager.last[name]) for name in eager.last)


def _nothing_of_the_watch_left() -> bool:
    from torch.nn.modules import module

    return not module._global_forward_pre_hooks and not module._global_forward_hooks and torch._C._len_torch_function_stack() == 0


def test_attention_outside_every_found_layer_is_refused_under_the_trainer(tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from speccond.monitor import SpecCondCallback

    config = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, num_labels=2)
    bert = transformers.BertForSequenceClassification(config)

    class Pooled(torch.nn.Module):  # BERT's layers are found; the mixer's attention is not
        def __init__(self):
            super().__init__()
            self.bert, self.pool = bert.bert, SdpaMixer(32, 4)

        def forward(self, input_ids, labels):
            tokens = self.pool(self.bert(input_ids=input_ids).last_hidden_state)  # (B, L, D)
            return {"loss": tokens.mean() * 0 + F.cross_entropy(tokens[:, 0, :2], labels)}

    data = [{"input_ids": torch.randint(3, 64, (12,)), "labels": torch.tensor(i % 2)} for i in range(4)]
    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=2, report_to=[], use_cpu=True,
                                          save_strategy="no", per_device_train_batch_size=2, disable_tqdm=True)
    trainer = transformers.Trainer(model=Pooled(), args=args, train_dataset=data, callbacks=[SpecCondCallback(every=1)])
    with pytest.raises(ValueError, match=r"attention ran in pool \(SdpaMixer, 1 call\) of Pooled"):
        trainer.train()
    assert _nothing_of_the_watch_left()


@pytest.mark.parametrize("front_end", ["loop", "trainer", "lightning"])
def test_nothing_of_the_watch_outlives_a_first_step_that_fails(tmp_path, front_end):
    def failing_step(model, batch):
        model(batch).sum()
        raise RuntimeError("boom after the forward")

    if front_end == "loop":
        model = vit()
        monitor = Monitor(model, writer=tmp_path / "m.csv", every=1)
        with pytest.raises(RuntimeError, match="boom"):
            with monitor.step(0):
                failing_step(model, images())
    elif front_end == "trainer":
        transformers = pytest.importorskip("transformers")
        pytest.importorskip("accelerate")
        from speccond.monitor import SpecCondCallback

        class Failing(transformers.Trainer):
            def compute_loss(self, model, inputs, *args, **kwargs):
                failing_step(model, inputs["x"])

        data = [{"x": images(1)[0]} for _ in range(4)]
        args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=2, report_to=[], use_cpu=True,
                                              save_strategy="no", per_device_train_batch_size=2, disable_tqdm=True,
                                              remove_unused_columns=False)
        trainer = Failing(model=vit(), args=args, train_dataset=data, callbacks=[SpecCondCallback(every=1)])
        with pytest.raises(RuntimeError, match="boom"):
            trainer.train()
    else:
        pl = pytest.importorskip("lightning.pytorch")
        from speccond.monitor import SpecCondLightningCallback

        class Failing(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.net = vit()

            def training_step(self, batch, _index):
                failing_step(self.net, batch[0])

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=1e-3)

        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(images(4)), batch_size=2)
        trainer = pl.Trainer(max_steps=2, accelerator="cpu", callbacks=[SpecCondLightningCallback(every=1)],
                             logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False)
        with pytest.raises(RuntimeError, match="boom"):
            trainer.fit(Failing(), loader)
    assert _nothing_of_the_watch_left()

"""Any transformers encoder on the language tasks (``--model hf:<model_type>``, harness/models/hf_text.py):
built from its config with the task's vocabulary, classes and positions, conditioned by the run's method,
trained for classification and masked-LM pre-training, resumed to the same bytes; unknown types and
misplaced settings are refused before anything is written."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import speccond
from speccond.harness.cli import main
from speccond.harness.config.train_config import TrainConfig
from speccond.harness.models.run_model import model_for
from speccond.harness.training import checkpoint
from speccond.harness.training.train import train
from tests.test_language import language_home, prepared, sources, tiny_arrays  # noqa: F401 (fixtures)

ROBERTA = "hidden_size=32,num_hidden_layers=1,num_attention_heads=2,intermediate_size=64"
DISTILBERT = "dim=32,n_layers=1,n_heads=2,hidden_dim=64"
SMALL = dict(train_size=32, test_size=16, batch_size=16, epochs=1, warmup_steps=1)


@pytest.mark.parametrize("model, arguments, head", [
    ("hf:roberta", ROBERTA, "RobertaForSequenceClassification"),
    ("hf:distilbert", DISTILBERT, "DistilBertForSequenceClassification"),
])
def test_an_hf_model_type_is_built_from_config_for_the_task_and_conditioned(prepared, model, arguments, head):
    config = TrainConfig(task="glue-sentiment", model=model, model_args=arguments, method="spectral-svd", **SMALL)
    built = model_for(config)
    assert type(built.model).__name__ == head and speccond.is_conditioned(built)
    assert built.model.config.vocab_size == 8192 and built.model.config.num_labels == 4
    tokens = torch.randint(5, 100, (2, 20))
    assert built(tokens).shape == (2, 4)


def test_masked_lm_pretraining_of_an_hf_model_resumes_to_the_same_weights(prepared, tmp_path):
    config = TrainConfig(task="mlm", model="hf:roberta", model_args=ROBERTA, method="spectral-svd",
                         **{**SMALL, "train_size": 64, "epochs": 2, "checkpoint_every": 3})
    straight = train(config, tmp_path / "straight", progress=False)
    assert straight["kind"] == "eval" and 0 <= straight["accuracy"] <= 1
    assert train(config, tmp_path / "cut", stop_after=5, progress=False) == {}
    assert train(config, tmp_path / "cut", progress=False) == straight
    a, b = (checkpoint.latest(tmp_path / run) / "model.safetensors" for run in ("straight", "cut"))
    assert a.read_bytes() == b.read_bytes()


def test_compare_fine_tunes_an_hf_model_and_names_it_in_the_report(prepared, tmp_path):
    out = tmp_path / "cmp"
    assert main(["compare", "--task", "glue-sentiment", "--model", "hf:distilbert", "--methods", "baseline,spectral",
                 "--seeds", "1", "--set", f"model_args={DISTILBERT}", "--set", "train_size=32", "--set", "test_size=16",
                 "--set", "batch_size=16", "--set", "epochs=1", "--out", str(out)]) == 0
    assert (out / "results.md").read_text().startswith(f"# speccond report: glue-sentiment, hf:distilbert ({DISTILBERT})")


@pytest.mark.parametrize("arguments, message", [
    (["--model", "hf:robbertta"], "unknown transformers model type 'robbertta'; nearest: roberta"),
    (["--model", "hf:roberta", "--set", "init_from=runs/mlm"], "an hf:<type> model is trained from its config"),
])
def test_a_wrong_hf_model_is_refused_in_one_line_and_nothing_is_written(prepared, tmp_path, capsys, arguments, message):
    out = tmp_path / "cmp"
    assert main(["compare", "--task", "glue-sentiment", "--methods", "baseline", "--seeds", "1", *arguments,
                 "--set", "train_size=32", "--set", "test_size=16", "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert message in error and len(error.strip().splitlines()) == 1, error
    assert not out.exists()

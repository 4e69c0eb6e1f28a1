"""Any transformers encoder on the language tasks (``--model hf:<model_type>``, harness/models/hf_text.py):
built from its config with the task's vocabulary, classes and positions, conditioned by the run's method,
trained for classification and masked-LM pre-training, resumed to the same bytes; unknown types and
misplaced settings are refused before anything is written."""
from __future__ import annotations


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
    config = TrainConfig().replaced(task="glue-sst2", model=model, model_args=arguments, method="spectral-svd", **SMALL)
    built = model_for(config)
    assert type(built.model).__name__ == head and speccond.is_conditioned(built)
    assert built.model.config.vocab_size == 8192 and built.model.config.num_labels == 2
    tokens = torch.randint(5, 100, (2, 20))
    assert built(tokens).shape == (2, 2)


def test_masked_lm_pretraining_of_an_hf_model_resumes_to_the_same_weights(prepared, tmp_path):
    config = TrainConfig().replaced(task="mlm", model="hf:roberta", model_args=ROBERTA, method="spectral-svd",
                         **{**SMALL, "train_size": 64, "test_size": 8, "epochs": 2, "checkpoint_every": 3})
    straight = train(config, tmp_path / "straight", progress=False)
    assert straight["kind"] == "eval" and 0 <= straight["accuracy"] <= 1
    assert train(config, tmp_path / "cut", stop_after=5, progress=False) == {}
    assert train(config, tmp_path / "cut", progress=False) == straight
    a, b = (checkpoint.latest(tmp_path / run) / "model.safetensors" for run in ("straight", "cut"))
    assert a.read_bytes() == b.read_bytes()


def test_compare_fine_tunes_an_hf_model_and_names_it_in_the_report(prepared, tmp_path):
    out = tmp_path / "cmp"
    assert main(["compare", "--task", "glue-sst2", "--model", "hf:distilbert", "--methods", "baseline,spectral",
                 "--seeds", "1", "--set", f"model_args={DISTILBERT}", "--set", "train_size=32", "--set", "test_size=16",
                 "--set", "batch_size=16", "--set", "epochs=1", "--out", str(out)]) == 0
    assert (out / "results.md").read_text().startswith(f"# speccond report: glue-sst2, hf:distilbert ({DISTILBERT})")


@pytest.mark.parametrize("arguments, message", [
    (["--model", "hf:robbertta"], "unknown transformers model type 'robbertta'; nearest: roberta"),
    (["--model", "hf:roberta", "--set", "init_from=runs/mlm"], "an hf:<type> model is trained from its config"),
])
def test_a_wrong_hf_model_is_refused_in_one_line_and_nothing_is_written(prepared, tmp_path, capsys, arguments, message):
    out = tmp_path / "cmp"
    assert main(["compare", "--task", "glue-sst2", "--methods", "baseline", "--seeds", "1", *arguments,
                 "--set", "train_size=32", "--set", "test_size=16", "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert message in error and len(error.strip().splitlines()) == 1, error
    assert not out.exists()


def _saved_bert(folder, head: str, **sizes):
    """A tiny BERT with ``head`` (a transformers class name) on the project's WordPiece ids, save_pretrained into
    ``folder``; returns its state dict."""
    import transformers

    config = transformers.BertConfig(vocab_size=8192, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=64, **sizes)
    torch.manual_seed(7)
    model = getattr(transformers, head)(config)
    model.save_pretrained(folder)
    return {key: value.clone() for key, value in model.state_dict().items()}


@pytest.mark.parametrize("task, head", [
    ("glue-sst2", "BertForSequenceClassification"),
    ("mlm", "BertForMaskedLM"),
])
def test_a_run_on_hf_folder_loads_the_checkpoint_saved_there(tmp_path, task, head):
    """--model hf:<folder> builds the run's model from the folder's config and loads its weights, bit for bit,
    from the folder alone (the task's data is not needed to build it: the glue-* data may be absent offline)."""
    saved = _saved_bert(tmp_path / "mine", head, num_labels=2)
    built = model_for(TrainConfig().replaced(task=task, model=f"hf:{tmp_path / 'mine'}", method="baseline"))
    assert type(built.model).__name__ == head
    loaded = built.model.state_dict()
    assert loaded.keys() == saved.keys() and all(torch.equal(loaded[key], saved[key]) for key in saved)
    assert built.model.config.hidden_dropout_prob == 0.0  # as for hf:<type>: resumed runs match unbroken ones


def test_a_classifier_over_a_masked_lm_checkpoint_keeps_its_encoder_and_names_the_fresh_head(tmp_path, caplog):
    saved = _saved_bert(tmp_path / "mlm", "BertForMaskedLM")
    with caplog.at_level("WARNING"):
        built = model_for(TrainConfig().replaced(task="glue-sst2", model=f"hf:{tmp_path / 'mlm'}", method="spectral-svd"))
    assert speccond.is_conditioned(built)
    encoder = {key: value for key, value in saved.items() if key.startswith("bert.encoder.") and "attention.self" not in key}
    loaded = built.model.state_dict()
    assert encoder and all(torch.equal(loaded[key], value) for key, value in encoder.items())
    assert "start random: " in caplog.text and "classifier.weight" in caplog.text
    assert built(torch.randint(5, 100, (2, 20))).shape == (2, 2)


def test_an_hf_folder_that_is_no_checkpoint_for_the_task_is_one_line_and_nothing_is_written(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    _saved_bert(tmp_path / "other-vocab", "BertForMaskedLM")
    text = (tmp_path / "other-vocab" / "config.json").read_text().replace('"vocab_size": 8192', '"vocab_size": 30522')
    (tmp_path / "other-vocab" / "config.json").write_text(text)
    capsys.readouterr()  # save_pretrained's progress bar
    for folder, message in (("empty", "holds no config.json, so it is not a transformers checkpoint folder"),
                            ("other-vocab", "has vocab_size=30522, but the task's token ids come from the project's")):
        out = tmp_path / "cmp"
        for argv in (["compare", "--task", "glue-sst2", "--model", f"hf:{tmp_path / folder}", "--out", str(out)],
                     ["train", "--set", "task=mlm", "--set", f"model=hf:{tmp_path / folder}", "--out", str(out)]):
            assert main(argv) == 2  # before the task's data is read: it need not be prepared
            error = capsys.readouterr().err
            assert message in error and len(error.strip().splitlines()) == 1, error
            assert not out.exists()

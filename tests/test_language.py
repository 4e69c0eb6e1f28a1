"""The language experiment: WordPiece learnt deterministically, the language dataset, MLM masking, BERT
pre-training that resumes bit for bit, fine-tuning from a pre-trained encoder, every method on BERT.

The data tests read the real sources, the GLUE files of the shared data folder and the King James Bible of
Debian's bible-kjv, and build the dataset from a prefix of each (``TINY``: 30 chapters, 30 SST-2 sentences,
600 examples per split, 1,000 tokens), through the same code that builds the full dataset.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from speccond.data import glue, language, wordpiece
from speccond.data.shared import shared_data_dir
from speccond.data.store import prepare
from speccond.data.wordpiece import CLS, MASK, PAD, SEP, SPECIAL_COUNT
from speccond.harness.config.train_config import TrainConfig
from speccond.harness.methods import METHODS
from speccond.harness.models.bert import ENCODER, POOLER
from speccond.harness.models.run_model import build_model
from speccond.harness.protocol import kept_runs
from speccond.harness.protocol.compare import compare
from speccond.harness.reporting.glue import glue_table
from speccond.harness.reporting.stats import mean_interval, paired_difference
from speccond.harness.tasks import mlm
from speccond.harness.tasks.datasets import load_task, task_shape
from speccond.harness.training import checkpoint
from speccond.harness.training.pretrained import KEPT_ENCODER, load_pretrained
from speccond.harness.training.runs import read_run
from speccond.harness.training.train import train

TINY = language.LanguageConfig(vocab_size=1000, documents=30, examples=600)
BERT = dict(model="bert", embed_dim=32, depth=1, num_heads=2, warmup_steps=1)
PRETRAIN = TrainConfig().replaced(task="mlm", method="spectral", **BERT, train_size=64, test_size=8, batch_size=16, epochs=2, checkpoint_every=3)
FINETUNE = TrainConfig().replaced(task="glue-sst2", method="spectral", **BERT, train_size=32, test_size=16, batch_size=16, epochs=1)


def glue_files(task: glue.GlueTask) -> dict[str, Path]:
    """The task's files in the shared data folder, keyed as glue.read_task reads them; skips without the folder."""
    folder = shared_data_dir()
    if folder is None or not (folder / "text").is_dir():
        pytest.skip("no shared data folder with text/ (put shared/data beside the checkout or set SPECCOND_SHARED_DATA)")
    return {key: folder / "text" / path for key, (path, _) in glue.file_keys(task).items()}


@pytest.fixture(scope="session")
def sources():
    """(the Bible as `bible -f` prints it, each GLUE task's splits as read from the shared folder)."""
    tasks = {name: glue.read_task(subset.task, glue_files(subset.task)) for name, subset in language.SUBSETS.items()}
    try:
        bible = language.bible_text(Path(language.BIBLE_FOLDER))
    except (FileNotFoundError, subprocess.CalledProcessError) as error:
        pytest.skip(f"the Debian package bible-kjv is not installed (apt-get install bible-kjv, as ./run does): {error}")
    return bible, tasks


@pytest.fixture(scope="session")
def tiny_arrays(sources):
    return language.build_arrays(*sources, TINY)


@pytest.fixture(scope="session")
def language_home(tiny_arrays, tmp_path_factory):
    """A data dir whose prepared ``language`` dataset is the TINY build (stored as ``prepare`` stores it)."""
    home = tmp_path_factory.mktemp("language") / "data"
    spec = dataclasses.replace(language.SPEC, files={}, parse=lambda files: tiny_arrays, generated_sha256=None)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECCOND_DATA", str(home))
        prepare(spec)
    return home


@pytest.fixture
def prepared(language_home, monkeypatch):
    monkeypatch.setenv("SPECCOND_DATA", str(language_home))


@pytest.fixture(scope="module")
def pretrained(language_home, tmp_path_factory):
    """Finished tiny pre-training runs, baseline and spectral (lam 10), in <root>/<method>/seed-0."""
    root = tmp_path_factory.mktemp("mlm")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECCOND_DATA", str(language_home))
        for method in ("baseline", "spectral"):
            train(PRETRAIN.replaced(method=method), root / method / "seed-0", progress=False)
    return root


# --- WordPiece ---------------------------------------------------------------------------------------------


def test_wordpiece_merges_the_most_frequent_pair_and_breaks_ties_by_the_pieces():
    words = {"low": 5, "lower": 2, "newest": 6, "widest": 3}  # Sennrich et al.'s example
    alphabet = sorted({"l", "n", "w", "##o", "##w", "##e", "##r", "##s", "##t", "##i", "##d"})
    vocabulary = wordpiece.learn_vocabulary(words, len(wordpiece.SPECIALS) + len(alphabet) + 4)
    assert vocabulary[: SPECIAL_COUNT] == list(wordpiece.SPECIALS) and vocabulary[SPECIAL_COUNT:-4] == alphabet
    # (##e, ##s) and (##s, ##t) both occur 9 times: ##e sorts first; then ##es ##t (9); (##o, ##w) before (l, ##o) (7)
    assert vocabulary[-4:] == ["##es", "##est", "##ow", "low"]


def test_the_tokenizer_is_the_same_in_any_process_and_encodes_as_bert_does(sources):
    texts, _ = language.documents(sources[0], sources[1]["sst2"]["train"].first, TINY)
    script = ("import importlib.util, json, sys; spec = importlib.util.spec_from_file_location('w', sys.argv[1]); "
              "w = importlib.util.module_from_spec(spec); spec.loader.exec_module(w); "  # tokenizers only: no torch
              "print(w.train_tokenizer(json.load(sys.stdin), 600).to_str())")
    made = [subprocess.run([sys.executable, "-c", script, wordpiece.__file__], input=json.dumps(texts[:20]),
                           capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": seed}).stdout
            for seed in ("1", "2")]
    tokenizer = wordpiece.train_tokenizer(texts[:20], 600)
    assert made[0] == made[1] == tokenizer.to_str() + "\n"
    assert [tokenizer.token_to_id(t) for t in wordpiece.SPECIALS] == list(range(SPECIAL_COUNT))
    tokens, lengths, cut = wordpiece.encode(tokenizer, ["Do you like SPORTS?"], ["I do."], 24)
    encoding = tokenizer.encode("do you like sports?", "i do.")
    assert tokens[0, : lengths[0]].tolist() == encoding.ids and cut == 0 and (tokens[0, lengths[0] :] == PAD).all()
    assert encoding.ids[0] == CLS and encoding.ids.count(SEP) == 2 and encoding.type_ids[-1] == 1
    tokens, lengths, cut = wordpiece.encode(tokenizer, ["a b"], ["c d e f g h i j k l"], 8)  # evidence cut first
    assert cut == 1 and lengths.tolist() == [8] and wordpiece.decode(tokenizer, tokens[0]) == "a b c d e"
    assert wordpiece.from_bytes(wordpiece.to_bytes(tokenizer)).to_str() == tokenizer.to_str()


# --- the dataset -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(language.SUBSETS))
def test_each_task_is_its_glue_splits_encoded_in_order_dev_scored_as_test(sources, tiny_arrays, name):
    subset = language.SUBSETS[name]
    tokenizer = wordpiece.from_bytes(tiny_arrays["tokenizer"])
    splits = sources[1][name]
    assert set(splits) == set(subset.task.files)  # train, dev and, for SST-2 and MRPC, the labelled test
    for split, examples in splits.items():
        stored = f"{name}_{language.STORED_SPLITS[split]}"
        second = examples.second[:600] if examples.second is not None else None
        expected, lengths, _ = wordpiece.encode(tokenizer, examples.first[:600], second, subset.width)
        tokens = tiny_arrays[f"{stored}_tokens"]
        assert tokens.dtype == torch.int16 and tokens.shape == (min(600, subset.task.rows[split]), subset.width)
        assert torch.equal(tokens, expected) and torch.equal(tiny_arrays[f"{stored}_lengths"], lengths)
        assert tiny_arrays[f"{stored}_labels"].tolist() == examples.labels[:600]
        assert (tokens[:, 0] == CLS).all() and ((tokens == SEP).sum(1) == (2 if subset.pairs else 1)).all()
    assert "test" in language.STORED_SPLITS.values() and f"{name}_test_labels" in tiny_arrays  # dev, scored once
    if name == "rte":  # premise, hypothesis, "not_entailment" as class 1
        assert splits["train"].second[0] == "Weapons of Mass Destruction Found in Iraq." and splits["train"].labels[0] == 1


def test_the_mlm_blocks_are_the_held_out_split_of_whole_documents(sources, tiny_arrays):
    texts, source = language.documents(sources[0], sources[1]["sst2"]["train"].first, TINY)
    assert len(texts) == 60 and source.tolist() == [0] * 30 + [1] * 30
    assert texts[0].startswith("In the beginning God created the heaven and the earth.\nAnd the earth was")
    assert texts[30] == "hide new secretions from the parental units"  # SST-2's first training sentence, no label
    assert len(language.chapters(sources[0])) == 1189
    train_blocks, test_blocks = tiny_arrays["mlm_train_tokens"], tiny_arrays["mlm_test_tokens"]
    assert train_blocks.shape[1] == test_blocks.shape[1] == language.BLOCK and test_blocks.shape[0] >= 1
    assert (train_blocks[:, 0] == CLS).all() and not (train_blocks == PAD).any()
    tokenizer = wordpiece.from_bytes(tiny_arrays["tokenizer"])
    test_docs = language.stratified_split(source, language.MLM_TEST_FRACTION, "language:mlm:0")[1].tolist()
    assert torch.equal(test_blocks, wordpiece.pack_blocks(tokenizer, [texts[i] for i in test_docs], language.BLOCK))
    assert len(test_docs) == 4  # 5 % of the 30 documents of each source, rounded


# --- masking -----------------------------------------------------------------------------------------------


def test_masking_selects_exactly_15_percent_and_replaces_80_10_10():
    tokens = torch.randint(SPECIAL_COUNT, 8192, (64, 128))
    tokens[:, 0], tokens[:, 100:] = CLS, PAD  # 99 eligible tokens a row (CLS and PAD are not)
    tokens[::2, 50] = SEP
    inputs, labels = mlm.mask_tokens(tokens, torch.Generator().manual_seed(3), 8192)
    ids, flags = inputs[:, 0], inputs[:, 1].bool()
    selected = labels != mlm.IGNORE
    assert torch.equal(flags, selected) and torch.equal(labels[selected], tokens[selected])
    eligible = (tokens >= SPECIAL_COUNT).sum(1)  # 99 or 98
    k, masked, randomised = mlm.selected_counts(eligible)
    assert (k == 15).all() and (masked == 12).all() and (randomised == 2).all()  # 15 % of 98 or 99; 80 %, 10 % of 15
    assert torch.equal(selected.sum(1), k) and not selected[tokens < SPECIAL_COUNT].any()
    assert torch.equal((ids == MASK).sum(1), masked)
    changed = selected & (ids != MASK) & (ids != tokens)  # the random replacements (none drew its original here)
    assert torch.equal(changed.sum(1), randomised) and (ids[changed] >= SPECIAL_COUNT).all()
    assert torch.equal(ids[~selected], tokens[~selected])
    again, _ = mlm.mask_tokens(tokens, torch.Generator().manual_seed(3), 8192)
    other, _ = mlm.mask_tokens(tokens, torch.Generator().manual_seed(4), 8192)
    assert torch.equal(again, inputs) and not torch.equal(other, inputs)
    assert mlm.selected_counts(torch.tensor([0, 1, 3, 4, 10, 127])) [0].tolist() == [0, 0, 0, 1, 2, 19]  # half up
    assert torch.equal(mlm.targets(labels), tokens[selected]) and torch.equal(mlm.targets(k), k)


# --- training ----------------------------------------------------------------------------------------------


def test_mlm_pretraining_resumes_to_the_same_weights(prepared, tmp_path):
    config = PRETRAIN.replaced(method="spectral")
    task = load_task(config)
    assert task["test_x"].shape == (8, 2, 128) and task["test_y"].shape == (8, 128)
    assert task_shape("mlm").mlm and task_shape("mlm").classes == language.VOCAB_SIZE
    straight = train(config, tmp_path / "straight", progress=False)  # 8 steps, checkpoints at 3, 4, 6, 8
    assert straight["kind"] == "eval" and straight["step"] == 8 and 0 <= straight["accuracy"] <= 1
    assert train(config, tmp_path / "killed", stop_after=5, progress=False) == {}
    assert train(config, tmp_path / "killed", progress=False) == straight  # resumed from step 4
    a, b = (checkpoint.latest(tmp_path / run) / "model.safetensors" for run in ("straight", "killed"))
    assert a.read_bytes() == b.read_bytes()


def test_tracked_language_runs_record_attention_entropy_and_lam_ten_collapses_it(prepared, tmp_path):
    """The harness tracks BERT's attention entropy (not qk-norm's: its q, k LayerNorms are hooks the head
    diagnostics would miss); at lam = 10 it starts near 0, the baseline's near uniform over 128 tokens."""
    from speccond.diagnostics import attention_entropy, read_metrics

    step0 = {}
    for method in ("baseline", "spectral", "qk-norm"):
        config = PRETRAIN.replaced(method=method, epochs=1, track_every=2)  # 4 steps: rows at 0, 2, 4
        train(config, tmp_path / method, progress=False)
        rows = read_metrics(tmp_path / method / "metrics.jsonl", kind="entropy")
        assert {r["step"] for r in rows} == (set() if method == "qk-norm" else {0, 2, 4})
        step0[method] = [r for r in rows if r["step"] == 0]
    assert len(step0["baseline"]) == 2 and step0["baseline"][0]["log_n"] == pytest.approx(math.log(128))
    assert all(r["entropy"] > 0.9 * r["log_n"] for r in step0["baseline"])
    assert all(r["entropy"] < 0.5 for r in step0["spectral"])
    config = PRETRAIN.replaced(method="spectral")  # the rows are the diagnostic of the model at step 0
    probe = load_task(config)["test_x"][:8]  # (8, 2, 128)
    expected = attention_entropy(build_model(config, task_shape("mlm")), (probe,))
    assert [r["entropy"] for r in step0["spectral"]] == pytest.approx([r["entropy"] for r in expected], rel=1e-6)


def test_bert_attention_script_reads_each_pretrained_encoder(prepared, pretrained, tmp_path):
    """scripts/bert_attention.py: lam = 10's encoder, pre-trained, still attends nearly one-hot; unfinished
    runs are skipped, not read."""
    from tests.scripts import load_script

    script = load_script("bert_attention")
    probe = load_task(PRETRAIN)["test_x"][:8]  # (8, 2, 128)
    baseline, spectral = (script.pretrained_model(pretrained / m / "seed-0") for m in ("baseline", "spectral"))
    source = build_model(PRETRAIN.replaced(method="spectral"), task_shape("mlm"))
    checkpoint.load(checkpoint.latest(pretrained / "spectral" / "seed-0"), source)
    assert all(torch.equal(a, b) for a, b in zip(spectral.state_dict().values(), source.state_dict().values()))
    assert script.mean_entropy(baseline, probe)[0] > 0.8 * math.log(128)
    assert script.mean_entropy(spectral, probe)[1] < 0.5
    train(PRETRAIN, tmp_path / "unfinished", stop_after=3, progress=False)
    assert script.pretrained_model(tmp_path / "unfinished") is None


def test_finetuning_starts_from_the_pretrained_encoder(prepared, pretrained, tmp_path):
    config = FINETUNE.replaced(method="spectral", init_from=str(pretrained / "{method}" / "seed-{seed}"))
    model = build_model(config, task_shape(config.data.task))
    fresh = {k: v.clone() for k, v in model.state_dict().items()}
    load_pretrained(model, config)
    source = build_model(PRETRAIN.replaced(method="spectral"), task_shape("mlm"))
    checkpoint.load(checkpoint.latest(pretrained / "spectral" / "seed-0"), source)
    weights, theirs = model.state_dict(), source.state_dict()
    encoder = [k for k in weights if k.startswith(ENCODER) and not k.startswith(POOLER)]
    assert len(encoder) > 10 and all(torch.equal(weights[k], theirs[k]) for k in encoder)
    assert any(not torch.equal(fresh[k], weights[k]) for k in encoder)
    assert all(torch.equal(fresh[k], weights[k]) for k in weights if k not in encoder)  # pooler and classifier
    result = train(config, tmp_path / "finetuned", progress=False)
    assert result["kind"] == "eval" and result["step"] == 2


@pytest.mark.parametrize("change, message", [
    ({"method": "baseline"}, r'pre-trained with method="spectral", lam=10.0.*but this run has method="baseline"'),
    ({"lam": 3.0}, r"lam=10.0.*but this run has .*lam=3.0.*conditioning it was pre-trained with"),
    ({"embed_dim": 64}, r"embed_dim=32.*but this run has.*embed_dim=64.*architecture"),
])
def test_finetuning_refuses_a_pretrained_model_of_another_method_or_size(prepared, pretrained, change, message):
    init = str(pretrained / "spectral" / "seed-0")
    config = FINETUNE.replaced(**{"method": "spectral", "init_from": init, **change})
    with pytest.raises(ValueError, match=message):
        load_pretrained(build_model(config, task_shape(config.data.task)), config)


def test_finetuning_refuses_an_unfinished_run_a_classifier_and_a_bad_placeholder(prepared, pretrained, tmp_path):
    train(PRETRAIN, tmp_path / "unfinished", stop_after=3, progress=False)
    config = FINETUNE.replaced(init_from=str(tmp_path / "unfinished"))
    with pytest.raises(ValueError, match=r"is unfinished \(step 3 of 8\).*speccond train --resume"):
        train(config, tmp_path / "ft", progress=False)
    train(FINETUNE, tmp_path / "classifier", progress=False)
    config = FINETUNE.replaced(init_from=str(tmp_path / "classifier"))
    with pytest.raises(ValueError, match="trained task 'glue-sst2'.*mlm task"):
        load_pretrained(build_model(config, task_shape(config.data.task)), config)
    with pytest.raises(ValueError, match="holds no run"):
        load_pretrained(build_model(FINETUNE, task_shape(FINETUNE.data.task)), FINETUNE.replaced(init_from="nowhere"))
    with pytest.raises(ValueError, match="init_from may name TrainConfig keys"):
        TrainConfig().replaced(init_from="runs/{variant}")
    swept = TrainConfig().replaced(method="spectral", lam=2, init_from="r/{method}-lam={lam:g}/seed-{seed}")
    assert swept.init_path() == "r/spectral-lam=2/seed-0"


def test_a_pretraining_run_kept_without_checkpoints_fine_tunes_to_the_same_weights_and_is_not_trained_again(
        prepared, pretrained, tmp_path):
    kept, restored = tmp_path / "kept", tmp_path / "restored"
    assert [p.relative_to(pretrained) for p in kept_runs.keep(pretrained, kept, pretraining=True)] == [
        Path("baseline/seed-0"), Path("spectral/seed-0")]
    assert kept_runs.keep(pretrained, kept, pretraining=True) == []  # nothing new to keep
    assert not list(kept.rglob("checkpoints")) and (kept / "spectral/seed-0" / KEPT_ENCODER).is_file()
    assert len(kept_runs.restore(kept, restored, pretraining=True)) == 2
    finals = {}
    for name, root in (("original", pretrained), ("restored", restored)):
        config = FINETUNE.replaced(method="spectral", init_from=str(root / "{method}" / "seed-0"))
        finals[name] = train(config, tmp_path / f"ft-{name}", progress=False)
    assert finals["original"] == finals["restored"]
    weights = [load_file(str(checkpoint.latest(tmp_path / f"ft-{name}") / "model.safetensors")) for name in finals]
    assert weights[0].keys() == weights[1].keys() and all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    # Asked again, a restored pre-training run returns its final row and leaves its records as they were.
    run = restored / "spectral" / "seed-0"
    records = (run / "metrics.jsonl").read_bytes()
    assert train(PRETRAIN.replaced(method="spectral"), run, progress=False) == read_run(pretrained / "spectral/seed-0").last_eval
    assert (run / "metrics.jsonl").read_bytes() == records and checkpoint.latest(run) is None
    config = FINETUNE.replaced(method="spectral", init_from=str(run))
    encoder = bytearray((run / KEPT_ENCODER).read_bytes())
    encoder[-1] ^= 1
    (run / KEPT_ENCODER).write_bytes(bytes(encoder))
    with pytest.raises(ValueError, match="encoder.safetensors: corrupt"):
        load_pretrained(build_model(config, task_shape(config.data.task)), config)
    (run / KEPT_ENCODER).unlink()
    with pytest.raises(ValueError, match="holds neither a checkpoint nor a kept encoder.*kept_runs restore --pretraining"):
        load_pretrained(build_model(config, task_shape(config.data.task)), config)


@pytest.mark.parametrize("method", [*METHODS, "auto"])
def test_every_method_trains_bert_on_mlm_and_classification(method):
    """Each method conditions BERT's q, k, v (or normalises q, k) and a step gives finite gradients everywhere."""
    extra = {"method": "spectral", "lam": "auto"} if method == "auto" else {"method": method}
    for task, shape in (("mlm", task_shape("mlm")), ("glue-mrpc", task_shape("glue-mrpc"))):
        config = PRETRAIN.replaced(task=task, **extra)
        model = build_model(config, shape)
        tokens = torch.randint(SPECIAL_COUNT, 300, (4, 24))
        tokens[:, 0], tokens[:, 10], tokens[:, 20:] = CLS, SEP, PAD
        if shape.mlm:
            inputs, labels = mlm.mask_tokens(tokens, torch.Generator().manual_seed(0), shape.vocab)
        else:
            inputs, labels = tokens, torch.tensor([0, 1, 1, 0])
        torch.nn.functional.cross_entropy(model(inputs), mlm.targets(labels)).backward()
        grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
        assert all(g is not None and torch.isfinite(g).all() for n, g in grads.items() if "pooler" not in n or not shape.mlm)
    layer = model.bert.bert.encoder.layer[0].attention.self
    if method in ("sigma-reparam", "spectral-norm"):
        assert hasattr(layer.query, "parametrizations")
    if method == "qk-norm":
        assert hasattr(layer.query, "q_norm") and hasattr(layer.key, "k_norm") and not hasattr(layer.value, "v_norm")


def test_glue_table_scores_each_task_as_glue_does_fine_tuned_from_its_own_pretraining(prepared, pretrained, tmp_path):
    """SST-2 by accuracy, CoLA by Matthews correlation, MRPC by the mean of accuracy and F1, each from the runs'
    final rows, which hold all three figures of a two-class task (checked against scikit-learn's)."""
    from sklearn.metrics import f1_score, matthews_corrcoef

    from speccond.harness.cli import main

    base = FINETUNE.replaced(init_from=str(pretrained / "{method}" / "seed-0"))
    tasks = ("glue-sst2", "glue-cola", "glue-mrpc")
    for task in tasks:
        compare(base.replaced(task=task), ["baseline", "spectral"], [0, 1], tmp_path / task, progress=False)
    folders = [tmp_path / task for task in tasks]
    table = glue_table([*folders, pretrained], tmp_path / "table")
    assert "on 32 training examples" in (tmp_path / "glue-sst2" / "results.md").read_text()  # not "images"
    assert "as GLUE scores" not in (tmp_path / "glue-sst2" / "results.md").read_text()  # accuracy alone
    runs = {(t, m, s): read_run(tmp_path / t / m / f"seed-{s}") for t in tasks for m in ("baseline", "spectral") for s in (0, 1)}
    final = runs["glue-cola", "spectral", 0]
    model = build_model(final.config, task_shape("glue-cola"))
    checkpoint.load(checkpoint.latest(tmp_path / "glue-cola" / "spectral" / "seed-0"), model)
    scored = load_task(final.config)
    with torch.no_grad():
        predicted = model.eval()(scored["test_x"]).argmax(-1)
    assert final.last_eval["mcc"] == pytest.approx(matthews_corrcoef(scored["test_y"], predicted), abs=1e-9)
    assert final.last_eval["f1"] == pytest.approx(f1_score(scored["test_y"], predicted, zero_division=0), abs=1e-9)
    score = {"glue-sst2": lambda r: r.accuracy, "glue-cola": lambda r: r.last_eval["mcc"],
             "glue-mrpc": lambda r: (r.accuracy + r.last_eval["f1"]) / 2}
    figure = {key: score[key[0]](run) for key, run in runs.items()}
    cola = (tmp_path / "glue-cola" / "results.md").read_text()  # each compare's own report gives MCC too
    mcc = str(mean_interval([100 * runs["glue-cola", "spectral", s].last_eval["mcc"] for s in (0, 1)]))
    assert "| method | seeds | MCC (final test), % |" in cola and f"| spectral lam=10 | 2 | {mcc} |" in cola
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1:] for line in table.splitlines() if line.startswith("| ")}
    cell = lambda values: str(mean_interval([100 * v for v in values]))  # noqa: E731
    assert rows["baseline"][1] == cell([figure["glue-cola", "baseline", s] for s in (0, 1)])
    average = {m: [sum(figure[t, m, s] for t in tasks) / 3 for s in (0, 1)] for m in ("baseline", "spectral")}
    assert rows["spectral lam=10"][4].rstrip(" |") == cell(average["spectral"])  # 3 tasks, mlm, average
    difference = str(paired_difference([100 * v for v in average["spectral"]], [100 * v for v in average["baseline"]]))
    assert rows["spectral lam=10 - baseline (paired)"][4].rstrip(" |").lstrip("+") == difference.lstrip("+")
    assert rows["method"] == ["glue-sst2 (SST-2, accuracy)", "glue-cola (CoLA, MCC)", "glue-mrpc (MRPC, accuracy + F1)",
                              "mlm (masked-token accuracy)", "average (glue-*) |"]
    labels = load_task(runs["glue-sst2", "baseline", 0].config)["test_y"].tolist()  # the class prior of the scored examples
    assert rows["majority class of the test set"][0] == f"{100 * max(Counter(labels).values()) / len(labels):.1f}"
    assert rows["majority class of the test set"][1] == "0.0"  # MCC of one class always
    assert rows["paper: Crammed BERT baseline"][0] == "92.3 (SST-2)" and "78.6 (GLUE average)" in table
    assert main(["report", "--glue", *map(str, [*folders, pretrained]), "--out", str(tmp_path / "cli")]) == 0
    assert (tmp_path / "cli" / "glue.md").read_text() == (tmp_path / "table" / "glue.md").read_text() == table


def test_a_withdrawn_task_name_is_refused_naming_the_glue_tasks():
    from speccond.harness.tasks.registry import task

    with pytest.raises(ValueError, match="'glue-sentiment' was withdrawn.*glue-sst2, glue-cola, glue-mrpc, glue-rte"):
        task("glue-sentiment")


@pytest.mark.parametrize("label, row", [
    ("spectral lam=10 (init_from=runs/mlm/{method}/seed-0)", "spectral lam=10"),
    ("spectral lam=auto(kappa<=2) (init_from=runs/mlm/spectral-target_kappa=2/seed-0)", "spectral lam=auto(kappa<=2)"),
    ("baseline (init_from=runs/a/seed-0, lr=0.001)", "baseline (lr=0.001)"),
    ("baseline (lr=0.001, init_from=runs/a/seed-0)", "baseline (lr=0.001)"),
    ("qk-norm", "qk-norm"),
])
def test_glue_rows_line_up_whatever_pre_training_path_each_method_named(label, row):
    from speccond.harness.reporting.glue import row_label

    assert row_label(label) == row

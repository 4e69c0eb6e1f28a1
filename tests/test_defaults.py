"""The defaults follow the evidence: ``SpectralConfig()`` is the setting the README recommends (SVD per head),
the correction inferred from what is given; the paper's setting is one named call; what was saved under the
old default loads as it was and says so; the command line follows (compare's methods, inspect, demo), and a
collapse warning raised under it names the command's flags, parsed here by the real parser."""
from __future__ import annotations

import json
import re
import shlex
import warnings
from pathlib import Path

import pytest
import torch

import speccond
from speccond.collapse_advice import phrased
from speccond.core.config import OLD_DEFAULT_READ, SpectralConfig
from speccond.harness.cli import build_parser
from speccond.harness.cli_advice import phrasing

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("given, correction, lams", [
    ({}, "svd", (10.0, 10.0, 10.0)),
    ({"granularity": "projection"}, "svd", (10.0, 10.0, 10.0)),
    ({"lam": 10.0}, "identity", (10.0, 10.0, 10.0)),
    ({"lam": "auto"}, "identity", ("auto", "auto", "auto")),
    ({"lam_k": 0.0, "lam_v": 0.0}, "identity", (10.0, 0.0, 0.0)),
    ({"correction": "identity"}, "identity", (10.0, 10.0, 10.0)),
    ({"correction": "svd", "lam_v": 0.0}, "svd", (10.0, 10.0, 0.0)),
])
def test_the_correction_is_inferred_from_whether_a_lam_is_given(given, correction, lams):
    config = SpectralConfig(**given)
    assert config.correction == correction and tuple(config.role_scales().values()) == lams
    assert SpectralConfig.from_dict(config.to_dict()) == config  # the record names what was inferred


def test_the_papers_setting_is_one_named_call():
    assert SpectralConfig.paper() == SpectralConfig(lam=10.0) == SpectralConfig(correction="identity")
    assert SpectralConfig.paper().correction == "identity" and SpectralConfig().correction == "svd"
    with pytest.raises(ValueError, match="lam='auto'.*only with correction='identity'"):
        SpectralConfig(lam="auto", correction="svd")  # an explicit svd with auto is still refused


def test_a_record_that_names_no_correction_is_read_as_the_old_default_and_says_so():
    with pytest.warns(UserWarning, match="names no correction and no lam.*SpectralConfig\\(lam=10.0\\)"):
        old = SpectralConfig.from_dict({"granularity": "head"})
    assert old == SpectralConfig.paper(granularity="head")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a lam given means the identity then and now: nothing to say
        assert SpectralConfig.from_dict({"lam": "auto"}) == SpectralConfig(lam="auto")
        old_default = {**SpectralConfig.paper().to_dict()}  # what save_pretrained wrote under the old default
        assert SpectralConfig.from_dict(old_default).correction == "identity"


def _bert():
    torch.manual_seed(0)
    return transformers.BertForSequenceClassification(transformers.BertConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64))


def _logits(model):
    with torch.no_grad():
        return model.eval()(input_ids=torch.arange(3, 15).reshape(2, 6)).logits


@pytest.mark.parametrize("drop", [(), ("correction", "lam", "lam_q", "lam_k", "lam_v")])
def test_a_checkpoint_saved_under_the_old_default_loads_as_it_was(tmp_path, drop):
    """A model conditioned with the old default (the identity correction, lam = 10) and saved reloads
    conditioned so, bit for bit; a speccond.json whose config names no correction (nor lam) is read as
    that old default, with a warning naming the file."""
    model = _bert()
    speccond.apply(model, SpectralConfig.paper())
    expected = _logits(model)
    speccond.save_pretrained(model, tmp_path)
    record_path = tmp_path / "speccond.json"
    record = json.loads(record_path.read_text())
    record["config"] = {k: v for k, v in record["config"].items() if k not in drop}
    record_path.write_text(json.dumps(record))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reloaded = speccond.from_pretrained(type(model), tmp_path)
    said = [str(w.message) for w in caught if OLD_DEFAULT_READ in str(w.message)]
    assert said == ([f"{record_path}: {OLD_DEFAULT_READ}"] if drop else [])
    assert torch.equal(_logits(reloaded), expected)
    assert {row.correction for row in speccond.describe(reloaded).rows} == {"identity lam=10"}


# -- the command line -------------------------------------------------------------------------------------
def test_compare_runs_the_baseline_the_recommended_the_papers_and_the_best_peer():
    from speccond.harness.cli import _default_methods
    from speccond.harness.config.train_config import TrainConfig

    assert build_parser().parse_args(["compare"]).methods == ["baseline", "spectral-svd", "spectral", "qk-norm"]
    assert _default_methods(TrainConfig()) == ["baseline", "spectral-svd", "spectral", "qk-norm"]
    paper = TrainConfig().replaced(method="spectral")
    assert (paper.method.lam, paper.method.correction, paper.method.corrected) == (10.0, "identity", "qkv")


def test_compare_leaves_the_peer_out_of_its_defaults_where_the_model_refuses_it(capsys):
    from speccond.harness.cli import _default_methods
    from speccond.harness.config.train_config import TrainConfig

    normalised = TrainConfig().with_overrides([  # a ViT that normalises q and k itself: qk-norm refuses it
        "model=timm:vit_tiny_patch16_224", "model_args=img_size=28,in_chans=1,patch_size=7,depth=1,qk_norm=True"])
    assert _default_methods(normalised) == ["baseline", "spectral-svd", "spectral"]
    assert "qk-norm left out of the default methods: blocks.0.attn (timm Attention) already normalises" in (
        capsys.readouterr().err)


def test_train_runs_the_recommended_setting_unless_given_a_method(capsys):
    """A new ``speccond train`` without ``--set method=`` trains SVD per head (TrainConfig's default method), as
    its --help says; the paper's method is named."""
    from speccond.harness.config.train_config import TrainConfig
    from speccond.harness.methods import apply_method

    config = TrainConfig().with_overrides(build_parser().parse_args(["train", "--out", "x"]).set)
    assert config.method.name == "spectral-svd"
    model = _vit_tiny()
    apply_method(model, config.method)
    assert {row.correction for row in speccond.describe(model).rows} == {"svd/head"}
    paper = TrainConfig().with_overrides(["method=spectral"])
    assert (paper.method.name, paper.method.lam, paper.method.correction) == ("spectral", 10.0, "identity")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--help"])
    assert "default spectral-svd" in " ".join(capsys.readouterr().out.split())


def test_a_run_recorded_under_the_old_default_resumes_as_the_papers_setting(tmp_path):
    """tests/data/spectral-default-run/config.json was written by ``speccond train --set task=digits`` while
    the default method was the paper's (commit 0617aa0). config.json records every key, the method at its
    default too, so that run resumes as "spectral", lam = 10, and the new default never fills it in."""
    import shutil

    from speccond.harness.config.train_config import TrainConfig
    from speccond.harness.training.run_dir import check_config, method_label
    from speccond.harness.training.runs import read_config

    old = tmp_path / "run"
    shutil.copytree(Path(__file__).parent / "data" / "spectral-default-run", old)
    recorded = json.loads((old / "config.json").read_text())
    config = read_config(old)
    assert (config.method.name, config.method.lam, config.method.correction) == ("spectral", 10.0, "identity")
    assert method_label(config) == recorded["label"] == "spectral lam=10"
    assert check_config(old, config)  # what ``speccond train --resume`` checks before it trains on
    assert set(TrainConfig().to_dict()) == set(recorded["config"])  # every key recorded, the method included


@pytest.mark.parametrize("arguments, said", [
    ([], "(svd per head: kappa(W + C) <= 2)"),
    (["--lam", "10"], "(identity, lam=10)"),
    (["--correction", "identity"], "(identity, lam=10)"),
])
def test_inspect_conditions_with_the_recommended_setting_unless_given_a_lam(arguments, said, capsys):
    from speccond.harness.cli import main

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["inspect", "timm:vit_tiny_patch16_224", "--set", "img_size=32", "--set", "depth=1",
                     *arguments]) == 0
    assert said in capsys.readouterr().out


def test_demo_conditions_with_the_recommended_setting_unless_given_a_lam(capsys):
    from speccond.harness.cli import main

    assert main(["demo"]) == 0
    assert "svd correction on a timm ViT" in capsys.readouterr().out
    assert main(["demo", "--lam", "3"]) == 0
    assert "identity correction on a timm ViT" in capsys.readouterr().out


@pytest.mark.parametrize("command", [["demo"], ["inspect", "timm:vit_tiny_patch16_224", "--set", "depth=1", "--lam", "auto"]])
def test_a_command_prints_the_whole_report_and_no_python_advice(command, capsys):
    """A report printed by the command line holds every figure, the whole blocks' kappa too: its user cannot
    call report.compute() afterwards, so the text never tells them to."""
    from speccond.harness.cli import main

    assert main(command) == 0
    out = capsys.readouterr().out
    assert "kappa W+C (block)" in out and "kappa W+C per head (max)" in out and "report.compute()" not in out


def _vit_tiny():
    import timm

    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, depth=1, num_classes=10)


def _advice(command: str) -> str:
    with phrased(phrasing(command)), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        speccond.apply(_vit_tiny(), SpectralConfig.paper())
    (message,) = [str(w.message) for w in caught if "nearly one-hot" in str(w.message)]
    return message


RECOMMENDED = re.compile(r"; ([^;]*?) keeps attention spread")


@pytest.mark.parametrize("command, recommended", [
    ("compare", "--methods spectral-svd"), ("train", "--set method=spectral-svd"), ("tune", "--arms spectral-svd"),
    ("inspect", "--correction svd"), ("demo", "--correction svd"),
])
def test_a_collapse_warning_under_a_command_names_its_flags(command, recommended):
    """The advice names each setting as the command takes it, never as Python; every setting it names
    (collapsing or not) parses with the command's real parser."""
    message = _advice(command)
    assert "SpectralConfig(" not in message
    assert RECOMMENDED.search(message).group(1) == recommended
    named = [recommended, *re.findall(r"predicts collapse for (.*?) \(\d", message)]
    fixed = {"compare": [], "train": ["--out", "x"], "tune": ["--out", "x", "--val-size", "10"],
             "inspect": ["timm:vit_tiny_patch16_224"], "demo": []}[command]
    for flags in named:
        parsed = build_parser().parse_args([command, *fixed, *shlex.split(flags)])
        if command in ("compare", "train"):
            from speccond.harness.config.train_config import (TrainConfig, refuse_unread,
                                                              refuse_unread_by_the_default_method)

            config = TrainConfig().with_overrides(parsed.set)  # every --set is a valid TrainConfig setting
            if command == "train":  # and names the method that reads it: train's default reads no lam
                refuse_unread_by_the_default_method(parsed.set, config, "--set")
                refuse_unread(parsed.set, [config], "--set")


def test_without_a_command_the_advice_is_the_python_call():
    assert phrasing("plot") is None  # a command that conditions nothing leaves the advice alone
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        speccond.apply(_vit_tiny(), SpectralConfig.paper())
    (message,) = [str(w.message) for w in caught if "nearly one-hot" in str(w.message)]
    assert RECOMMENDED.search(message).group(1) == "SpectralConfig(correction='svd')"


def test_a_collapse_warning_under_compare_names_the_flag(tmp_path, monkeypatch, capsys):
    """Through the real command: a width-64 ViT trained by compare's spectral (the paper's lam = 10) warns
    with compare's flag."""
    from speccond.harness.cli import main

    monkeypatch.setenv("SPECCOND_DATA", str(tmp_path / "data"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        main(["compare", "--methods", "spectral", "--dry-run", "--task", "digits", "--out", str(tmp_path / "out"),
              "--set", "embed_dim=128", "--set", "num_heads=2", "--set", "depth=1"])
    messages = [str(w.message) for w in caught if "nearly one-hot" in str(w.message)]
    assert messages and all("--methods spectral-svd keeps attention spread" in m for m in messages), messages

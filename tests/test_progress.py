"""Long work shows a progress bar on stderr (speccond/progress.py): only once it passes PROGRESS_AFTER_S, never
on stdout, where stderr is a terminal unless SPECCOND_PROGRESS says otherwise; the log lines stay as they were.

The bars are real tqdm bars on pytest's captured stderr, which is no terminal: SPECCOND_PROGRESS=1 shows them
there, as it does in a notebook."""
from __future__ import annotations

import json
import logging
import sys
import time

import pytest
import tqdm

import speccond
import speccond.progress
from speccond.core.backends import attachments
from speccond.progress import tracked
from tests.models import timm_vit

log = logging.getLogger("speccond.test")
WHAT = "speccond test: items of %d/%d done"


def _slow_work(items: int = 3, seconds: float = 0.1) -> list[int]:
    return [item for item in tracked(list(range(items)), log, WHAT) if time.sleep(seconds) is None]


def test_work_past_the_threshold_shows_a_bar_on_stderr_and_still_logs(capsys, caplog, monkeypatch):
    monkeypatch.setenv("SPECCOND_PROGRESS", "1")
    monkeypatch.setattr(speccond.progress, "PROGRESS_AFTER_S", 0.15)
    with caplog.at_level(logging.INFO, logger="speccond"):
        assert _slow_work() == [0, 1, 2]
    captured = capsys.readouterr()
    assert "speccond test: items of 3/3 done: 100%|" in captured.err and captured.out == ""
    assert "0/3" not in captured.err  # nothing drawn before the threshold
    assert "speccond test: items of 3/3 done, " in caplog.records[-1].getMessage()


def test_short_work_shows_no_bar_even_when_bars_are_asked_for(capsys, monkeypatch):
    """apply and its report on a small model end well within the default 2 s."""
    monkeypatch.setenv("SPECCOND_PROGRESS", "1")
    assert speccond.progress.PROGRESS_AFTER_S == 2.0
    str(speccond.apply(timm_vit(), speccond.SpectralConfig(correction="svd")))
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("setting", ["0", None], ids=["SPECCOND_PROGRESS=0", "unset, stderr no terminal"])
def test_no_bar_where_turned_off_or_stderr_is_no_terminal(capsys, caplog, monkeypatch, setting):
    """SPECCOND_PROGRESS=0 silences the bar; unset, it stays off where stderr is no terminal (a pipe, a log
    file). The log lines are written either way."""
    if setting is None:
        monkeypatch.delenv("SPECCOND_PROGRESS", raising=False)
    else:
        monkeypatch.setenv("SPECCOND_PROGRESS", setting)
    monkeypatch.setattr(speccond.progress, "PROGRESS_AFTER_S", 0.0)
    with caplog.at_level(logging.INFO, logger="speccond"):
        _slow_work(seconds=0.0)
    assert capsys.readouterr().err == ""
    assert any("speccond test: items of 3/3 done, " in record.getMessage() for record in caplog.records)


def test_unset_a_jupyter_kernel_shows_the_bar(capsys, monkeypatch):
    """In a notebook stderr is no terminal, yet bars show there (as Hugging Face's do): a shell an IPKernelApp
    started counts as one, a terminal IPython does not. (IPython's get_ipython, as a kernel answers it.)"""
    import types

    monkeypatch.delenv("SPECCOND_PROGRESS", raising=False)
    monkeypatch.setattr(speccond.progress, "PROGRESS_AFTER_S", 0.0)
    for config, shown in (({"IPKernelApp": {}}, True), ({"TerminalIPythonApp": {}}, False)):
        ipython = types.ModuleType("IPython")
        ipython.get_ipython = lambda config=config: types.SimpleNamespace(config=config)
        monkeypatch.setitem(sys.modules, "IPython", ipython)
        _slow_work(seconds=0.0)
        assert ("items of 3/3 done: 100%|" in capsys.readouterr().err) is shown


def test_apply_and_the_report_show_their_bars(capsys, monkeypatch):
    monkeypatch.setenv("SPECCOND_PROGRESS", "1")
    monkeypatch.setattr(speccond.progress, "PROGRESS_AFTER_S", 0.0)
    text = str(speccond.apply(timm_vit(), speccond.SpectralConfig(correction="svd")))
    err = capsys.readouterr().err
    for done in ("speccond.apply: corrections of 2/2 projections built", "collapse prediction of 2/2 attention "
                 "modules", "speccond report: spectra of 2/2 conditioned parameters"):
        assert f"{done}: 100%|" in err
    assert "%|" not in text


def test_a_bar_left_early_is_closed(monkeypatch):
    """A loop over tracked items that stops early (break, an error) leaves no bar open to draw over the next."""
    monkeypatch.setenv("SPECCOND_PROGRESS", "1")
    open_before = len(tqdm.tqdm._instances)
    for item in tracked([1, 2, 3], log, WHAT):
        assert len(tqdm.tqdm._instances) == open_before + 1
        break
    assert len(tqdm.tqdm._instances) == open_before


def test_an_unknown_setting_is_refused_before_apply_changes_anything(monkeypatch):
    monkeypatch.setenv("SPECCOND_PROGRESS", "yes")
    model = timm_vit()
    with pytest.raises(ValueError, match=r"SPECCOND_PROGRESS must be 0 .* or unset .*got 'yes'"):
        speccond.apply(model, speccond.SpectralConfig(correction="svd"))
    assert not list(attachments(model))


def test_inspect_shows_apply_s_bar_on_stderr_only(tmp_path, capsys, monkeypatch):
    """The command line adds nothing: inspect's bar is apply's, on stderr (shown on a terminal, here forced),
    never in its table on stdout or its --json file."""
    from speccond.harness.cli import main
    from tests.test_cli import VIT

    monkeypatch.setenv("SPECCOND_PROGRESS", "1")
    monkeypatch.setattr(speccond.progress, "PROGRESS_AFTER_S", 0.0)
    assert main(["inspect", *VIT, "--json", str(tmp_path / "rows.json")]) == 0
    captured = capsys.readouterr()
    assert "speccond.apply: corrections of 2/2 projections built: 100%|" in captured.err
    assert "%|" not in captured.out and "conditioned 6 projection blocks" in captured.out
    assert len(json.loads((tmp_path / "rows.json").read_text())) == 6


def test_without_tqdm_the_work_runs_and_says_why_it_shows_no_bar(capsys, caplog, monkeypatch):
    """The core needs torch alone: without tqdm (an import of it fails) apply runs, its progress goes to the
    log lines, and a bar asked for is said to need tqdm."""
    model = timm_vit()  # timm imported with tqdm there (huggingface_hub uses it)
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setenv("SPECCOND_PROGRESS", "1")
    monkeypatch.setattr(speccond.progress, "PROGRESS_AFTER_S", 0.0)
    with caplog.at_level(logging.INFO, logger="speccond"):
        assert len(speccond.apply(model, speccond.SpectralConfig(correction="svd"))) == 6
    assert capsys.readouterr().err == ""
    messages = [record.getMessage() for record in caplog.records]
    assert "SPECCOND_PROGRESS=1 asks for progress bars, which need tqdm (pip install tqdm)" in messages[0]
    assert any("speccond.apply: corrections of 2/2 projections built, " in message for message in messages)


def test_a_command_refuses_an_unknown_setting_before_it_writes_anything(tmp_path, capsys, monkeypatch):
    """speccond train reads SPECCOND_PROGRESS first: a bad value is one line, exit 2, and no run directory (the
    first apply, which would read it, comes after config.json is written)."""
    from speccond.harness.cli import main

    monkeypatch.setenv("SPECCOND_PROGRESS", "true")
    monkeypatch.setenv("SPECCOND_DATA", str(tmp_path / "data"))
    assert main(["train", "--out", str(tmp_path / "run"), "--set", "task=digits", "--set", "epochs=1"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "speccond train: error: SPECCOND_PROGRESS must be 0 (no progress bars), 1 (bars wherever stderr goes) or unset "
        "(bars where stderr is a terminal), got 'true'"]
    assert not (tmp_path / "run").exists() and not (tmp_path / "data").exists()

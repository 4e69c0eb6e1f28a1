"""harness/protocol/tuning_table.py: the tuning table (tuning.md) made from choice.json alone is byte for byte
the one speccond tune writes, so a committed protocol keeps choice.json and not the table made from it."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from speccond.harness.protocol import tuning
from speccond.harness.protocol.tuning_table import main, table_of_choice

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"


def test_the_table_made_from_a_choice_is_the_one_speccond_tune_wrote(tmp_path):
    """Two seeds a cell (intervals), a tie (to the smaller lr), three arms in their order, box AP and accuracy."""
    scores = {"baseline": {"0.0003": [0.801, 0.812], "0.001": [0.822, 0.818], "0.003": [0.80, 0.79]},
              "spectral": {"0.0003": [0.70, 0.71], "0.001": [0.70, 0.71], "0.003": [0.65, 0.66]},
              "qk-norm": {"0.0003": [0.5, 0.5], "0.001": [0.61, 0.6], "0.003": [0.83, 0.84]}}
    for metric in ("accuracy", "box_ap"):
        tuning.write_tuning(scores, tmp_path, metric)
        choice = tuning.read_choice(tmp_path / "choice.json")
        assert choice["spectral"]["lr"] == 0.0003  # the tie went to the smaller lr
        assert table_of_choice(choice, metric) == (tmp_path / "tuning.md").read_text()


def test_the_command_prints_the_table_and_refuses_a_file_that_is_not_a_choice(tmp_path, capsys):
    choice = RESULTS / "protocol-glue-fact-pre0" / "choice.json"
    assert main([str(choice)]) == 0
    printed = capsys.readouterr().out
    assert printed == table_of_choice(json.loads(choice.read_text()))
    assert "| baseline | 47.4 (n=1) | 47.61 (n=1) | **49.71 (n=1)** |" in printed
    (tmp_path / "choice.json").write_text('{"baseline": {"lr": 0.001}}')
    result = subprocess.run([sys.executable, "-m", "speccond.harness.protocol.tuning_table", str(tmp_path / "choice.json")],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"tuning_table: {tmp_path / 'choice.json'}: not a choice")


def test_a_committed_protocol_keeps_its_choice_and_a_table_only_where_there_is_no_choice_yet():
    """docs/RESULTS_LAYOUT.md: choice.json holds every figure of the tuning table, which is made from it; a
    folder whose tuning has not finished keeps the table of the runs so far."""
    choices = sorted(RESULTS.glob("*/choice.json"))
    assert len(choices) >= 19
    for path in choices:
        assert not (path.parent / "tuning.md").exists(), f"{path.parent}/tuning.md: made from its choice.json"
        assert (path.parent / "tuning.png").is_file()
        assert table_of_choice(tuning.read_choice(path)).startswith("# Tuning on the validation split")

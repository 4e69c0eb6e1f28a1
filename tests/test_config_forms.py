"""A run's lam said once: TrainConfig.lam is a number or "auto", target_kappa the bound "auto" aims at (as in
SpectralConfig), and run directories written before that (config form 1, harness/config/forms.py) still read,
report and resume as what they ran, with the labels and folder names they were published under."""
from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from speccond.harness.config.forms import CONFIG_FORM, form_1_arguments, form_1_upgraded
from speccond.harness.config.train_config import TrainConfig
from speccond.harness.protocol import tuning
from speccond.harness.protocol.compare import parse_sweep, variants
from speccond.harness.training.run_dir import method_label, write_config
from speccond.harness.training.runs import read_config

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"


@pytest.mark.parametrize("form_1, lam, target_kappa", [
    ({"lam": 10.0, "target_kappa": 0.0}, 10.0, 2.0),  # off: lam as recorded, the default bound
    ({"lam": 5.0}, 5.0, 2.0),  # form 1's default target_kappa was 0
    ({"lam": 10.0, "target_kappa": 2.0}, "auto", 2.0),  # > 1: lam = auto aiming at it, the recorded lam ignored
    ({"lam": 1.0, "target_kappa": 50.0}, "auto", 50.0),
])
def test_a_form_1_config_reads_as_what_it_ran(form_1, lam, target_kappa):
    values = {"method": "spectral", **form_1}
    config = TrainConfig.from_record({"config": values})  # no "config_form": form 1
    assert (config.method.lam, config.method.target_kappa) == (lam, target_kappa)
    assert form_1_upgraded(values) == {**values, "lam": lam, "target_kappa": target_kappa}


def test_the_forms_differ_only_by_their_marker_so_config_json_records_it(tmp_path):
    """{"lam": 10, "target_kappa": 2} is lam = auto in form 1 and lam = 10 in form 2: values alone cannot tell."""
    values = TrainConfig().replaced(method="spectral").to_dict()
    assert (values["lam"], values["target_kappa"]) == (10.0, 2.0)
    assert TrainConfig.from_record({"config": values, "config_form": CONFIG_FORM}).method.lam == 10.0
    assert TrainConfig.from_record({"config": values}).method.lam == "auto"
    auto = TrainConfig().replaced(method="spectral", lam="auto", target_kappa=3.0)
    write_config(tmp_path / "run", auto, libraries=())
    record = json.loads((tmp_path / "run" / "config.json").read_text())
    assert record["config_form"] == CONFIG_FORM and record["config"]["lam"] == "auto"
    assert read_config(tmp_path / "run") == auto and record["label"] == "spectral lam=auto(kappa<=3)"
    with pytest.raises(ValueError, match="config_form 3 is not one this speccond reads"):
        TrainConfig.from_record({"config": values, "config_form": 3})


def test_a_form_1_run_directory_resumes_with_the_config_that_asks_for_it_now(tmp_path):
    """write_config, which refuses a second start with another config, reads the old config.json through the
    upgrade: a protocol resuming a published lam = auto run asks spectral:lam=auto and is let through."""
    run = tmp_path / "run"
    run.mkdir()
    old = {**TrainConfig().replaced(method="spectral").to_dict(), "target_kappa": 2.0}  # form 1's lam = auto
    (run / "config.json").write_text(json.dumps({"config": old, "label": "spectral lam=auto(kappa<=2)"}))
    write_config(run, TrainConfig().replaced(method="spectral", lam="auto"), libraries=())  # accepted, nothing rewritten
    assert json.loads((run / "config.json").read_text())["config"] == old
    with pytest.raises(ValueError, match="was started with a different config"):
        write_config(run, TrainConfig().replaced(method="spectral"), libraries=())  # lam = 10 is another run


def _committed_records():
    """(where, config.json object) of every run config committed: loose, and inside every kept archive."""
    for path in sorted(RESULTS.rglob("config.json")):
        yield str(path), json.loads(path.read_text())
    for key in json.loads((RESULTS / "kept-archives.json").read_text()):
        with tarfile.open(RESULTS / key) as archive:
            for member in archive:
                if member.name.endswith("/config.json"):
                    record = json.loads(archive.extractfile(member).read())
                    if "config" in record:  # a run's, not a transformers model's
                        yield f"{key}:{member.name}", record


def test_every_committed_run_config_loads_with_the_label_it_was_published_under():
    seen, auto = 0, 0
    for where, record in _committed_records():
        config = TrainConfig.from_record(record)
        assert method_label(config) == record["label"], where
        seen, auto = seen + 1, auto + (config.method.lam == "auto")
    assert seen > 600 and auto > 100  # the protocols' lam = auto arms are among them


def test_a_published_report_regenerates_from_its_kept_runs_in_the_same_order():
    """CIFAR-10 Swin's final table lists lam = auto (lr 0.001) before lam = 10 (lr 0.003): auto sorts as the
    default lam, so the rows keep the order they were published in (reporting/groups.py)."""
    import tempfile

    from speccond.harness.protocol import kept_runs
    from speccond.harness.reporting.report import write_report

    folder = RESULTS / "protocol-cifar10-swin"
    with tempfile.TemporaryDirectory() as scratch, kept_runs.opened(folder / "kept") as kept:
        out = Path(scratch) / "tune-cifar10-swin"
        kept_runs.restore(kept, out)
        write_report([out / "final"], out / "final")
        fresh = (out / "final" / "results.md").read_text().replace(str(out), "runs/tune-cifar10-swin")
    assert fresh == (folder / "final" / "results.md").read_text()


def test_lam_auto_is_named_by_its_bound_in_every_folder_as_the_published_runs_are():
    assert tuning.arm_config(TrainConfig(), "spectral:lam=auto") == (
        "spectral-target_kappa=2", TrainConfig().replaced(method="spectral", lam="auto"))
    assert tuning.arm_config(TrainConfig(), "spectral:corrected=q+lam=auto+target_kappa=50")[0] == (
        "spectral-corrected=q-target_kappa=50")
    assert tuning.arm_config(TrainConfig(), "spectral:lam=auto+init_from=runs/x")[0] == "spectral-target_kappa=2"
    planned = variants(TrainConfig(), ["baseline", "spectral"], parse_sweep(["lam=1,10,auto"]))
    assert [name for name, _ in planned] == ["baseline", "spectral-lam=1", "spectral-lam=10", "spectral-target_kappa=2"]
    assert [c.method.lam for _, c in planned] == [1.0, 1.0, 10.0, "auto"]
    bounds = variants(TrainConfig().replaced(lam="auto"), ["spectral"], parse_sweep(["target_kappa=2,50"]))
    assert [name for name, _ in bounds] == ["spectral-target_kappa=2", "spectral-target_kappa=50"]


@pytest.mark.parametrize("form_1, form_2", [
    (["--arms", "baseline,spectral:target_kappa=2,spectral:corrected=q"],
     ["--arms", "baseline,spectral:lam=auto,spectral:corrected=q"]),
    (["--arms", "spectral:target_kappa=2+init_from=runs/protocol-mlm/spectral-target_kappa=2/seed-0"],
     ["--arms", "spectral:lam=auto+init_from=runs/protocol-mlm/spectral-target_kappa=2/seed-0"]),
    (["--methods", "spectral", "--sweep", "target_kappa=2"], ["--methods", "spectral", "--sweep", "lam=auto"]),
    (["--set", "target_kappa=2", "--sweep", "refresh_every=0,50"], ["--set", "lam=auto", "--sweep", "refresh_every=0,50"]),
    (["--set", "target_kappa=50"], ["--set", "lam=auto", "--set", "target_kappa=50"]),
    (["--set", "target_kappa=0", "--set", "lam=5"], ["--set", "lam=5"]),
    (["--set", "lam=auto", "--arms", "spectral:lam=auto+target_kappa=3"],  # form 2 means what it meant
     ["--set", "lam=auto", "--arms", "spectral:lam=auto+target_kappa=3"]),
])
def test_a_recorded_form_1_command_reads_as_the_same_runs(form_1, form_2):
    assert form_1_arguments(["speccond", "tune", *form_1]) == ["speccond", "tune", *form_2]


def test_a_form_1_sweep_of_lam_against_auto_is_refused_not_guessed():
    with pytest.raises(ValueError, match="form 1 swept lam against lam=auto"):
        form_1_arguments(["--sweep", "target_kappa=0,2"])


def _published_compare_commands():
    """(results.json, group, command) of every committed group a ``speccond compare`` command made that
    spelled lam = auto in form 1."""
    for path in sorted(RESULTS.rglob("results.json")):
        results = json.loads(path.read_text())
        for group in results.get("groups", []):
            for command in group.get("commands", []):
                if command.startswith("speccond compare") and "target_kappa" in command:
                    yield path, results, group, command


def test_the_published_lam_auto_commands_rerun_the_same_folders_and_labels():
    """Each committed compare command of form 1, read through form_1_arguments (as scripts/retrain_sample.py
    reruns it), plans its group's runs in the folders they were published in, under the same label."""
    import shlex

    from speccond.harness.cli import _base_config, build_parser

    from speccond.harness.tasks.catalogue.language import WITHDRAWN

    found = withdrawn = 0
    for path, results, group, command in _published_compare_commands():
        args = build_parser().parse_args(form_1_arguments(shlex.split(command))[1:])
        if args.task in WITHDRAWN:  # labelled history: its data is gone, so its command is refused, not planned
            withdrawn += 1
            continue
        planned = {name: config for name, config in variants(_base_config(args), args.methods, parse_sweep(args.sweep))}
        folders = {run["path"].split("/")[-2] for run in results["runs"] if run["group"] == group["label"]}
        assert folders and folders <= set(planned), (path, group["label"], folders, sorted(planned))
        assert all(group["label"].startswith(method_label(planned[folder])) for folder in folders), (path, group["label"])
        found += "lam=auto" in group["label"]
    assert found >= 4 and withdrawn >= 4  # ablations, LRA ListOps, MLM pre-training; the four old GLUE-like tasks


@pytest.mark.parametrize("text", ["10", "0.5", "0", "auto", "AUTO", " auto"])
def test_every_command_line_form_reads_a_lam_the_same_way(text):
    """--set, --sweep, an arm's settings and inspect --lam read a lam through one parser (fields.field_value)."""
    from speccond.harness.cli import lam_or_auto

    by_set = TrainConfig().with_overrides([f"lam={text}"]).method.lam
    by_sweep = variants(TrainConfig(), ["spectral"], parse_sweep([f"lam={text}"]))[0][1].method.lam
    by_arm = tuning.arm_config(TrainConfig(), f"spectral:lam={text}")[1].method.lam
    assert by_set == by_sweep == by_arm == lam_or_auto(text)

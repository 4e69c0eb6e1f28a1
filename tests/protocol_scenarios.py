"""The protocol scenarios tests/test_protocol_runner.py replays: each a checkout state (which committed
records there are, which runs this machine has), a command of the shell scripts that ran the protocols
before `speccond protocol` (scripts/protocol.sh, scripts/protocol64.sh at commit d6cbbb7, with the
docs/results layout of docs/RESULTS_LAYOUT.md: kept archives' manifests in docs/results/kept-archives.json,
folded there by protocol.sh after it packs; a tuning table published only until there is a choice), and
what that command did there, recorded in tests/data/protocol_scenarios.json: every call of the
interpreter, its output, its exit status and what it changed under docs/results (each file it added or
changed with its sha256, each file it removed as null; the state itself is rebuilt by :func:`setup`).

The record was made by running those scripts under a stand-in interpreter that logs its arguments and
runs only the read-only calls (`python tests/protocol_scenarios.py OLD_SCRIPTS_DIR`, OLD_SCRIPTS_DIR
holding protocol.sh, protocol64.sh, python_env.sh and best_peer.py as `git show d6cbbb7:scripts/NAME`
gives them): training, reporting, keeping, packing and folding were recorded, not run, so the record holds
exactly what the scripts asked for.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = Path(__file__).resolve().parent / "data" / "protocol_scenarios.json"
SMOKE64 = {"ARMS64": "baseline,spectral",  # what scripts/gpu64.sh set in its smoke mode (SMOKE=1)
           "EXTRA64": "--lrs 1e-3 --final-seeds 1 --set train_size=6400 --set test_size=256 --set depth=1 --set epochs=1",
           "PILOT_EXTRA64": "--set train_size=6400 --set test_size=256 --set depth=1"}
FAIR_TASKS = ("fashion-mnist", "cifar10", "lra-listops", "detection", "cifar10-swin", "cifar10-xcit",
              "cifar10-xcit-noca", "cifar10-davit", "cifar10-deit", "detection-vit",
              *(f"glue-{t}-pre{p}" for p in (0, 1) for t in ("sentiment", "fact", "pairs", "hyperbaton")))


def _copy_results(checkout: Path, names, parts=None) -> None:
    """docs/results/protocol*-NAME of this repository into ``checkout``: the small files copied, the packed
    kept archives and their index (kept-archives.json) linked (read only: nothing a scenario does writes
    them; fold is recorded, not run); ``parts``: only these files."""
    if parts is None:
        (checkout / "docs" / "results" / "kept-archives.json").symlink_to(ROOT / "docs" / "results" / "kept-archives.json")
    for name in names:
        source = ROOT / "docs" / "results" / name
        for path in sorted(source.rglob("*")):
            relative = path.relative_to(source)
            if path.is_dir() or (parts is not None and relative.as_posix() not in parts):
                continue
            target = checkout / "docs" / "results" / name / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            if path.name.startswith("kept."):
                target.symlink_to(path)
            else:
                shutil.copyfile(path, target)


def _write(checkout: Path, relative: str, text: str = "x\n") -> None:
    path = checkout / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def setup(state: str, checkout: Path) -> None:
    """Build checkout state ``state`` in ``checkout`` (an empty folder)."""
    (checkout / "docs" / "results").mkdir(parents=True)
    fair = [f"protocol-{name}" for name in FAIR_TASKS]
    width64 = ["protocol64-fashion-mnist", "protocol64-gpu-fashion-mnist", "protocol64-gpu-pilot",
               "protocol64-gpu-pilot30ep", "protocol64-pilot"]
    if state == "committed":  # this repository's records: every fair task has finished
        _copy_results(checkout, [*fair, "protocol-mlm", *width64])
    elif state in ("choices", "choices-runs", "choices-unpacked"):  # the choices only: the final runs are owed
        _copy_results(checkout, fair, parts={"choice.json"})
        if state == "choices-unpacked":  # kept folders not packed yet, one with a manifest left beside its
            # archive (a folder published by another machine), and a tuning table beside a choice (an older checkout)
            for name in ("protocol-fashion-mnist", "protocol-cifar10", "protocol-mlm"):
                _write(checkout, f"docs/results/{name}/kept/tune/baseline-lr=1e-3/seed-0/config.json")
            for name in ("protocol-fashion-mnist", "protocol-mlm"):
                _write(checkout, f"docs/results/{name}/kept.manifest.json", "{}\n")
            _write(checkout, f"docs/results/{fair[0]}/tuning.md", "an older table\n")
        if state in ("choices-runs", "choices-unpacked"):  # and some runs on this machine, for publish
            for name in ("tuning.md", "tuning.png", "choice.json", "final/holm.md", "final/results.md",
                         "final/comparison.png"):
                _write(checkout, f"runs/tune-fashion-mnist/{name}", f"fashion-mnist {name}\n")
            _write(checkout, "runs/tune-fashion-mnist/final/holm.json", json.dumps({"owed": 0}))
            _write(checkout, "runs/tune-cifar10/final/holm.json", json.dumps({"owed": 3}))
            for name in ("tuning.md", "tuning.png", "choice.json", "final/holm.md"):
                _write(checkout, f"runs/tune-cifar10/{name}", f"cifar10 {name}\n")
            for name in ("tuning.md", "tuning.png"):
                _write(checkout, f"runs/tune-lra-listops/{name}", f"lra-listops {name}\n")
            (checkout / "runs" / "tune-detection").mkdir(parents=True)
            (checkout / "runs" / "protocol-mlm").mkdir(parents=True)
    elif state in ("bare", "bare-pre0"):  # before any record: every task is tuned
        if state == "bare-pre0":  # the language tasks of pre-training seed 0 have chosen on this machine
            for task in ("sentiment", "fact", "pairs", "hyperbaton"):
                _write(checkout, f"runs/tune-glue-{task}-pre0/choice.json")
    elif state in ("width64", "width64-runs", "width64-unpacked"):
        _copy_results(checkout, width64)
        if state == "width64-unpacked":  # a kept folder not packed yet, beside a manifest of an earlier pack
            _write(checkout, f"docs/results/{width64[0]}/kept/tune/baseline-lr=1e-3/seed-0/config.json")
            _write(checkout, f"docs/results/{width64[0]}/kept.manifest.json", "{}\n")
        if state in ("width64-runs", "width64-unpacked"):
            for instance in ("", "gpuchoice-", "gpu-"):
                for name in ("tuning.md", "tuning.png", "choice.json"):
                    _write(checkout, f"runs/tune64-{instance}fashion-mnist/{name}", f"{instance} {name}\n")
            _write(checkout, "runs/tune64-cifar10/tuning.md", "cifar10 tuning.md\n")
            for pilot in ("pilot", "pilot30ep", "gpu-pilot"):
                _write(checkout, f"runs/tune64-{pilot}/baseline/seed-0/metrics.jsonl", f"{pilot}\n")
                _write(checkout, f"runs/tune64-{pilot}/baseline/seed-0/checkpoints/last.pt", "weights\n")
    else:
        raise ValueError(f"unknown state {state!r}")


FAIR = [(state, args, env) for state, env in (("committed", {}), ("choices", {}),
                                              ("bare", {"BEST_PEER": "sigma-reparam", "JOBS": "3"}),
                                              ("bare", {"BEST_PEER": "qk-norm"}),
                                              ("bare-pre0", {"BEST_PEER": "qk-norm", "XCA_PEER": "spectral-norm"}))
        for args in (["list", "tier1"], ["list", "full"], ["list", "reduced"], ["list", "tier2"],
                     ["list", "language"], ["plan", "tier1"], ["plan", "tier2"], ["plan", "language"],
                     ["tier1"], ["tier2"], ["language"])]
FAIR += [("bare", ["list", "reduced"], {}), ("bare", ["tier1"], {}), ("bare", ["language"], {"BEST_PEER": "qk-norm"}),
         ("choices-runs", ["publish"], {}), ("choices-runs", ["report"], {}), ("committed", ["publish"], {}),
         ("choices-unpacked", ["publish"], {}), ("choices-unpacked", ["tier1"], {}),
         ("bare", ["list", "tier3"], {}), ("bare", ["bogus"], {})]
WIDTH64_ENVS = ({}, {"PROTOCOL64_DEVICE": "cuda"}, {"CHOICE64": "gpu"}, {"EPOCHS64": "10"},
                {"PROTOCOL64_DEVICE": "cuda", "EPOCHS64": "10", "JOBS": "12"}, {"CHOICE64": "gpu", "JOBS": "2"})
WIDTH64 = [("width64", args, env) for env in WIDTH64_ENVS
           for args in (["plan"], [], ["fashion-mnist"], ["cifar10"], ["pilot"])]
WIDTH64 += [("width64", ["pilot"], {"PILOT_EPOCHS": "30", "PROTOCOL64_DEVICE": "cuda"}),
            ("width64", ["pilot"], {"PILOT_EPOCHS": "1", **SMOKE64, "RUNS64": "scratch/runs", "KEPT64": "scratch/kept"}),
            ("width64", ["fashion-mnist"], {**SMOKE64, "JOBS": "2", "RUNS64": "scratch/runs", "KEPT64": "scratch/kept"}),
            ("width64", ["fashion-mnist"], {"PROTOCOL64_DEVICE": "cuda", "CHOICE64": "gpu"}),
            ("width64", ["fashion-mnist"], {"PROTOCOL64_DEVICE": "tpu"}),
            ("width64", ["fashion-mnist"], {"CHOICE64": "cpu"}),
            ("width64", ["mnist"], {}),
            ("width64-runs", ["publish"], {}), ("width64-runs", ["publish"], {"CHOICE64": "gpu"}),
            ("width64-runs", ["publish"], {"PROTOCOL64_DEVICE": "cuda"}),
            ("width64-runs", ["publish"], {"EPOCHS64": "10"}), ("width64-unpacked", ["publish"], {})]
SCENARIOS = [("protocol.sh", *s) for s in FAIR] + [("protocol64.sh", *s) for s in WIDTH64]
PASSED = ("BEST_PEER", "XCA_PEER", "JOBS", "PROTOCOL64_DEVICE", "CHOICE64", "EPOCHS64", "PILOT_EPOCHS",
          "ARMS64", "EXTRA64", "PILOT_EXTRA64", "RUNS64", "KEPT64")  # what a scenario may set


def tree(checkout: Path) -> dict[str, str]:
    """Every file under checkout/docs/results and its sha256 (a link: where it points)."""
    files = {}
    for path in sorted((checkout / "docs" / "results").rglob("*")):
        relative = path.relative_to(checkout).as_posix()
        if path.is_symlink():
            files[relative] = "link"
        elif path.is_file():
            files[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
    return files


def changes(before: dict[str, str], after: dict[str, str]) -> dict[str, str | None]:
    """What a command changed under docs/results, from :func:`tree` before and after it: each file added or
    changed, with its new sha256 (or "link"), and each file removed, as None."""
    return {**{path: digest for path, digest in after.items() if before.get(path) != digest},
            **{path: None for path in before if path not in after}}


def _capture(old_scripts: Path, script: str, state: str, args: list[str], env: dict, work: Path) -> dict:
    checkout = work / "checkout"
    shutil.rmtree(checkout, ignore_errors=True)
    checkout.mkdir(parents=True)
    setup(state, checkout)
    (checkout / "scripts").mkdir()
    for name in ("protocol.sh", "protocol64.sh", "python_env.sh", "best_peer.py"):
        text = (old_scripts / name).read_text()
        if name == "protocol.sh":  # its tiers run in the background; recorded in the foreground
            text = text.replace("2>&1 & ;;", "2>&1 ;;")
        (checkout / "scripts" / name).write_text(text)
    log = work / "calls.log"
    log.write_text("")
    fake = work / "fakepy"
    fake.write_text(f"""#!/bin/sh
line=$(for a in "$@"; do printf '%s\\037' "$a"; done)  # one write a call: the pre-training chains log side by side
printf '%s\\n' "$line" >> "$CAPTURE_LOG"
case "$1 $2 $3" in
  "-m speccond tune"|"-m speccond compare"|"-m speccond report") exit 0 ;;
  "-m speccond.harness.protocol.kept_runs keep"|"-m speccond.harness.protocol.kept_runs restore") exit 0 ;;
  "-m speccond.harness.protocol.kept_runs pack"|"-m speccond.harness.protocol.kept_runs fold") exit 0 ;;
esac
exec {sys.executable} "$@"
""")
    fake.chmod(0o755)
    before = tree(checkout)
    environment = {key: value for key, value in os.environ.items() if key not in PASSED}
    environment.update(env, SPECCOND_PYTHON=str(fake), CAPTURE_LOG=str(log), SPECCOND_SRC=str(ROOT / "src"))
    result = subprocess.run(["sh", f"scripts/{script}", *args], cwd=checkout, env=environment,
                            capture_output=True, text=True, timeout=600)
    logs = sorted(p.relative_to(checkout).as_posix() for p in (checkout / "runs").glob("protocol-*.log")) \
        if (checkout / "runs").is_dir() else []
    calls = [line.split("\037")[:-1] for line in log.read_text().splitlines()]
    return {"script": script, "state": state, "args": args, "env": env, "rc": result.returncode,
            "stdout": result.stdout, "stderr": result.stderr,
            "log_text": {p: (checkout / p).read_text() for p in logs},
            "calls": [c for c in calls if c[:2] in (["-m", "speccond"], ["-m", "speccond.harness.protocol.kept_runs"])
                      and c[2] != "list"],
            "changes": changes(before, tree(checkout))}


if __name__ == "__main__":
    import tempfile

    old = Path(sys.argv[1])
    with tempfile.TemporaryDirectory() as folder:
        record = [_capture(old, *scenario, Path(folder)) for scenario in SCENARIOS]
    RECORD.parent.mkdir(exist_ok=True)
    # one scenario a line, without padding: the record stays small and a change to one scenario diffs alone
    RECORD.write_text("[\n" + ",\n".join(json.dumps(s, separators=(",", ":")) for s in record) + "\n]\n")
    print(f"{len(record)} scenarios recorded in {RECORD}")

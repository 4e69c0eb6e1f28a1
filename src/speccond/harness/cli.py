"""Command line: ``speccond demo | inspect | plot | train | compare | tune | protocol | report | data``."""
from __future__ import annotations

import argparse
import math
import sys
import time
from contextlib import nullcontext

from speccond.harness.methods import DEFAULT_COMPARISON, PAPER, RECOMMENDED
from speccond.harness.packages import REPORT_NEEDS, RUN_NEEDS, missing_message, missing_package, require


def positive_int(text: str) -> int:
    """argparse ``type=`` for counts (seeds, batch, iterations): an integer >= 1."""
    return _checked_int(text, 1, "a positive integer (1, 2, ...)")


def non_negative_int(text: str) -> int:
    """argparse ``type=`` for seeds and other values that may be 0: an integer >= 0."""
    return _checked_int(text, 0, "a non-negative integer (0, 1, ...)")


def _checked_int(text: str, smallest: int, expected: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < smallest:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def _checked_float(text: str, acceptable, expected: str) -> float:
    """``text`` as a finite float for which ``acceptable(value)`` holds, else argparse's error naming ``expected``."""
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or not acceptable(value):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    """argparse ``type=`` for scales such as lam: a finite number >= 0 (not nan or inf)."""
    return _checked_float(text, lambda value: value >= 0, "a finite number >= 0 (e.g. 10 or 0.5)")


def lam_or_auto(text: str) -> float | str:
    """argparse ``type=`` for ``inspect --lam``: a finite number >= 0, or ``auto`` (SpectralConfig's lam="auto":
    each block's lam chosen from its sigma_max for --target-kappa), read as ``--set lam=...`` reads it
    (config/fields.py, field_value)."""
    from speccond.harness.config.fields import NUMBER_OR_AUTO, field_value

    try:
        value = field_value(NUMBER_OR_AUTO, text)
    except ValueError:
        value = None
    if value is None or (value != "auto" and not (math.isfinite(value) and value >= 0)):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0 (e.g. 10 or 0.5) or auto, got {text!r}")
    return value


def kappa_target(text: str) -> float:
    """argparse ``type=`` for ``--target-kappa``: a finite number > 1 (kappa is at least 1)."""
    return _checked_float(text, lambda value: value > 1, "a finite number > 1 (e.g. 2 or 1.5)")


def method_list(text: str) -> list[str]:
    """argparse ``type=`` for ``--methods``: comma-separated names from harness.methods.METHODS, at least one."""
    from speccond.harness.methods import METHODS

    methods = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if not methods or unknown:
        got = f"unknown {', '.join(map(repr, unknown))} in {text!r}" if unknown else repr(text)
        raise argparse.ArgumentTypeError(f"expected comma-separated methods from {', '.join(METHODS)}, got {got}")
    return methods


# SpectralConfig's rule (core/config.py): the correction is inferred from whether a lam is given.
CORRECTION_HELP = ("svd (SVD per head, the setting README recommends; the default unless --lam is given) or identity "
                   "(lam * I, the paper's; the default when --lam is given)")


def build_parser() -> argparse.ArgumentParser:
    """The ``speccond`` parser: every numeric flag is checked by its ``type=`` before any command runs."""
    parser = argparse.ArgumentParser(prog="speccond", description="Spectral conditioning of attention.")
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="condition a real timm ViT and print what changed")
    demo.add_argument("--lam", type=non_negative_float,
                      help="scale of the identity correction; giving it chooses the identity correction (--lam 10 "
                           "is the paper's setting)")
    demo.add_argument("--correction", choices=("identity", "svd"),
                      help=CORRECTION_HELP)
    demo.add_argument("--seed", type=non_negative_int, default=0, metavar="N", help="model and input seed (default 0)")

    inspect = commands.add_parser("inspect", help="per-layer conditioning table of a named model")
    inspect.add_argument("model", help="timm:<name> or hf:<model_type>, built from config (no download), or "
                         "hf:<folder> (a path) holding a transformers checkpoint")
    inspect.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="model config override")
    inspect.add_argument("--plain", action="store_true", help="do not condition; inspect the model as built")
    inspect.add_argument("--lam", type=lam_or_auto,
                         help="scale of the identity correction, which giving it chooses (--lam 10 is the paper's "
                              "setting), or auto: each block's lam chosen from its sigma_max so that kappa <= "
                              "--target-kappa (the lams chosen are printed)")
    inspect.add_argument("--target-kappa", type=kappa_target, metavar="T",
                         help="the kappa bound --lam auto aims at, > 1 (default 2, SpectralConfig's)")
    inspect.add_argument("--correction", choices=("identity", "svd"), help=CORRECTION_HELP)
    inspect.add_argument("--checkpoint", help="a safetensors state_dict to load after conditioning")
    inspect.add_argument("--per-head", action="store_true", help="one row per head as well")
    inspect.add_argument("--entropy", action="store_true", help="attention entropy on a random probe batch")
    inspect.add_argument("--jacobian", action="store_true", help="kappa(J) w.r.t. W_Q, W_K, W_V per layer (head 0)")
    inspect.add_argument("--jacobian-iterations", type=positive_int, default=50, metavar="N",
                         help="Lanczos steps (matrix-free; default 50)")
    inspect.add_argument("--batch", type=positive_int, default=2, metavar="N",
                         help="probe batch size for entropy and Jacobian (default 2)")
    inspect.add_argument("--json", help="also write the rows to this JSON file")

    plot = commands.add_parser("plot", help="conditioning figures from tracked runs")
    plot.add_argument("runs", nargs="+", help="run directories holding metrics.jsonl")
    plot.add_argument("--out", default="plots", help="folder for the PNGs (default ./plots)")

    run = commands.add_parser("train", help="one training run into a run directory (resumable)")
    run.add_argument("--out", help="run directory (new run)")
    run.add_argument("--resume", help="run directory to continue with its recorded config")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help=f"any TrainConfig field; method (default {RECOMMENDED}: SVD per head, as compare recommends; "
                          f"--set method={PAPER} --set lam=10 for the paper's setting)")

    comparison = commands.add_parser("compare", help="the baseline, SVD per head, the paper's lam = 10 and the best "
                                     "peer over seeds (the main job), or the methods you name")
    comparison.add_argument("--out", default="runs/compare", help="output folder (resumable; default runs/compare)")
    comparison.add_argument("--task", help="task (default fashion-mnist), a name of harness/tasks/registry.py (an "
                            "unknown name lists them all): an image dataset (fashion-mnist, cifar10, digits, ...), "
                            "a sequence task (lra-image, lra-pathfinder, lra-listops, lra-text, lra-retrieval, ...), "
                            "a language task (mlm, glue-sst2, glue-cola, glue-mrpc, glue-rte), "
                            "the detection task fashion-scenes, or your data (imagefolder:DIR, text:DIR?text=COLUMN&label=COLUMN)")
    comparison.add_argument("--model", help="model family (default vit): vit, deit, swin, xcit, davit, xcit-noca (XCiT without "
                            "class attention); nystromformer for lra-* tasks; "
                            "bert for mlm and glue-* tasks; xcit-maskrcnn (default) or vit-maskrcnn for fashion-scenes; or "
                            "timm:<any registered timm model> for image tasks or hf:<any transformers model type> for "
                            "the language tasks, sized by --set model_args=k=v,k=v, or hf:<folder> (a path, e.g. "
                            "hf:./my-bert) for the checkpoint save_pretrained wrote there")
    comparison.add_argument("--methods", type=method_list, default=",".join(DEFAULT_COMPARISON),
                            help=f"comma-separated (default {','.join(DEFAULT_COMPARISON)}: the baseline, SVD per head "
                                 f"(the setting README recommends), the paper's lam = 10 on q, k, v and the best peer; "
                                 f"the peer is left out, saying why, where the model refuses it); the reference is "
                                 f"baseline when present")
    comparison.add_argument("--seeds", type=positive_int, default=3, metavar="N",
                            help="number of seeds, run as seeds 0, 1, ..., N-1 (default 3)")
    comparison.add_argument("--preset", choices=("quick", "full"), help="the task's preset (default quick)")
    comparison.add_argument("--recipe", help="one of the paper's experiments, in place of a preset (harness/config/"
                            "recipes.py): deit_b_imagenet, vit_b_imagenet, swin_b_imagenet, xcit_m_imagenet, "
                            "davit_b_imagenet, nystromformer_lra, crammed_bert_mlm, crammed_bert_glue")
    comparison.add_argument("--smoke", action="store_true", help="the recipe at smoke size (seconds on a CPU)")
    comparison.add_argument("--dry-run", action="store_true", help="build every method's model, data pipeline and "
                            "optimiser, print what each would train and the wall time estimated from a few timed "
                            "steps, and train nothing")
    comparison.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="any TrainConfig field")
    comparison.add_argument("--sweep", action="append", default=[], metavar="KEY=V1,V2",
                            help="run every method at each value (repeat for a grid), e.g. --sweep lam=1,10,auto; "
                                 "values a method does not read (lam for baseline) are not rerun")

    tuning = commands.add_parser("tune", help="every method at its own best lr on a validation split, then new "
                                 "seeds scored on test once (docs/RESULTS.md, the pre-registered protocol)")
    tuning.add_argument("--out", required=True, help="output folder (resumable)")
    tuning.add_argument("--task", help="task (default fashion-mnist), as for compare")
    tuning.add_argument("--model", help="model family, as for compare")
    tuning.add_argument("--arms", default=",".join(DEFAULT_COMPARISON),
                        help="comma-separated methods, each optionally with settings after a colon joined by '+' "
                             "(spectral:corrected=q, spectral:lam=auto, spectral:lam=auto+target_kappa=3, "
                             "spectral:lam=auto+target_kappa=5+key_basis=orthogonal); default "
                             f"{','.join(DEFAULT_COMPARISON)}, as compare's")
    tuning.add_argument("--lrs", default="3e-4,1e-3,3e-3", help="peak learning rates tried (default 3e-4,1e-3,3e-3)")
    tuning.add_argument("--val-size", type=positive_int, required=True, metavar="N",
                        help="validation examples held out of the training data")
    tuning.add_argument("--tuning-seeds", type=positive_int, default=2, metavar="N", help="seeds per lr (default 2)")
    tuning.add_argument("--final-seeds", type=positive_int, default=5, metavar="N",
                        help="new seeds (100, 101, ...) at the chosen lr (default 5)")
    tuning.add_argument("--preset", choices=("quick", "full"), default="full")
    tuning.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="any TrainConfig field")
    tuning.add_argument("--stage", choices=("tune", "all", "report"), default="all",
                        help="tune: stop after the choice; all: then the final runs (default); report: train "
                             "nothing, write the tables of the runs finished so far")
    tuning.add_argument("--extend-edges", action="store_true",
                        help="an arm whose chosen lr is the grid's smallest or largest also runs one step past it "
                             "(3e-4 -> 1e-4, 3e-3 -> 1e-2) and chooses over its extended grid")
    tuning.add_argument("--engine", choices=("pool", "submitit"), default="pool",
                        help="pool: runs side by side on this machine (default); submitit: each run a submitit job "
                             "(Slurm where srun exists, else local processes; docs/HARNESS.md)")
    tuning.add_argument("--cluster", choices=("auto", "local", "slurm", "debug"), default="auto",
                        help="submitit's executor (default auto)")
    tuning.add_argument("--slurm-partition", default="", help="submitit on Slurm: the partition")
    tuning.add_argument("--gpus-per-node", type=non_negative_int, default=0, metavar="N",
                        help="submitit on Slurm: GPUs per job")
    tuning.add_argument("--jobs", type=positive_int, default=1, metavar="N",
                        help="runs trained side by side, each in its own process (default 1)")
    tuning.add_argument("--choice", metavar="PATH",
                        help="take the choice from this choice.json (one speccond tune wrote for the same arms, lrs "
                             "and --tuning-seeds, e.g. a committed docs/results/protocol-*/choice.json) instead of "
                             "the tuning runs, which a fresh clone does not have; checked before it is used")

    protocols = commands.add_parser("protocol", help="a published protocol (docs/RESULTS.md), task by task, "
                                    "resumable: run, plan, publish, list, report")
    protocols.add_argument("action", choices=("run", "plan", "publish", "list", "report"),
                           help="run: train what is left of a stage, task or pilot; plan: what running it would do "
                                "here; publish: tables and kept runs into docs/results; list: each task's speccond "
                                "tune arguments; report: tables of what has finished")
    protocols.add_argument("name", help="the protocol: fair, width64, width64-10ep, width64-gpu, width64-gpu-10ep, "
                                        "width64-gpuchoice, scale-gpu (harness/protocol/experiments)")
    protocols.add_argument("task", nargs="?", help="run: a stage (fair: tier1, full, reduced, tier2, language), a task "
                                                   "or a pilot; plan and list: a stage")
    protocols.add_argument("--jobs", type=positive_int, default=2, metavar="N",
                           help="runs trained side by side (speccond tune --jobs; default 2)")
    protocols.add_argument("--peer", help="fair: the best peer, instead of the registered rule over the full "
                                          "protocol's choices (scripts/best_peer.py)")
    protocols.add_argument("--xca-peer", help="fair: XCiT's peer where the best peer is qk-norm (default sigma-reparam)")
    protocols.add_argument("--runs", default="runs", help="where the runs train, relative to the checkout (default runs)")
    protocols.add_argument("--results", default="docs/results",
                           help="where the records are committed, relative to the checkout (default docs/results)")
    protocols.add_argument("--smoke", action="store_true", help="the protocol shrunk to tiny runs (tests only)")

    summary = commands.add_parser("report", help="tables and plots from finished runs (no training)")
    summary.add_argument("runs", nargs="+", help="comparison folders (<method>/seed-<k>/ runs) or run directories")
    summary.add_argument("--out", help="folder for results.md, results.json and plots "
                         "(default: the comparison folder when one is given, else ./report)")
    summary.add_argument("--glue", action="store_true", help="one table over comparison folders of the language tasks "
                         "(one per glue-* task, optionally mlm), laid out as the paper's GLUE table: OUT/glue.md")

    data = commands.add_parser("data", help="obtain and cache datasets")
    data_commands = data.add_subparsers(dest="data_command", required=True)
    prepare = data_commands.add_parser("prepare", help="obtain, verify and cache a dataset")
    prepare.add_argument("name", help="dataset name, e.g. fashion-mnist")
    data_commands.add_parser("list", help="every dataset and where it comes from on this machine")
    packing = data_commands.add_parser("pack", help="compress prepared datasets for a machine that cannot obtain them")
    packing.add_argument("names", nargs="+", help="dataset names, e.g. fashion-mnist cifar10")
    packing.add_argument("--to", required=True, help="folder for NAME.safetensors.xz and manifest.json")
    unpacking = data_commands.add_parser("unpack", help="a pack's datasets into the data dir ($SPECCOND_DATA), checked")
    unpacking.add_argument("folder", help="the folder `speccond data pack --to` wrote")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    started = time.perf_counter()
    from speccond.collapse_advice import phrased
    from speccond.harness.cli_advice import phrasing

    spoken = phrasing(args.command)
    with phrased(spoken) if spoken else nullcontext():
        return _run(args, started)


def _run(args: argparse.Namespace, started: float) -> int:
    """The command ``args`` names; its exit status."""
    try:
        from speccond.progress import bars_wanted

        bars_wanted()  # SPECCOND_PROGRESS, read by the first long work: a bad value refused before anything is written
        if args.command == "demo":
            from speccond.harness.demo import run_demo

            require("timm")
            run_demo(lam=args.lam, correction=args.correction, seed=args.seed, out=sys.stdout)
        elif args.command == "inspect":
            _inspect(args)
        elif args.command == "compare":
            _compare(args)
        elif args.command == "tune":
            _tune(args)
        elif args.command == "report":
            _report(args)
        elif args.command == "protocol":
            return _protocol(args)
        elif args.command == "train":
            code = _train(args)
            if code:
                return code
        elif args.command == "data":
            _data(args)
        elif args.command == "plot":
            from speccond.diagnostics.plot import plot_runs

            require("matplotlib")
            for path in plot_runs(args.runs, args.out):
                print(path)
    except ModuleNotFoundError as error:  # an optional package the command needs: its name and install command
        if missing_package(error) is None:
            raise
        print(f"speccond {args.command}: error: {missing_message(missing_package(error))}", file=sys.stderr)
        return 2
    except (ValueError, TypeError, OSError) as error:  # a user's input or file: one line, never a traceback
        print(f"speccond {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"speccond {args.command}: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    print(f"\ndone in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


def _base_config(args: argparse.Namespace, *fixed: str):
    """The TrainConfig of compare and tune: the task's preset, then --task / --model, then --set, then
    ``fixed`` (what the command itself requires)."""
    from speccond.harness.config.fields import refuse_repeats, setting
    from speccond.harness.config.presets import preset
    from speccond.harness.config.train_config import TrainConfig

    chosen = [f"{key}={value}" for key, value in (("task", args.task), ("model", args.model)) if value]
    refuse_repeats([setting(pair)[0] for pair in [*chosen, *args.set]], "--task, --model and --set")
    recipe_name = getattr(args, "recipe", None)
    if recipe_name:
        from speccond.harness.config.recipes import recipe

        if args.preset:
            raise ValueError(f"--recipe {recipe_name} replaces a preset: leave out --preset {args.preset}")
        tasks = [pair.partition("=")[2] for pair in [*chosen, *args.set] if pair.startswith("task=")]
        start = recipe(recipe_name, args.smoke, tasks[-1] if tasks else "")  # an ImageNet recipe needs --task
        return TrainConfig().with_overrides([*start, *chosen, *args.set, *fixed])
    if getattr(args, "smoke", False):
        raise ValueError("--smoke sizes a --recipe; give --recipe NAME, or leave out --smoke")
    task = TrainConfig().with_overrides([*chosen, *args.set]).data.task
    return TrainConfig().with_overrides([*preset(args.preset or "quick", task), *chosen, *args.set, *fixed])


# TrainConfig fields a command sets itself, each with the flag to use instead: --set or --sweep of one is
# refused, never silently replaced.
COMPARE_OWNS = {"seed": "compare runs seeds 0 to N-1 of --seeds N: use --seeds",
                "method": "compare runs every method of --methods: use --methods"}
TUNE_OWNS = {"seed": "tune runs seeds 0, 1, ... of --tuning-seeds, then 100, 101, ... of --final-seeds: use those",
             "method": "tune runs the methods of --arms: use --arms (settings after a colon: spectral:lam=2)",
             "lr": "tune tries every lr of --lrs: use --lrs", "val_size": "tune holds out --val-size: use --val-size",
             "tuning": "tune sets it on its tuning runs only",
             "flush_denormal": "tune always flushes subnormals (flush_denormal=1)"}


def _check_models(configs: list, *packages: str) -> None:
    """Before any data is read or anything written: the command's ``packages`` are installed, and every
    config's model is known and its packages installed (models/named.py, check_model); an hf:<folder>
    checkpoint's config fits the task (models/hf_text.py, folder_config)."""
    from speccond.harness.models.named import check_model, is_checkpoint_folder

    require(*packages)
    for config in {(c.model.name, c.data.task, c.model.model_args): c for c in configs}.values():
        check_model(config.model.name)
        if config.model.name.startswith("hf:") and is_checkpoint_folder(config.model.name[len("hf:"):]):
            from speccond.harness.models.hf_text import folder_config
            from speccond.harness.tasks.datasets import task_shape

            shape = task_shape(config.data.task)
            if shape.kind == "text":  # another kind of task is refused when the model is built, with the kinds
                folder_config(config.model.name[len("hf:"):], shape.vocab, shape.classes, config.model.model_kwargs())


def _refuse_owned(flag: str, pairs: list[str], owned: dict[str, str]) -> None:
    for pair in pairs:
        key = pair.partition("=")[0]  # a pair without "=" is refused by with_overrides, naming the form
        if key in owned:
            raise ValueError(f"{flag} {pair}: {owned[key]}")


def _compare(args: argparse.Namespace) -> None:
    from pathlib import Path

    from speccond.harness.config.train_config import refuse_unread
    from speccond.harness.protocol.compare import compare, parse_sweep, variants
    from speccond.harness.tasks.datasets import prepare_data
    from speccond.harness.training.preflight import check_comparison_folder, check_writable

    _refuse_owned("--set", args.set, COMPARE_OWNS)
    _refuse_owned("--sweep", args.sweep, COMPARE_OWNS)
    base = _base_config(args)
    sweep = parse_sweep(args.sweep)
    chosen = variants(base, args.methods, sweep)  # every method and swept value checked before any data is read
    refuse_unread(args.set, [config for _, config in chosen], "--set")  # a setting no run reads
    _check_models([config for _, config in chosen], *RUN_NEEDS, *REPORT_NEEDS)
    if args.methods == list(DEFAULT_COMPARISON):
        args.methods = _default_methods(base)
        chosen = variants(base, args.methods, sweep)
    if args.dry_run:  # builds what the runs would train, writes nothing
        from speccond.harness.protocol.dry_run import describe, dry_run, estimate

        if sweep:
            raise ValueError("--dry-run builds each method once; leave out --sweep")
        prepare_data(base.data.task)
        rows = dry_run(base, args.methods)
        for row in rows:
            print(describe(row))
        print(estimate(rows, args.seeds))
        print(f"dry run: nothing trained, nothing written to {args.out}")
        return
    check_writable(args.out, "--out")
    check_comparison_folder(Path(args.out), base, sweep)
    prepare_data(base.data.task)
    if compare(base, args.methods, range(args.seeds), Path(args.out), sweep=sweep) is None:
        return  # a torchrun rank other than 0: rank 0 writes and prints the report
    print((Path(args.out) / "results.md").read_text())
    print(f"written: {Path(args.out) / 'results.md'}, results.json and the report's plots")


def _default_methods(base) -> list[str]:
    """compare's default methods, DEFAULT_COMPARISON, less the best peer where this model refuses it (qk-norm on
    attention that normalises q and k already), said on stderr."""
    from speccond.harness.methods import BEST_PEER
    from speccond.harness.training.preflight import built_model

    try:
        built_model(base.replaced(method=BEST_PEER))
    except ValueError as refused:
        built_model(base.replaced(method="baseline"))  # a config that builds no model at all is refused as such
        print(f"speccond compare: {BEST_PEER} left out of the default methods: {refused}", file=sys.stderr)
        return [method for method in DEFAULT_COMPARISON if method != BEST_PEER]
    return list(DEFAULT_COMPARISON)


def _tune(args: argparse.Namespace) -> None:
    from pathlib import Path


    from speccond.harness.config.fields import arm_settings
    from speccond.harness.config.train_config import refuse_unread
    from speccond.harness.methods import METHODS
    from speccond.harness.protocol import tuning
    from speccond.harness.protocol.engines import engine_from
    from speccond.harness.tasks.datasets import prepare_data
    from speccond.harness.training.folder_lock import writing
    from speccond.harness.training.preflight import check_comparison_folder, check_runnable, check_writable
    from speccond.harness.training.training_tasks import headline_metric

    _refuse_owned("--set", args.set, TUNE_OWNS)
    submitit_only = [flag for flag, given in (("--cluster", args.cluster != "auto"), ("--slurm-partition",
                     bool(args.slurm_partition)), ("--gpus-per-node", bool(args.gpus_per_node))) if given]
    if submitit_only and args.engine != "submitit":
        raise ValueError(f"{', '.join(submitit_only)} set(s) submitit's jobs; add --engine submitit, or leave them out")
    base = _base_config(args, f"val_size={args.val_size}", "flush_denormal=1")
    arms = {}
    for arm in [a.strip() for a in args.arms.split(",") if a.strip()]:
        if arm_settings(arm)[0] not in METHODS:
            raise ValueError(f"--arms: unknown method in {arm!r}; methods: {', '.join(METHODS)}")
        name, config = tuning.arm_config(base, arm)
        if name in arms:
            raise ValueError(f"--arms names {name!r} twice; give each arm once")
        arms[name] = config
    if not arms:
        raise ValueError(f"--arms {args.arms!r} names no arms; give comma-separated methods, e.g. baseline,spectral")
    refuse_unread(args.set, list(arms.values()), "--set")  # a setting no arm reads
    _check_models(list(arms.values()), *RUN_NEEDS, *REPORT_NEEDS, "tqdm",
                  *(("submitit",) if args.engine == "submitit" else ()))
    try:
        lrs = [float(lr) for lr in args.lrs.split(",") if lr.strip()]
    except ValueError:
        raise ValueError(f"--lrs takes comma-separated numbers, got {args.lrs!r}") from None
    if not lrs or not all(math.isfinite(lr) and lr > 0 for lr in lrs):
        raise ValueError(f"--lrs takes positive learning rates, got {args.lrs!r}")
    repeated = next((lr for i, lr in enumerate(lrs) if lr in lrs[:i]), None)
    if repeated is not None:
        raise ValueError(f"--lrs names {repeated:g} twice; give each learning rate once")
    check_writable(args.out, "--out")
    check_comparison_folder(Path(args.out), base)
    out = Path(args.out)
    adopted = (tuning.adopt_choice(Path(args.choice), arms, lrs, args.tuning_seeds, out, args.extend_edges)
               if args.choice else None)
    metric = headline_metric(base)  # the figure the arms are tuned on: accuracy, MCC for glue-cola, box AP for detection
    if args.stage == "report":
        scores = ({name: c["validation"] for name, c in adopted.items()} if adopted
                  else tuning.protocol_scores(arms, lrs, args.tuning_seeds, out, args.extend_edges))
        choice = tuning.write_tuning(scores, out, metric)
        print((out / "tuning.md").read_text())
        if choice is not None:
            print(tuning.write_final(arms, choice, args.final_seeds, out))
        return
    prepare_data(base.data.task)
    for config in arms.values():  # every arm builds and fits its data before the first run is written
        check_runnable(config.replaced(lr=lrs[0], tuning=1))
    engine = engine_from(args.engine, out, args.cluster, slurm_partition=args.slurm_partition,
                         gpus_per_node=args.gpus_per_node)
    with writing(out):  # one tune per folder at a time (folder_lock.py); creates it
        choice = adopted or tuning.tune(arms, lrs, args.tuning_seeds, out, args.jobs, args.extend_edges, engine)
        tuning.write_tuning({name: c["validation"] for name, c in choice.items()}, out, metric)  # the scores it chose from
        print((out / "tuning.md").read_text())
        if args.stage == "all":
            print(tuning.final(arms, choice, args.final_seeds, out, args.jobs, engine))


def _protocol(args: argparse.Namespace) -> int:
    """Exit status 0, or the status of the call that stopped the protocol."""
    from speccond.harness.protocol.experiments import protocol
    from speccond.harness.protocol.experiments.runner import Runner, Stopped
    from pathlib import Path

    chosen = protocol(args.name, smoke=args.smoke)
    root = Path.cwd()  # the checkout: its runs/ and docs/results, as the calls name them
    if not (root / "docs" / "RESULTS.md").is_file():
        raise ValueError(f"speccond protocol runs in a checkout of speccond (where docs/RESULTS.md registers the "
                         f"protocols), got {root}: cd there first")
    if args.action in ("publish", "report") and args.task:
        raise ValueError(f"speccond protocol {args.action} takes no task (it covers every task), got {args.task!r}")
    runner = Runner(chosen, root, runs=args.runs, results=args.results, jobs=args.jobs, peer=args.peer,
                    xca_peer=args.xca_peer, say=lambda line: print(line, flush=True))
    try:
        if args.action == "run":
            runner.run(args.task)
        elif args.action == "plan":
            print("\n".join(runner.plan(args.task)))
        elif args.action == "list":
            print("\n".join(runner.listing(args.task)))
        elif args.action == "report":
            runner.report()
        else:
            runner.publish()
    except Stopped as stopped:
        print(f"speccond protocol: {stopped}", file=sys.stderr)
        return stopped.status
    return 0


def _data(args: argparse.Namespace) -> None:
    from pathlib import Path

    from speccond import data as datasets
    from speccond.data import pack, store
    from speccond.harness.tasks.registry import own_datasets

    if args.data_command == "prepare":
        own = own_datasets()  # the datasets tasks bring themselves (harness/tasks/registry.py), then speccond.data's
        print(store.prepare(own[args.name]) if args.name in own else datasets.prepare(args.name))
    elif args.data_command == "list":
        from speccond.data.listing import listing

        print("\n".join(listing([*datasets.DATASETS.values(), *own_datasets().values()])))
    elif args.data_command == "pack":  # generated datasets and the tasks' own too; every name checked first
        print(pack.pack(args.names, Path(args.to), own=own_datasets()))
    else:
        for path in pack.unpack(Path(args.folder)):
            print(path)


def _report(args: argparse.Namespace) -> None:
    if args.glue:
        from pathlib import Path

        from speccond.harness.reporting.glue import glue_table

        print(glue_table(args.runs, args.out or "report"))
        print(f"written: {Path(args.out or 'report') / 'glue.md'}")
        return
    from speccond.harness.reporting.report import write_report
    from speccond.harness.training.preflight import check_writable

    require(*REPORT_NEEDS)

    if args.out:
        check_writable(args.out, "--out")
    report = write_report(args.runs, args.out)
    print(report.markdown)
    print(f"written: {report.out / 'results.md'}, results.json, {', '.join(report.plots) or 'no plots'}")


def _train(args: argparse.Namespace) -> int:
    """Exit status 0 when the run finished, 3 when it diverged (its row says at which step)."""
    import json
    import os
    from pathlib import Path

    from speccond.harness.config.fields import refuse_repeats, setting
    from speccond.harness.config.train_config import TrainConfig, refuse_unread, refuse_unread_by_the_default_method
    from speccond.harness.tasks.datasets import task as task_of
    from speccond.harness.training.preflight import check_writable
    from speccond.harness.training.runs import read_config
    from speccond.harness.training.train import train

    if bool(args.out) == bool(args.resume):
        raise ValueError("give exactly one of --out RUN_DIR (a new run) or --resume RUN_DIR")
    refuse_repeats([setting(pair)[0] for pair in args.set], "--set")
    if args.resume:
        if not (Path(args.resume) / "config.json").is_file():
            raise ValueError(f"{args.resume} has no config.json; nothing to resume")
        config = read_config(args.resume).with_overrides(args.set)
    else:
        check_writable(args.out, "--out")
        config = TrainConfig().with_overrides(args.set)  # method spectral-svd unless --set method=... names one
        refuse_unread_by_the_default_method(args.set, config, "--set")
    refuse_unread(args.set, [config], "--set")  # a setting the run's method or model never reads
    task_of(config.data.task)  # an unknown task is an error before the run directory is written
    _check_models([config], *RUN_NEEDS)
    result = train(config, Path(args.out or args.resume))  # checks the model and data sizes before writing
    if int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps(result))
    return 3 if result.get("kind") == "diverged" else 0


def _inspect(args: argparse.Namespace) -> None:
    from speccond import diagnostics as dx
    import speccond
    from speccond.harness.config.fields import parse_overrides
    from speccond.harness.models.named import build_named_model, example_inputs

    if args.json:
        from speccond.harness.training.preflight import check_writable

        check_writable(args.json, "--json", folder=False)
    if args.target_kappa is not None and (args.lam != "auto" or args.plain):
        raise ValueError(f"--target-kappa {args.target_kappa:g} is read only by --lam auto (conditioned, not "
                         "--plain); add --lam auto or leave --target-kappa out")
    given = {name: value for name, value in (("lam", args.lam), ("correction", args.correction),
                                             ("target_kappa", args.target_kappa)) if value is not None}
    spectral = None if args.plain else speccond.SpectralConfig(**given)  # the correction inferred as SpectralConfig's
    if args.checkpoint:
        require("safetensors")
    model = build_named_model(args.model, parse_overrides(args.set))
    if spectral is not None:
        report = speccond.apply(model, spectral)
        if args.lam == "auto":
            print(f"conditioned {len(report)} projection blocks (identity, lam=auto, target_kappa="
                  f"{spectral.target_kappa:g})\n")
            print(report.compute())  # every figure: a command line cannot call compute() afterwards
            print()
        elif spectral.correction == "svd":
            print(f"conditioned {len(report)} projection blocks (svd per {spectral.granularity}: kappa(W + C) <= 2)\n")
        else:
            print(f"conditioned {len(report)} projection blocks (identity, lam={spectral.lam:g})\n")
    if args.checkpoint:  # checked against its recorded SHA-256, its keys and shapes against the model's
        from speccond.harness.training.checkpoint import load_weights_file

        load_weights_file(model, args.checkpoint)
    rows = dx.projection_spectra(model, per_head=args.per_head)
    print(rows)
    probe = example_inputs(model, batch=args.batch)
    if args.entropy:
        print()
        print(dx.attention_entropy(model, probe))
    if args.jacobian:
        jacobian = dx.jacobian_rows(model, probe, method="auto", max_iter=args.jacobian_iterations)
        columns = ("layer", "head", "method", "shape", "sigma_max", "sigma_min_nonzero", "kappa", "kappa_lower",
                   "kappa_upper", "kappa_nonzero", "kappa_nonzero_lower", "kappa_nonzero_upper", "converged")
        print()
        print(dx.Records([{c: r[c] for c in columns} for r in jacobian], "attention Jacobian w.r.t. W_Q, W_K, W_V"))
    if args.json:
        rows.save(args.json)


if __name__ == "__main__":
    raise SystemExit(main())

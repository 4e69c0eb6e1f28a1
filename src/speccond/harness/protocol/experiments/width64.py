"""The protocol at head width 64 (docs/RESULTS.md, "Pre-registered protocol at head width 64"): timm's ViT with
ViT-Ti's heads (width 192, 3 heads of 64, depth 4), six arms tuned over {3e-4, 1e-3, 3e-3} on one seed with
the edge rule, then 5 new seeds scored on test once; the plateau pilots beside it.

Instances, each with its own folders (runs/tune64-<instance>NAME, docs/results/protocol64-<instance>NAME):
``cpu`` (no prefix), ``gpu`` ("gpu-": ``--set device=cuda``, checkpoints at the end only), ``gpuchoice``
("gpuchoice-": the CPU's final runs at the GPU instance's committed choice, no tuning run); and at
``epochs=10`` (the plateau rule's branch, "10ep-" after the instance).

``speccond protocol publish width64...`` leaves each kept archive's manifest beside it, so a folder published
on another machine travels whole; fold it into docs/results/kept-archives.json before committing it:
``python -m speccond.harness.protocol.kept_runs fold docs/results`` (docs/RESULTS_LAYOUT.md).
"""
from __future__ import annotations

from speccond.harness.protocol.experiments.spec import Pilot, Pretraining, Protocol, Stage, TuneTask

ARMS = ("baseline", "spectral", "spectral:corrected=q", "spectral:lam=auto", "spectral-svd", "qk-norm")
# The seventh arm, registered on 2026-12-07 for every task not yet run (CIFAR-10, language, the 10-epoch primary)
ROTATED_K = "spectral:lam=auto+target_kappa=5+key_basis=orthogonal"
AMENDED_ARMS = (*ARMS, ROTATED_K)
MODEL = ("embed_dim=192", "num_heads=3", "depth=4", "patch_size=4", "batch_size=128", "warmup_steps=200")
GPU = ("device=cuda", "checkpoint_every=1000000")  # the GPU instance: its runs never resume elsewhere
PILOT_EPOCHS = (10, 30)  # the plateau pilot (registered) and the longer one of the GPU call (a measurement)
TASKS = (("fashion-mnist", 6000, 422), ("cifar10", 5000, 352))  # (task, validation examples, steps per epoch)
# CIFAR-10 (JPEG), amended 2026-12-07 before its runs: the full 50,000 training images less 5,000 for
# validation, 10 epochs (3,520 steps), in the base instances only (its epochs do not follow Fashion-MNIST's), its
# tuning grid walked from the centre (every arm at 1e-3 first) and its arms in CIFAR10_ARMS' order
CIFAR10_EPOCHS = 10
CIFAR10_LRS = "1e-3,3e-4,3e-3"
CIFAR10_ARMS = ("baseline", "spectral-svd", ROTATED_K, "qk-norm", "spectral:lam=auto", "spectral:corrected=q", "spectral")
# Language, amended on 2026-12-07: MLM pre-training of every arm, 4 seeds, then each GLUE task tuned from
# pre-training seed 0 on 10 % of its train file and scored once on its dev file from every pre-training seed
PRETRAINING = "runs/protocol64-mlm"  # <arm folder>/seed-<p>: the encoders the language arms fine-tune
PRETRAINING_SEEDS = (0, 1, 2, 3)
GLUE = (("sst2", 6735), ("cola", 855), ("mrpc", 367), ("rte", 249))  # (task, validation examples: 10 % of train)
# (the arm as tune names it, the folder its encoders are in, the speccond compare arguments that pre-train them
# there: compare takes method names, and a setting it sweeps names the folder; the test of this stage checks
# that each folder is the one its arguments write)
LANGUAGE_ARMS = (
    ("baseline", "baseline", ("--methods", "baseline")),
    ("spectral", "spectral", ("--methods", "spectral")),
    ("spectral:corrected=q", "spectral-corrected=q", ("--methods", "spectral", "--sweep", "corrected=q")),
    ("spectral:lam=auto", "spectral-target_kappa=2", ("--methods", "spectral", "--sweep", "lam=auto")),
    ("spectral-svd", "spectral-svd", ("--methods", "spectral-svd")),
    ("qk-norm", "qk-norm", ("--methods", "qk-norm")),
    (ROTATED_K, "spectral-target_kappa=5-key_basis=orthogonal",
     ("--methods", "spectral", "--set", "lam=auto", "--sweep", "target_kappa=5", "--sweep", "key_basis=orthogonal")),
)
SMOKE_ARMS = ("baseline", "spectral")
SMOKE_SETS = ("train_size=6400", "test_size=256", "depth=1")
SMOKE_PILOT_EPOCHS = (1, 2)


def overridden(sets: tuple[str, ...], overrides: tuple[str, ...]) -> tuple[str, ...]:
    """``sets`` (KEY=VALUE) with each key of ``overrides`` given its value there instead, then the new keys."""
    keys = {pair.split("=", 1)[0] for pair in overrides}
    return tuple(pair for pair in sets if pair.split("=", 1)[0] not in keys) + overrides


def pilot_name(epochs: int) -> str:
    """The pilot's folder suffix: "pilot" at the registered 10 epochs, else "pilot<N>ep"."""
    return "pilot" if epochs == 10 else f"pilot{epochs}ep"


def get_config(instance: str = "cpu", epochs: int = 5, smoke: bool = False) -> Protocol:
    """The width-64 protocol's tasks on one instance; ``epochs``: Fashion-MNIST's (5, or 10 by the plateau rule).

    Commands (resumable; finished runs are skipped and kept runs restored from docs/results)::

        speccond protocol run width64 pilot               # the plateau pilot, 10 epochs, on validation
        speccond protocol run width64 fashion-mnist --jobs 2
        speccond protocol run width64 cifar10 --jobs 2    # CIFAR-10 (JPEG), 10 epochs: the base instances only
        speccond protocol run width64-gpuchoice fashion-mnist --jobs 2   # CPU finals at the GPU's choice
        speccond protocol publish width64                 # tables, and keep every finished run
        speccond protocol plan width64                    # what is kept and what is left

    The GPU instance (``width64-gpu``, ``width64-gpu-10ep``) runs in one call of scripts/gpu64.sh.
    Expected run time (docs/RESULTS.md): one Fashion-MNIST run about 46 minutes on one core, one CIFAR-10
    run (50k images, 10 epochs) about 80; about 41 and some 75 core-hours for their 54 runs, two side by side.

    ``smoke``: two arms, one lr, one final seed, depth 1 on 6,400 training and 256 test examples, pilots
    of 1 and 2 epochs: the whole sequence in minutes on a CPU (scripts/gpu64.sh's SMOKE=1).
    """
    if instance not in ("cpu", "gpu", "gpuchoice") or epochs not in (5, 10):
        raise ValueError(f"the width-64 protocol runs on cpu, gpu or gpuchoice at 5 or 10 epochs, got "
                         f"{instance!r} at {epochs}; these are the registered instances")
    if instance == "gpuchoice" and epochs != 5:
        raise ValueError(f"the final runs at the GPU instance's choice run at 5 epochs only, got {epochs}")
    hardware = GPU if instance == "gpu" else ()
    fashion_arms = AMENDED_ARMS if epochs == 10 else ARMS
    prefix = {"cpu": "", "gpu": "gpu-", "gpuchoice": "gpuchoice-"}[instance] + ("" if epochs == 5 else f"{epochs}ep-")
    extra = ("epochs=1",) if smoke else ()
    shrink = dict(lrs="1e-3", final_seeds=1) if smoke else {}
    arms = SMOKE_ARMS if smoke else fashion_arms
    tasks = tuple(
        TuneTask(name, name, val_size, task_arms, tuning_seeds=1, extend_edges=True,
                 **{"lrs": lrs, **shrink} if lrs else shrink,
                 sets=overridden((*MODEL, *hardware, f"epochs={task_epochs}", f"track_every={track}"),
                                  SMOKE_SETS + extra if smoke else ()))
        for name, val_size, track in TASKS
        if name == "fashion-mnist" or epochs == 5
        for task_epochs, task_arms, lrs in [(epochs, arms, None) if name == "fashion-mnist" else
                                            (CIFAR10_EPOCHS, SMOKE_ARMS if smoke else CIFAR10_ARMS, CIFAR10_LRS)])
    pilots = tuple(Pilot(pilot_name(pilot_epochs), (
        "--task", "fashion-mnist", "--methods", "baseline", "--seeds", "1", "--preset", "full",
        *(part for pair in overridden((*MODEL, *hardware, f"epochs={pilot_epochs}", "lr=1e-3", "val_size=6000",
                                       "tuning=1", "flush_denormal=1", "track_every=422"), SMOKE_SETS if smoke else ())
          for part in ("--set", pair))))
        for pilot_epochs in (SMOKE_PILOT_EPOCHS if smoke else PILOT_EPOCHS))
    name = "width64" + {"cpu": "", "gpu": "-gpu", "gpuchoice": "-gpuchoice"}[instance] + (
        "" if epochs == 5 else f"-{epochs}ep")
    stages = (Stage("tasks", tasks),) + ((language_stage(smoke),) if epochs == 5 and instance != "gpuchoice" else ())
    return Protocol(name, "width64", instance, stages, runs_prefix=f"tune64-{prefix}",
                    results_prefix=f"protocol64-{prefix}", pilots=pilots, smoke=smoke,
                    choice_prefix="protocol64-gpu-" if instance == "gpuchoice" else None)


def language_stage(smoke: bool = False) -> Stage:
    """MLM pre-training of every arm (PRETRAINING_SEEDS), then each GLUE task: tuned from pre-training seed 0
    (the edge rule as elsewhere), scored once on dev from every pre-training seed at seed 0's choice.

        speccond protocol run width64 language     # the encoders first (two chains side by side), then the tasks

    About 12 core-hours on this machine's CPU (28 encoders of 648 steps at about 0.9 s, then the fine-tuning).
    ``smoke``: the same tasks, encoders and folders, every run one epoch at the one lr 1e-3 (tests only).
    """
    seeds, arms, glue = PRETRAINING_SEEDS, LANGUAGE_ARMS, GLUE
    extra = ("--set", "epochs=1") if smoke else ()

    def fine_tuned(seed: int) -> tuple[str, ...]:
        return tuple(f"{method}{'+' if ':' in method else ':'}init_from={PRETRAINING}/{folder}/seed-{seed}"
                     for method, folder, _ in arms)

    tasks = tuple(TuneTask(f"glue-{name}-pre{seed}", f"glue-{name}", val_size, fine_tuned(seed), tuning_seeds=1,
                           final_seeds=1, extend_edges=seed == seeds[0], choice_of=None if seed == seeds[0] else
                           f"glue-{name}-pre{seeds[0]}", **({"lrs": "1e-3"} if smoke else {}),
                           sets=("epochs=1",) if smoke else ())
                  for seed in seeds for name, val_size in glue)
    mlm = ("--task", "mlm", "--preset", "full", "--seeds", str(len(seeds)), "--out", PRETRAINING,
           "--set", "flush_denormal=1", *extra)
    # two chains side by side: the arms without settings in one compare, then each arm with settings in turn
    plain = ",".join(method for method, _, _ in arms if ":" not in method)
    chains = (((*mlm, "--methods", plain),), tuple((*mlm, *args) for method, _, args in arms if ":" in method))
    chains = tuple(chain for chain in chains if chain)
    return Stage("language", tasks, Pretraining(PRETRAINING, "protocol64-mlm/kept", "protocol64-mlm",
                                                encoders=len(arms) * len(seeds), chains=chains, parallel_jobs=2))

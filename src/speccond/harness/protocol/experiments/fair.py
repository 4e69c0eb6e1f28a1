"""The fair comparison (docs/RESULTS.md, "Pre-registered protocol of the fair comparison"): every arm at its
own best lr on validation, then 5 new seeds scored on test once, task by task.

Stages: ``full`` (Fashion-MNIST and CIFAR-10 with the ViT, nine arms, 2 tuning seeds), ``reduced``
(ListOps, detection with the XCiT trunk: five arms, 1 tuning seed, with the best peer of the full
protocol), ``tier1`` (full, then reduced), ``tier2`` (the other CIFAR-10 families, detection with the ViT
trunk) and ``language`` (MLM pre-training of the five reduced arms, 2 seeds, then each glue-* task tuned
from pre-training seed 0, and seed 1's final runs at seed 0's choice).
"""
from __future__ import annotations

from speccond.harness.protocol.experiments.spec import (PEER, XCA_PEER, Pretraining, Protocol, Stage,
                                                     TuneTask, replaced)

FULL_ARMS = ("baseline", "spectral", "spectral:corrected=q", "spectral:lam=auto", "spectral-svd", "qk-norm",
             "sigma-reparam", "sigma-reparam-all", "spectral-norm")
REDUCED_ARMS = ("baseline", "spectral", "spectral:corrected=q", "spectral:lam=auto", PEER)
# XCiT's XCA normalises q and k already, so qk-norm has nothing to do there: XCiT tasks take XCA_PEER
REDUCED_XCA_ARMS = (*REDUCED_ARMS[:-1], XCA_PEER)
PRETRAINING = "runs/protocol-mlm"  # <arm>/seed-<p>: the encoders the language arms fine-tune
LANGUAGE = (("sentiment", 4579), ("fact", 4373), ("pairs", 3982), ("hyperbaton", 4000))  # validation: 10 %
LANGUAGE_ARMS = ("baseline", "spectral", "spectral-corrected=q", "spectral-target_kappa=2", PEER)  # folders


def _reduced(name: str, task: str, val_size: int, model: str | None = None, xca: bool = False) -> TuneTask:
    return TuneTask(name, task, val_size, REDUCED_XCA_ARMS if xca else REDUCED_ARMS, model=model, tuning_seeds=1)


def _language_arms(seed: int) -> tuple[str, ...]:
    """The five reduced arms, each fine-tuning its own encoder of pre-training seed ``seed``."""
    methods = ("baseline", "spectral", "spectral:corrected=q", "spectral:lam=auto", PEER)
    return tuple(f"{method}{'+' if ':' in method else ':'}init_from={PRETRAINING}/{folder}/seed-{seed}"
                 for method, folder in zip(methods, LANGUAGE_ARMS))


def get_config(smoke: bool = False) -> Protocol:
    """The fair comparison's tasks, in the registered order.

    Command (resumable; finished runs are skipped; committed choices and kept runs resume a fresh clone)::

        speccond protocol run fair tier1 --jobs 2       # then tier2, then language
        speccond protocol plan fair tier1               # what each task would do here: skip, resume or tune
        speccond protocol publish fair                  # tables and kept runs into docs/results/protocol-*
                                                        # (manifests folded into docs/results/kept-archives.json)

    Expected run time: one task at a time, two runs side by side on two cores; the language stage alone
    about 13 hours (docs/RESULTS.md), longer than a session, hence its kept encoders. Every task's final
    table is committed (docs/results/protocol-*/final/holm.json owes no run), so on this checkout every
    task is skipped in seconds (tests/test_protocol_runner.py, the "committed" scenarios).

    ``smoke``: every task at one lr, one tuning seed, one final seed and one epoch (tests only).
    """
    full = (TuneTask("fashion-mnist", "fashion-mnist", 6000, FULL_ARMS),
            TuneTask("cifar10", "cifar10", 800, FULL_ARMS))
    reduced = (_reduced("lra-listops", "lra-listops", 800),
               _reduced("detection", "fashion-scenes", 200, "xcit-maskrcnn", xca=True))
    tier2 = (_reduced("cifar10-swin", "cifar10", 800, "swin"), _reduced("cifar10-xcit", "cifar10", 800, "xcit", True),
             _reduced("cifar10-xcit-noca", "cifar10", 800, "xcit-noca", True),
             _reduced("cifar10-davit", "cifar10", 800, "davit"), _reduced("cifar10-deit", "cifar10", 800, "deit"),
             _reduced("detection-vit", "fashion-scenes", 200, "vit-maskrcnn"))
    # pre-training seed 1 takes the lrs chosen on seed 0's validation (RESULTS' protocol: a tuning cut)
    language = tuple(TuneTask(f"glue-{name}-pre{seed}", f"glue-{name}", val_size, _language_arms(seed), tuning_seeds=1,
                              choice_of=None if seed == 0 else f"glue-{name}-pre0")
                     for seed in (0, 1) for name, val_size in LANGUAGE)
    mlm = ("--task", "mlm", "--preset", "full", "--seeds", "2", "--out", PRETRAINING, "--set", "flush_denormal=1")
    pretraining = Pretraining(PRETRAINING, "protocol-mlm/kept", "protocol-mlm", encoders=10, parallel_jobs=2, chains=(
        ((*mlm, "--methods", f"baseline,spectral,{PEER}"),),
        ((*mlm, "--methods", "spectral", "--sweep", "corrected=q"),
         (*mlm, "--methods", "spectral", "--sweep", "lam=auto"))))
    stages = (Stage("full", full), Stage("reduced", reduced), Stage("tier2", tier2),
              Stage("language", language, pretraining))
    if smoke:
        stages = tuple(Stage(s.name, tuple(_smoke(t) for t in s.tasks), s.pretraining) for s in stages)
    return Protocol("fair", "fair", "cpu", stages, runs_prefix="tune-", results_prefix="protocol-", smoke=smoke,
                    groups=(("tier1", ("full", "reduced")),))


def _smoke(task: TuneTask) -> TuneTask:
    return replaced(task, lrs="1e-3", tuning_seeds=1, final_seeds=1, sets=(*task.sets, "epochs=1"))

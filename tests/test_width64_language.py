"""The width-64 protocol's language stage (amended 2026-12-07): every arm's fine-tuning starts from the encoder
its own pre-training chain writes, for every pre-training seed, and seeds after the first take seed 0's choice."""
from __future__ import annotations

from speccond.harness.config.train_config import TrainConfig
from speccond.harness.protocol.compare import parse_sweep, variants
from speccond.harness.protocol.experiments import protocol, width64


def chain_folders(stage) -> set[str]:
    """The encoder folders the stage's pre-training chains write, as speccond compare names them."""
    found = set()
    for calls in stage.pretraining.chains:
        for argv in calls:
            methods = argv[argv.index("--methods") + 1].split(",")
            sweeps = [argv[i + 1] for i, word in enumerate(argv) if word == "--sweep"]
            sets = [argv[i + 1] for i, word in enumerate(argv) if word == "--set" and argv[i + 1].startswith("lam=")]
            base = TrainConfig().with_overrides(["task=mlm", *sets])
            found |= {name for name, _ in variants(base, methods, parse_sweep(sweeps))}
    return found


def test_every_arm_fine_tunes_the_encoder_its_pre_training_chain_writes():
    stage = next(s for s in protocol("width64").stages if s.name == "language")
    folders = chain_folders(stage)
    assert folders == {folder for _, folder, _ in width64.LANGUAGE_ARMS}
    assert stage.pretraining.encoders == len(width64.LANGUAGE_ARMS) * len(width64.PRETRAINING_SEEDS)
    for task in stage.tasks:
        seed = int(task.name.rsplit("pre", 1)[1])
        starts = [arm.rsplit("init_from=", 1)[1] for arm in task.arms]
        assert starts == [f"{width64.PRETRAINING}/{folder}/seed-{seed}" for _, folder, _ in width64.LANGUAGE_ARMS]
        assert task.final_seeds == 1 and task.tuning_seeds == 1
        assert task.choice_of == (None if seed == 0 else f"{task.task}-pre0")


def test_the_seventh_arm_joins_the_tasks_not_yet_run_and_not_the_finished_pilot():
    assert width64.ROTATED_K in protocol("width64").task("cifar10").arms
    assert width64.ROTATED_K in protocol("width64-10ep").task("fashion-mnist").arms
    assert width64.ROTATED_K not in protocol("width64").task("fashion-mnist").arms  # the 5-epoch pilot, finished
    assert width64.ROTATED_K not in protocol("width64-gpuchoice").task("fashion-mnist").arms

"""The five sections of a run's config (TrainConfig, config/train_config.py): what is trained (model), on what
(data), with which conditioning (method), how it is optimised (optimizer) and how the run is carried out (run).

Each section is a frozen dataclass whose fields are typed and commented, and which validates its own fields
when built; checks that need two sections live in TrainConfig. Every field has one key in the flat
vocabulary that ``--set``, ``--sweep``, arms, config.json and folder names use: its own name, except a
section's ``name``, whose key is the section's name (``config.model.name`` is ``model=vit``,
``config.method.name`` is ``method=spectral``, ``config.optimizer.name`` is ``optimizer=adamw``).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from speccond.core.config import AUTO  # SpectralConfig's word for a lam chosen from each block's sigma_max
from speccond.harness.config.forms import DEFAULT_TARGET_KAPPA
from speccond.harness.methods import METHODS, RECOMMENDED  # the registry of methods (methods.py), SVD per head
from speccond.harness.values import show_value

TIMM_PREFIX = "timm:"  # model names of any registered timm model ("timm:vit_small_patch16_224")
HF_PREFIX = "hf:"  # model names of any transformers model type, for the language tasks ("hf:roberta")


@dataclass(frozen=True)
class ModelConfig:
    """What is trained: the architecture and the weights it starts from."""
    name: str = "vit"  # key "model": a family of models/registry.py (timm vision families for image tasks,
    #                    "nystromformer" for lra-*, "bert" for mlm and glue-*, Mask R-CNN on a timm trunk for
    #                    fashion-scenes), or "timm:<registered name>" (any timm model, image tasks; sized by
    #                    model_args, not below) or "hf:<model type>" (any transformers encoder, language tasks;
    #                    its config from model_args)
    model_args: str = ""  # timm:<name> and hf:<type> only: "key=value,key=value" (Python literals)
    embed_dim: int = 128  # transformer width D
    depth: int = 4  # number of blocks
    num_heads: int = 4  # heads per block
    patch_size: int = 4  # pixels per patch side
    attention_norm: str = "layernorm"  # "none" drops the LayerNorm before each attention (ablation; timm)
    landmarks: int = 64  # Nystromformer landmarks (sequence tasks); sequences are padded to a multiple
    fpn_channels: int = 64  # detection: channels of every pyramid level and of the mask head's convolutions
    drop_path: float = 0.0  # stochastic depth rate of the named timm families (timm's drop_path_rate)
    # A finished pre-training run directory (task mlm) whose encoder a new run starts from; "{key}" is filled
    # from the run's config by flat key, e.g. runs/mlm/{method}/seed-0 or runs/mlm/{method}-lam={lam:g}/seed-{seed}.
    # "" = none.
    init_from: str = ""

    def __post_init__(self) -> None:
        _typed(self, "model")  # before any check reads a value
        from speccond.harness.models.registry import IMAGE_FAMILIES, MODELS  # no torch, no timm

        named = self.named()
        if self.name not in MODELS and not named:
            raise ValueError(f"TrainConfig.model must be one of {MODELS}, timm:<a registered timm model name> or "
                             f"hf:<a transformers model type>, got {self.name!r}")
        if self.model_args and not named:
            raise ValueError(f"TrainConfig.model_args sets a timm:<name> or hf:<type> model's constructor arguments; "
                             f"model {self.name!r} is sized by embed_dim, depth, num_heads and patch_size")
        if self.init_from and self.name.startswith(HF_PREFIX):
            raise ValueError("TrainConfig.init_from starts the project's BERT from a pre-trained encoder; an hf:<type> "
                             "model is trained from its config's random weights (leave init_from empty)")
        self.model_kwargs()  # a malformed model_args is refused here, before any run
        if self.drop_path and self.name not in IMAGE_FAMILIES:
            raise ValueError(f"TrainConfig.drop_path sets the stochastic depth of the named timm families {IMAGE_FAMILIES}; "
                             f"for model {self.name!r} give drop_path_rate in model_args (timm:<name>), or leave it 0")
        if self.attention_norm not in ("layernorm", "none"):
            raise ValueError(f"TrainConfig.attention_norm must be 'layernorm' or 'none', got {self.attention_norm!r}")
        _at_least(self, 1, "embed_dim", "depth", "num_heads", "patch_size", "landmarks", "fpn_channels")
        _rates(self, "drop_path")
        if self.embed_dim % self.num_heads:
            raise ValueError(f"TrainConfig.num_heads ({self.num_heads}) must divide embed_dim ({self.embed_dim})")

    def named(self) -> bool:
        """True for a model given by its timm or transformers name (sized by model_args)."""
        return any(self.name.startswith(prefix) and len(self.name) > len(prefix) for prefix in (TIMM_PREFIX, HF_PREFIX))

    def model_kwargs(self) -> dict:
        """model_args as keyword arguments: "drop_path_rate=0.1,depth=6" -> {"drop_path_rate": 0.1, "depth": 6};
        commas inside brackets belong to their value: "depths=(1,1),window_size=4" -> {"depths": (1, 1), ...}."""
        from speccond.harness.config.fields import parse_overrides

        pairs = [pair.strip() for pair in _top_level_split(self.model_args) if pair.strip()]
        try:
            return parse_overrides(pairs)
        except ValueError as error:
            raise ValueError(f"TrainConfig.model_args takes key=value pairs joined by commas, each key once, e.g. "
                             f"'drop_path_rate=0.1,depth=6'; got {self.model_args!r} ({error})") from None


@dataclass(frozen=True)
class DataConfig:
    """What the model sees: the task, how much of it, in which batches, with which augmentation."""
    task: str = "fashion-mnist"  # dataset name (speccond data prepare NAME), or a task of harness/tasks/registry.py
    train_size: int = 0  # use the first N training examples (0 = all), after a seeded shuffle
    val_size: int = 0  # validation examples held out of the training data, evaluated after each epoch (0 = none)
    test_size: int = 0  # evaluate on the first N test examples (0 = all)
    batch_size: int = 128  # examples per step
    eval_batch_size: int = 500  # examples per forward pass at evaluation
    # Worker processes that read a streamed task's batches: a streamed image folder's decoded images
    # (imagefolder:DIR?stream=1) or a streamed text task's token ids (text:DIR?...&stream=1); DataLoader's
    # num_workers, harness/training/streaming.py. 0 reads in the training process. Tasks held in memory
    # have nothing to read and refuse any other value.
    num_workers: int = 0
    auto_augment: str = ""  # image tasks: timm.data.create_transform's training augmentation, e.g.
    #                         "rand-m9-mstd0.5-inc1" (RandAugment); "" = the built-in flip and shift
    random_erasing: float = 0.0  # image tasks: create_transform's random-erasing probability (0 = off)
    mixup: float = 0.0  # mixup alpha (timm.data.Mixup; 0 = off), image classification
    cutmix: float = 0.0  # cutmix alpha (timm.data.Mixup; 0 = off)
    label_smoothing: float = 0.0  # of the targets, through timm.data.Mixup and SoftTargetCrossEntropy

    def __post_init__(self) -> None:
        _typed(self, "data")  # before any check reads a value
        _at_least(self, 1, "batch_size", "eval_batch_size")
        _at_least(self, 0, "train_size", "val_size", "test_size", "num_workers")
        if not (math.isfinite(self.random_erasing) and 0 <= self.random_erasing <= 1):
            raise ValueError(f"TrainConfig.random_erasing is a probability in [0, 1], got {self.random_erasing}")
        _rates(self, "label_smoothing")
        for name in ("mixup", "cutmix"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"TrainConfig.{name} must be >= 0, got {value}")


@dataclass(frozen=True)
class MethodConfig:
    """How attention is conditioned: the method of methods.py's registry and the settings it reads."""
    name: str = RECOMMENDED  # key "method": one of methods.METHODS (the registry); default "spectral-svd" (SVD
    #                          per head, as SpectralConfig() and compare), "spectral" (the paper's lam = 10) until
    #                          2026-12-07: every config.json records its method, so an older run resumes as it was
    lam: float | str = 10.0  # identity correction scale (methods "spectral", "shifted-init"), or "auto": each
    #                          block's lam from its sigma_max so that the Weyl bound on kappa meets target_kappa
    target_kappa: float = DEFAULT_TARGET_KAPPA  # the kappa bound lam="auto" aims at, > 1; read by lam="auto" only
    correction: str = "identity"  # "identity" or "svd" (method "spectral")
    corrected: str = "qkv"  # which projections the spectral methods correct: any of q, k, v (ablation)
    granularity: str = "head"  # svd correction per "head" or per "projection" block
    key_basis: str = "identity"  # the identity correction's k per head: "identity" (lam I) or "orthogonal" (lam R,
    #                              R a fixed random orthogonal matrix: SpectralConfig.key_basis); k must be corrected
    refresh_every: int = 0  # steps between speccond.refresh (recomputes svd corrections; 0 = never)

    def __post_init__(self) -> None:
        _typed(self, "method")  # before any check reads a value
        if self.name not in METHODS:
            raise ValueError(f"TrainConfig.method must be one of {METHODS}, got {self.name!r}")
        if not self.corrected or set(self.corrected) - set("qkv") or len(set(self.corrected)) != len(self.corrected):
            raise ValueError(f"TrainConfig.corrected names projections from 'qkv' (e.g. 'qk', 'v'), got {self.corrected!r}")
        if self.lam != AUTO and not (isinstance(self.lam, (int, float)) and not isinstance(self.lam, bool)
                                     and math.isfinite(self.lam) and self.lam >= 0):
            raise ValueError(f"TrainConfig.lam must be a finite number >= 0 or 'auto', got {self.lam!r}")
        if not (math.isfinite(self.target_kappa) and self.target_kappa > 1):
            raise ValueError(f"TrainConfig.target_kappa is the kappa bound lam='auto' aims at, a finite number > 1 "
                             f"(default 2), got {self.target_kappa}")
        if self.target_kappa != DEFAULT_TARGET_KAPPA and self.lam != AUTO:
            raise ValueError(unread_bound(show_value(float(self.target_kappa)), show_value(float(self.lam))))
        if self.granularity not in ("head", "projection"):
            raise ValueError(f"TrainConfig.granularity must be 'head' or 'projection', got {self.granularity!r}")
        if self.correction not in ("identity", "svd"):
            raise ValueError(f"TrainConfig.correction must be 'identity' or 'svd', got {self.correction!r}")
        if self.key_basis not in ("identity", "orthogonal"):
            raise ValueError(f"TrainConfig.key_basis must be 'identity' or 'orthogonal', got {self.key_basis!r}")
        if self.key_basis == "orthogonal" and (self.correction != "identity" or "k" not in self.corrected):
            raise ValueError(f"TrainConfig.key_basis=orthogonal turns the identity correction of k into lam R, got "
                             f"correction={self.correction} and corrected={self.corrected}: use correction=identity "
                             "with k in corrected, or leave key_basis out")
        _at_least(self, 0, "refresh_every")


@dataclass(frozen=True)
class OptimizerConfig:
    """How the weights are optimised: the optimiser, its schedule over the epochs, clipping and averaging."""
    name: str = "adamw"  # key "optimizer": "adamw" (optimizer.adamw) or "timm:<name>" (timm.optim.create_optimizer_v2)
    scheduler: str = "cosine"  # "cosine" (train.learning_rate) or "timm:<name>" (timm's create_scheduler_v2, per step)
    lr: float = 1e-3  # peak learning rate
    weight_decay: float = 0.05  # decoupled weight decay (AdamW)
    warmup_steps: int = 50  # linear warm-up, then the schedule's decay (cosine: to 0)
    epochs: int = 1  # passes over the training subset
    grad_clip: float = 1.0  # global gradient-norm clip (0 = off)
    accumulate_steps: int = 1  # micro-batches of batch_size / N per optimiser step, gradients summed (1 = off)
    ema_decay: float = 0.0  # timm.utils.ModelEmaV3 decay of a weight average evaluated instead (0 = off)

    def __post_init__(self) -> None:
        _typed(self, "optimizer")  # before any check reads a value
        for key, value, default in (("optimizer", self.name, "adamw"), ("scheduler", self.scheduler, "cosine")):
            if value != default and not (value.startswith(TIMM_PREFIX) and len(value) > len(TIMM_PREFIX)):
                raise ValueError(f"TrainConfig.{key} must be {default!r} or timm:<name> (e.g. timm:{default}), "
                                 f"got {value!r}")
        if not (math.isfinite(self.ema_decay) and 0 <= self.ema_decay < 1):
            raise ValueError(f"TrainConfig.ema_decay must be 0 (off) or in (0, 1), e.g. 0.9999, got {self.ema_decay}")
        _at_least(self, 1, "epochs")  # accumulate_steps against batch_size: TrainConfig
        _at_least(self, 0, "warmup_steps")
        for name in ("lr", "weight_decay", "grad_clip"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"TrainConfig.{name} must be finite and >= 0, got {value}")


@dataclass(frozen=True)
class RunConfig:
    """How the run is carried out: its seed, hardware, numerics, checkpoints and what it scores."""
    seed: int = 0  # model init, data order and augmentation
    device: str = "auto"  # "auto" (CUDA when available, else CPU), "cpu" or "cuda" (one GPU per torchrun rank)
    precision: str = "float32"  # the training forward: "float32", or torch.amp autocast "bfloat16" / "float16"
    #                             (float16 with a gradient scaler): harness/training/precision.py
    compile: int = 0  # 1: torch.compile the model for training (evaluation and checkpoints use the same weights)
    channels_last: int = 0  # 1: the model's 4-d weights and the image batches in torch.channels_last memory format
    # 1: subnormal floats read as 0 during the run (torch.set_flush_denormal). Collapsed attention fills the
    # softmax with them and runs slower on a CPU for that reason alone; flushing removes that cost and
    # changes sums in their last bits. The published runs used 0.
    flush_denormal: int = 0
    checkpoint_every: int = 100  # steps between checkpoints (and at the end of each epoch)
    track_every: int = 0  # steps between diagnostics rows (0 = off)
    tuning: int = 0  # 1: a tuning run: its final row scores the validation split; the test split is never scored

    def __post_init__(self) -> None:
        _typed(self, "run")  # before any check reads a value
        if self.precision not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"TrainConfig.precision must be 'float32', 'bfloat16' or 'float16', got {self.precision!r}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"TrainConfig.device must be 'auto', 'cpu' or 'cuda', got {self.device!r}")
        for name in ("flush_denormal", "tuning", "compile", "channels_last"):
            if getattr(self, name) not in (0, 1):
                raise ValueError(f"TrainConfig.{name} must be 0 or 1, got {getattr(self, name)}")
        _at_least(self, 1, "checkpoint_every")
        _at_least(self, 0, "track_every", "seed")


def unread_bound(bound: str, lam: str) -> str:
    """The refusal of a target_kappa that lam, a number, would not read (nothing given is ignored)."""
    return (f"TrainConfig.target_kappa={bound} is the kappa bound lam=auto aims at, and lam is {lam}: add lam=auto "
            f"(--set lam=auto, or an arm's spectral:lam=auto+target_kappa={bound}), or leave target_kappa out")


# What a field's annotation (a string, under ``from __future__ import annotations``) accepts: bool is no number.
_ACCEPTS = {"str": (str,), "int": (int,), "float": (int, float), "float | str": (int, float, str)}


def _typed(section: object, name_key: str) -> None:
    """TypeError naming the flat key when a field of ``section`` holds a value its annotation does not accept
    (config.json's ``"epochs": 2.5`` or ``true``); ``name_key`` is the key of the section's ``name`` field."""
    for field in dataclasses.fields(section):
        value = getattr(section, field.name)
        if isinstance(value, bool) or not isinstance(value, _ACCEPTS[field.type]):
            key = name_key if field.name == "name" else field.name
            expected = {"float": "a number", "float | str": "a number or 'auto'", "int": "an integer",
                        "str": "a string"}[field.type]
            raise TypeError(f"TrainConfig.{key} must be {expected}, got {value!r} ({type(value).__name__}); "
                            "correct it where it was given")


def _at_least(section: object, lowest: int, *names: str) -> None:
    for name in names:
        if getattr(section, name) < lowest:
            raise ValueError(f"TrainConfig.{name} must be >= {lowest}, got {getattr(section, name)}")


def _rates(section: object, *names: str) -> None:
    """Each named field is a rate in [0, 1)."""
    for name in names:
        value = getattr(section, name)
        if not (math.isfinite(value) and 0 <= value < 1):
            raise ValueError(f"TrainConfig.{name} must be >= 0 and < 1, got {value}")


def _top_level_split(text: str) -> list[str]:
    """``text`` split at the commas outside (), [] and {}: "a=(1,2),b=3" -> ["a=(1,2)", "b=3"]."""
    parts, depth, start = [], 0, 0
    for index, character in enumerate(text):
        depth += character in "([{"
        depth -= character in ")]}"
        if character == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    return [*parts, text[start:]]

"""TrainConfig: one training run, every field typed and commented, validated once.

``with_overrides(["lr=3e-4", "epochs=2"])`` (config/fields.py) parses ``key=value`` strings to each field's
type and rejects unknown keys, so a command line can set any field and nothing else.

lam is a number or "auto" and target_kappa is the kappa bound "auto" aims at, as in SpectralConfig. Run
directories written before that (config.json without ``"config_form"``) said lam="auto" as target_kappa > 1
and "off" as target_kappa = 0; :meth:`TrainConfig.from_record` reads both forms. The two cannot be told apart
by their values ({"lam": 10.0, "target_kappa": 2.0} is lam = 10 now and was lam = auto then), so config.json
records its form (:data:`CONFIG_FORM`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from speccond.harness.config.fields import AUTO, NUMBER_OR_AUTO, ConfigFields, field_value, parse_overrides, setting
from speccond.harness.config.forms import CONFIG_FORM, DEFAULT_TARGET_KAPPA, form_1_upgraded
from speccond.harness.methods import METHODS  # the registry of methods (methods.py)
from speccond.harness.values import show_value

TIMM_PREFIX = "timm:"  # model names of any registered timm model ("timm:vit_small_patch16_224")
HF_PREFIX = "hf:"  # model names of any transformers model type, for the language tasks ("hf:roberta")


@dataclass(frozen=True)
class TrainConfig(ConfigFields):  # to_dict, from_dict, with_overrides
    task: str = "fashion-mnist"  # dataset name (speccond data prepare NAME)
    model: str = "vit"  # a family of models/registry.py (timm vision families for image tasks, "nystromformer"
    #                     for lra-*, "bert" for mlm and glue-*, Mask R-CNN on a timm trunk for fashion-scenes), or
    #                     "timm:<registered name>" (any timm model, image tasks; sized by model_args, not below)
    #                     or "hf:<model type>" (any transformers encoder, language tasks; its config from model_args)
    model_args: str = ""  # timm:<name> and hf:<type> only: "key=value,key=value" (Python literals)
    method: str = "spectral"  # one of methods.METHODS (the registry)
    lam: float | str = 10.0  # identity correction scale (methods "spectral", "shifted-init"), or "auto": each block's
    #                          lam from its sigma_max so that the Weyl bound on kappa meets target_kappa
    correction: str = "identity"  # "identity" or "svd" (method "spectral")
    target_kappa: float = DEFAULT_TARGET_KAPPA  # the kappa bound lam="auto" aims at, > 1; read by lam="auto" only
    corrected: str = "qkv"  # which projections the spectral methods correct: any of q, k, v (ablation)
    granularity: str = "head"  # svd correction per "head" or per "projection" block
    refresh_every: int = 0  # steps between speccond.refresh (recomputes svd corrections; 0 = never)
    attention_norm: str = "layernorm"  # "none" drops the LayerNorm before each attention (ablation; timm)
    embed_dim: int = 128  # transformer width D
    depth: int = 4  # number of blocks
    num_heads: int = 4  # heads per block
    patch_size: int = 4  # pixels per patch side
    fpn_channels: int = 64  # detection: channels of every pyramid level and of the mask head's convolutions
    epochs: int = 1  # passes over the training subset
    train_size: int = 0  # use the first N training images (0 = all), after a seeded shuffle
    val_size: int = 0  # validation examples held out of the training data, evaluated after each epoch (0 = none)
    test_size: int = 0  # evaluate on the first N test images (0 = all)
    batch_size: int = 128  # images per step
    lr: float = 1e-3  # peak AdamW learning rate
    weight_decay: float = 0.05  # decoupled weight decay (AdamW)
    warmup_steps: int = 50  # linear warm-up, then cosine decay to 0
    grad_clip: float = 1.0  # global gradient-norm clip (0 = off)
    seed: int = 0  # model init, data order and augmentation
    checkpoint_every: int = 100  # steps between checkpoints (and at the end of each epoch)
    track_every: int = 0  # steps between diagnostics rows (0 = off)
    eval_batch_size: int = 500  # examples per forward pass at evaluation
    # 1: subnormal floats read as 0 during the run (torch.set_flush_denormal). Collapsed attention fills the
    # softmax with them and runs slower on a CPU for that reason alone; flushing removes that cost and
    # changes sums in their last bits. The published runs used 0.
    flush_denormal: int = 0
    tuning: int = 0  # 1: a tuning run: its final row scores the validation split; the test split is never scored
    landmarks: int = 64  # Nystromformer landmarks (sequence tasks); sequences are padded to a multiple
    device: str = "auto"  # "auto" (CUDA when available, else CPU), "cpu" or "cuda" (one GPU per torchrun rank)
    mixup: float = 0.0  # mixup alpha (timm.data.Mixup; 0 = off), image classification
    cutmix: float = 0.0  # cutmix alpha (timm.data.Mixup; 0 = off)
    label_smoothing: float = 0.0  # of the targets, through timm.data.Mixup and SoftTargetCrossEntropy
    drop_path: float = 0.0  # stochastic depth rate of the named timm families (timm's drop_path_rate)
    precision: str = "float32"  # the training forward: "float32", or torch.amp autocast "bfloat16" / "float16"
    #                             (float16 with a gradient scaler): harness/training/precision.py
    # The recipe's parts (harness/training/recipe.py); every default is the published runs' behaviour.
    accumulate_steps: int = 1  # micro-batches of batch_size / N per optimiser step, gradients summed (1 = off)
    ema_decay: float = 0.0  # timm.utils.ModelEmaV3 decay of a weight average evaluated instead (0 = off)
    optimizer: str = "adamw"  # "adamw" (optimizer.adamw) or "timm:<name>" (timm.optim.create_optimizer_v2)
    scheduler: str = "cosine"  # "cosine" (train.learning_rate) or "timm:<name>" (timm's create_scheduler_v2, per step)
    auto_augment: str = ""  # image tasks: timm.data.create_transform's training augmentation, e.g.
    #                         "rand-m9-mstd0.5-inc1" (RandAugment); "" = the built-in flip and shift
    random_erasing: float = 0.0  # image tasks: create_transform's random-erasing probability (0 = off)
    compile: int = 0  # 1: torch.compile the model for training (evaluation and checkpoints use the same weights)
    channels_last: int = 0  # 1: the model's 4-d weights and the image batches in torch.channels_last memory format
    # A finished pre-training run directory (task mlm) whose encoder a new run starts from; "{field}" is filled
    # from this config, e.g. runs/mlm/{method}/seed-0 or runs/mlm/{method}-lam={lam:g}/seed-{seed}. "" = none.
    init_from: str = ""
    # Worker processes that read a streamed task's batches: a streamed image folder's decoded images
    # (imagefolder:DIR?stream=1) or a streamed text task's token ids (text:DIR?...&stream=1); DataLoader's
    # num_workers, harness/training/streaming.py. 0 reads in the training process. Tasks held in memory
    # have nothing to read and refuse any other value.
    num_workers: int = 0

    def __post_init__(self) -> None:
        from speccond.harness.models.registry import IMAGE_FAMILIES, MODELS  # no torch, no timm

        models = MODELS
        named = any(self.model.startswith(prefix) and len(self.model) > len(prefix) for prefix in (TIMM_PREFIX, HF_PREFIX))
        if self.model not in models and not named:
            raise ValueError(f"TrainConfig.model must be one of {models}, timm:<a registered timm model name> or "
                             f"hf:<a transformers model type>, got {self.model!r}")
        if self.model_args and not named:
            raise ValueError(f"TrainConfig.model_args sets a timm:<name> or hf:<type> model's constructor arguments; "
                             f"model {self.model!r} is sized by embed_dim, depth, num_heads and patch_size")
        if self.init_from and self.model.startswith(HF_PREFIX):
            raise ValueError("TrainConfig.init_from starts the project's BERT from a pre-trained encoder; an hf:<type> "
                             "model is trained from its config's random weights (leave init_from empty)")
        self.model_kwargs()  # a malformed model_args is refused here, before any run
        if self.drop_path and self.model not in IMAGE_FAMILIES:
            raise ValueError(f"TrainConfig.drop_path sets the stochastic depth of the named timm families {IMAGE_FAMILIES}; "
                             f"for model {self.model!r} give drop_path_rate in model_args (timm:<name>), or leave it 0")
        if self.method not in METHODS:
            raise ValueError(f"TrainConfig.method must be one of {METHODS}, got {self.method!r}")
        if not self.corrected or set(self.corrected) - set("qkv") or len(set(self.corrected)) != len(self.corrected):
            raise ValueError(f"TrainConfig.corrected names projections from 'qkv' (e.g. 'qk', 'v'), got {self.corrected!r}")
        if self.lam != AUTO and not (isinstance(self.lam, (int, float)) and not isinstance(self.lam, bool) and math.isfinite(self.lam) and self.lam >= 0):
            raise ValueError(f"TrainConfig.lam must be a finite number >= 0 or 'auto', got {self.lam!r}")
        if not (math.isfinite(self.target_kappa) and self.target_kappa > 1):
            raise ValueError(f"TrainConfig.target_kappa is the kappa bound lam='auto' aims at, a finite number > 1 "
                             f"(default 2), got {self.target_kappa}")
        if self.target_kappa != DEFAULT_TARGET_KAPPA and self.lam != AUTO:
            raise ValueError(_unread_bound(show_value(float(self.target_kappa)), show_value(float(self.lam))))
        if self.granularity not in ("head", "projection"):
            raise ValueError(f"TrainConfig.granularity must be 'head' or 'projection', got {self.granularity!r}")
        if self.attention_norm not in ("layernorm", "none"):
            raise ValueError(f"TrainConfig.attention_norm must be 'layernorm' or 'none', got {self.attention_norm!r}")
        if self.precision not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"TrainConfig.precision must be 'float32', 'bfloat16' or 'float16', got {self.precision!r}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"TrainConfig.device must be 'auto', 'cpu' or 'cuda', got {self.device!r}")
        for name in ("optimizer", "scheduler"):
            value = getattr(self, name)
            default = {"optimizer": "adamw", "scheduler": "cosine"}[name]
            if value != default and not (value.startswith(TIMM_PREFIX) and len(value) > len(TIMM_PREFIX)):
                raise ValueError(f"TrainConfig.{name} must be {default!r} or timm:<name> (e.g. timm:{default}), "
                                 f"got {value!r}")
        if not (math.isfinite(self.ema_decay) and 0 <= self.ema_decay < 1):
            raise ValueError(f"TrainConfig.ema_decay must be 0 (off) or in (0, 1), e.g. 0.9999, got {self.ema_decay}")
        if not (math.isfinite(self.random_erasing) and 0 <= self.random_erasing <= 1):
            raise ValueError(f"TrainConfig.random_erasing is a probability in [0, 1], got {self.random_erasing}")
        for name in ("flush_denormal", "tuning", "compile", "channels_last"):
            if getattr(self, name) not in (0, 1):
                raise ValueError(f"TrainConfig.{name} must be 0 or 1, got {getattr(self, name)}")
        if self.tuning and not self.val_size:
            raise ValueError("TrainConfig.tuning=1 scores the validation split, so it needs val_size > 0")
        if self.correction not in ("identity", "svd"):
            raise ValueError(f"TrainConfig.correction must be 'identity' or 'svd', got {self.correction!r}")
        for name in ("embed_dim", "depth", "num_heads", "patch_size", "epochs", "batch_size", "checkpoint_every", "landmarks",
                     "fpn_channels", "eval_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"TrainConfig.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("train_size", "val_size", "test_size", "warmup_steps", "track_every", "refresh_every", "seed",
                     "num_workers"):
            if getattr(self, name) < 0:
                raise ValueError(f"TrainConfig.{name} must be >= 0, got {getattr(self, name)}")
        for name in ("mixup", "cutmix", "label_smoothing", "drop_path"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0) or (name in ("label_smoothing", "drop_path") and value >= 1):
                raise ValueError(f"TrainConfig.{name} must be >= 0" + (" and < 1" if name in ("label_smoothing", "drop_path")
                                                                       else "") + f", got {value}")
        for name in ("lr", "weight_decay", "grad_clip"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"TrainConfig.{name} must be finite and >= 0, got {value}")
        if self.accumulate_steps < 1 or self.accumulate_steps > self.batch_size:
            raise ValueError(f"TrainConfig.accumulate_steps must be between 1 and batch_size ({self.batch_size}), "
                             f"got {self.accumulate_steps}")
        try:
            self.init_path()
        except (KeyError, IndexError, ValueError, AttributeError) as error:
            raise ValueError(f"TrainConfig.init_from may name TrainConfig fields in braces, e.g. {{method}}, {{seed}}, "
                             f"{{lam:g}}; got {self.init_from!r} ({type(error).__name__}: {error})") from None
        if self.embed_dim % self.num_heads:
            raise ValueError(f"TrainConfig.num_heads ({self.num_heads}) must divide embed_dim ({self.embed_dim})")

    def with_overrides(self, pairs: Sequence[str]) -> "TrainConfig":
        """ConfigFields.with_overrides, refusing a target_kappa given where lam is a number (it would be ignored;
        before config form 2, target_kappa=T alone asked for lam="auto")."""
        settings = [setting(pair) for pair in pairs]
        bounds = [text for key, text in settings if key == "target_kappa"]
        lams = [text for key, text in settings if key == "lam"]
        try:
            lam = field_value(NUMBER_OR_AUTO, lams[-1]) if lams else self.lam
        except ValueError:
            lam = AUTO  # not a lam at all: super() refuses it, saying what a lam reads
        if bounds and lam != AUTO:
            raise ValueError(_unread_bound(bounds[-1], show_value(float(lam))))
        return super().with_overrides(pairs)

    @classmethod
    def from_record(cls, record: dict) -> "TrainConfig":
        """The TrainConfig of a config.json object ({"config": {...}, "config_form": 2, ...}) in either form: one
        without "config_form" is form 1 and is read through :func:`form_1_upgraded`."""
        form = record.get("config_form", 1)
        if form not in (1, CONFIG_FORM):
            raise ValueError(f"config_form {form!r} is not one this speccond reads (1 or {CONFIG_FORM}); a newer "
                             "speccond wrote it: upgrade to read it")
        values = record["config"]
        return cls.from_dict(values if form == CONFIG_FORM else form_1_upgraded(values))

    def model_kwargs(self) -> dict:
        """model_args as keyword arguments: "drop_path_rate=0.1,depth=6" -> {"drop_path_rate": 0.1, "depth": 6};
        commas inside brackets belong to their value: "depths=(1,1),window_size=4" -> {"depths": (1, 1), ...}."""
        pairs = [pair.strip() for pair in _top_level_split(self.model_args) if pair.strip()]
        try:
            return parse_overrides(pairs)
        except ValueError:
            raise ValueError(f"TrainConfig.model_args takes key=value pairs joined by commas, e.g. "
                             f"'drop_path_rate=0.1,depth=6'; got {self.model_args!r}") from None

    def init_path(self) -> str:
        """``init_from`` with its ``{field}`` placeholders filled from this config."""
        return self.init_from.format(**self.to_dict())


def _unread_bound(bound: str, lam: str) -> str:
    """The refusal of a target_kappa that lam, a number, would not read (nothing given is ignored)."""
    return (f"TrainConfig.target_kappa={bound} is the kappa bound lam=auto aims at, and lam is {lam}: add lam=auto "
            f"(--set lam=auto, or an arm's spectral:lam=auto+target_kappa={bound}), or leave target_kappa out")


def folder_settings(pairs: Sequence[str], config: TrainConfig) -> list[str]:
    """``pairs`` (``key=value`` as given) as a run folder's name says them: as given, except that lam=auto is
    named by the bound it aims at, ``target_kappa=T`` (once), as the published runs' folders are
    (``spectral-target_kappa=2``). ``config`` is the config the pairs made."""
    keys = [setting(pair)[0] for pair in pairs]
    if config.lam != AUTO or "lam" not in keys:
        return list(pairs)
    bound = [] if "target_kappa" in keys else [f"target_kappa={show_value(float(config.target_kappa))}"]
    return [part for pair, key in zip(pairs, keys) for part in (bound if key == "lam" else [pair])]


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

"""timm's training augmentation of image batches: ``timm.data.create_transform(is_training=True)`` with the
DeiT recipe's settings (random resized crop, horizontal flip, RandAugment by ``auto_augment``, random
erasing by ``random_erasing``, bicubic), in place of the built-in flip and shift when either is set.

    transform = TimmAugmentation(config, size, mean, std)
    images = transform(images, seeds)    # (B, C, H, W) standardised -> (B, C, H, W) standardised, a seed per image
    image = transform.pixels(pixels, seed)   # one uint8 (3, H, W) image -> (3, H, W) standardised

The harness holds images standardised by the training subset's per-channel statistics (datasets.py);
each image goes back to uint8 pixels, through timm's PIL transforms and their Normalize with those same
statistics, so the model sees the scale it is evaluated on. Grey images pass through as RGB and come back
as their first channel. timm draws from Python's, numpy's and torch's global generators: all three are
seeded for each image with its own seed, :func:`image_seed` of (the run's seed, the step, the image's
position in the global batch), and restored after. So a resumed run draws the same, and an image draws the
same whichever process augments it: the in-memory batch here, or a worker of a streamed folder that decodes
that image alone on one rank (harness/training/streaming.py).

Pillow 10 and later refuse ``ImageOps.posterize`` with 0 bits, which timm's RandAugment asks for at the
ends of its magnitude range (e.g. magnitude 10 under "inc1", reachable with "mstd0.5"); earlier Pillow
returned a black image. :func:`_posterize` gives that black image again, so every RandAugment string
draws what timm intended instead of failing mid-run.
"""
from __future__ import annotations

import hashlib
import random

import torch

from speccond.harness.config.train_config import TrainConfig


class TimmAugmentation:
    def __init__(self, config: TrainConfig, size: int, mean: torch.Tensor, std: torch.Tensor):
        from timm.data import create_transform

        self.mean, self.std = mean.reshape(-1), std.reshape(-1)  # (C,) of pixels / 255
        rgb = lambda values: tuple(float(v) for v in (values.repeat(3) if values.numel() == 1 else values))
        try:
            self.transform = create_transform(
                input_size=size, is_training=True, auto_augment=config.data.auto_augment or None, color_jitter=0.3,
                interpolation="bicubic", re_prob=config.data.random_erasing, re_mode="pixel", re_count=1,
                mean=rgb(self.mean), std=rgb(self.std))
        except (AssertionError, ValueError, KeyError, IndexError, TypeError) as error:  # timm's parse of the string
            raise ValueError(f"TrainConfig.auto_augment={config.data.auto_augment!r} is not an augmentation timm reads "
                             f"({type(error).__name__}: {error}); give timm's form, e.g. rand-m9-mstd0.5-inc1 "
                             "(RandAugment), augmix-m5-w4-d2, or original (AutoAugment)") from None
        _allow_zero_bit_posterize(self.transform)

    def __call__(self, images: torch.Tensor, seeds: list[int]) -> torch.Tensor:
        """(B, C, H, W) standardised images, each augmented with its seed of ``seeds`` -> (B, C, H, W)."""
        channels = images.shape[1]
        pixels = (images * self.std[:, None, None] + self.mean[:, None, None]).mul(255).round().clamp(0, 255)
        pixels = pixels.to(torch.uint8).expand(-1, 3, -1, -1) if channels == 1 else pixels.to(torch.uint8)  # (B, 3, H, W)
        return torch.stack([self.pixels(image, seed) for image, seed in zip(pixels, seeds, strict=True)])[:, :channels]

    def pixels(self, image: torch.Tensor, seed: int) -> torch.Tensor:
        """One uint8 (3, H, W) image through timm's transform, every global generator seeded with ``seed``
        and restored after: (3, H, W) standardised with this transform's statistics."""
        import numpy as np
        from PIL import Image

        state, numpy_state = random.getstate(), np.random.get_state()
        random.seed(seed)
        np.random.seed(seed % 2**32)
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                return self.transform(Image.fromarray(image.permute(1, 2, 0).numpy()))
        finally:
            random.setstate(state)
            np.random.set_state(numpy_state)


def image_seed(seed: int, step: int, position: int) -> int:
    """The seed of the image at ``position`` of the global batch of ``step`` in a run seeded ``seed``: 63 bits
    of SHA-256 of the three (not a counter: seeds of neighbouring images share no structure)."""
    digest = hashlib.sha256(f"{seed},{step},{position}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def _posterize(img, bits_to_keep, **_):
    """timm's posterize, with 0 bits kept giving a black image (what Pillow < 10 returned) instead of an error."""
    from PIL import Image, ImageOps

    if bits_to_keep >= 8:
        return img
    if bits_to_keep <= 0:
        return Image.new(img.mode, img.size)
    return ImageOps.posterize(img, bits_to_keep)


def _allow_zero_bit_posterize(transform) -> None:
    """Point the posterize operations of any timm AutoAugment / RandAugment in ``transform`` at :func:`_posterize`."""
    from timm.data import auto_augment

    for step in getattr(transform, "transforms", ()):
        for op in getattr(step, "ops", ()) or [o for policy in getattr(step, "policy", ()) for o in policy]:
            if getattr(op, "aug_fn", None) is auto_augment.posterize:
                op.aug_fn = _posterize

"""What collapsed attention costs on a CPU through subnormal floats alone, with and without flushing them.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/subnormals.py --json docs/results/benchmarks/subnormals.json
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/subnormals.py --shape overhead --json ...

``--shape main`` (default): the main job's ViT (timm, D 64, depth 4, 4 heads, 7 x 7 patches of 28 x 28
images, 17 tokens). ``--shape overhead``: the ViT of benchmarks/overhead.py (D 192, depth 6, 3 heads,
4 x 4 patches of 32 x 32 RGB images, 65 tokens). Batch 128, AdamW, one thread. Two arms, both without
speccond:
- plain;
- lam = 10 by hand: W + 10 I added to each q, k, v block of every qkv weight. This is the function of the
  paper's default, whose attention is nearly one-hot, so its softmax is full of subnormal floats.

Training steps (zero_grad, forward, cross-entropy, backward, AdamW step) are timed paired and
interleaved, first with subnormals kept (torch's default), then flushed to zero
(torch.set_flush_denormal(True), what `flush_denormal=1` does in a run). The output is the median paired
ratio lam = 10 / plain with its interquartile range for each setting, and the share of subnormal entries
in the attention probabilities of the lam = 10 arm.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F


SHAPES = {  # timm VisionTransformer arguments; the image is (in_chans, img_size, img_size)
    "main": dict(img_size=28, patch_size=7, in_chans=1, embed_dim=64, depth=4, num_heads=4),
    "overhead": dict(img_size=32, patch_size=4, in_chans=3, embed_dim=192, depth=6, num_heads=3),
}


def build(lam: float, shape: str = "main") -> torch.nn.Module:
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    model = VisionTransformer(num_classes=10, drop_path_rate=0.0, **SHAPES[shape])
    if lam:
        with torch.no_grad():
            for block in model.blocks:
                weight = block.attn.qkv.weight  # (3D, D)
                width = weight.shape[1]
                for start in range(0, weight.shape[0], width):  # the q, k and v blocks
                    weight[start : start + width] += lam * torch.eye(width)
    return model


def subnormal_share(model: torch.nn.Module, images: torch.Tensor) -> float:
    """Share of the attention probabilities that are subnormal float32 numbers (0 < p < 1.18e-38)."""
    found = []

    def record(module, inputs, _output):
        x = inputs[0]
        b, n, c = x.shape
        q, k, _ = module.qkv(x).reshape(b, n, 3, module.num_heads, c // module.num_heads).permute(2, 0, 3, 1, 4)
        found.append(((q @ k.transpose(-2, -1)) * module.scale).softmax(-1))

    hooks = [block.attn.register_forward_hook(record) for block in model.blocks]
    with torch.no_grad():
        model(images)
    for hook in hooks:
        hook.remove()
    probabilities = torch.cat([p.flatten() for p in found])
    tiny = torch.finfo(torch.float32).tiny
    return float(((probabilities > 0) & (probabilities < tiny)).float().mean())


def images_of(shape: str, batch: int, generator: torch.Generator) -> torch.Tensor:
    size, channels = SHAPES[shape]["img_size"], SHAPES[shape]["in_chans"]
    return torch.randn(batch, channels, size, size, generator=generator)  # (B, C, H, W)


def paired_ratios(steps: int, batch: int, shape: str = "main") -> list[float]:
    arms = {name: build(lam, shape) for name, lam in (("plain", 0.0), ("lam10", 10.0))}
    optimisers = {name: torch.optim.AdamW(model.parameters(), lr=1e-3) for name, model in arms.items()}
    generator = torch.Generator().manual_seed(1)
    images = images_of(shape, batch, generator)
    labels = torch.randint(0, 10, (batch,), generator=generator)
    ratios = []
    for step in range(steps + 2):  # 2 untimed warm-up rounds
        order = list(arms) if step % 2 == 0 else list(reversed(arms))
        seconds = {}
        for name in order:
            model, optimiser = arms[name], optimisers[name]
            started = time.perf_counter()
            optimiser.zero_grad(set_to_none=True)
            F.cross_entropy(model(images), labels).backward()
            optimiser.step()
            seconds[name] = time.perf_counter() - started
        if step >= 2:
            ratios.append(seconds["lam10"] / seconds["plain"])
    return ratios


def summary(ratios: list[float]) -> dict:
    quartiles = statistics.quantiles(ratios, n=4)
    return {"median": statistics.median(ratios), "iqr": [quartiles[0], quartiles[2]], "steps": len(ratios)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="main")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    images = images_of(args.shape, args.batch, torch.Generator().manual_seed(2))
    results = {"threads": 1, "shape": args.shape, "model": SHAPES[args.shape], "load_before": round(os.getloadavg()[0], 2),
               "subnormal_share_lam10": subnormal_share(build(10.0, args.shape), images)}
    torch.set_flush_denormal(False)
    results["kept"] = summary(paired_ratios(args.steps, args.batch, args.shape))
    torch.set_flush_denormal(True)
    results["flushed"] = summary(paired_ratios(args.steps, args.batch, args.shape))
    torch.set_flush_denormal(False)
    results["load_after"] = round(os.getloadavg()[0], 2)
    for setting in ("kept", "flushed"):
        r = results[setting]
        print(f"subnormals {setting:8s} lam = 10 / plain training step: {r['median']:.3f} "
              f"[IQR {r['iqr'][0]:.3f}, {r['iqr'][1]:.3f}] over {r['steps']} paired steps")
    print(f"share of subnormal attention probabilities at lam = 10 (initial weights): {results['subnormal_share_lam10']:.3%}")
    print(f"load average: {results['load_before']} before, {results['load_after']} after")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()

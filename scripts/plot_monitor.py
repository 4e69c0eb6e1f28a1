"""The README's picture of speccond.monitor: a real run's CSV plotted (docs/images/monitor_csv.png).

Trains a small timm ViT (8 x 8 digits, patch 2, depth 4, width 64, 4 heads) on scikit-learn's handwritten
digits (speccond.data.digits' source, 1797 images) for 60 AdamW steps at batch 32, three times: plain,
``correction="svd"`` and ``lam=10``, each with ``Monitor(model, writer="<out>/<arm>.csv", every=4)``, then
plots speccond/kappa/mean and speccond/entropy/mean read back from the CSVs (read_csv_metrics).

    PYTHONPATH=src .venv/bin/python scripts/plot_monitor.py --out runs/monitor-plot   # about 1 minute on a quiet machine
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F

import speccond
from speccond.monitor import Monitor, read_csv_metrics

ARMS = {"plain": None, "svd": dict(correction="svd"), "lam = 10": dict(lam=10.0)}
IMAGE = Path(__file__).resolve().parents[1] / "docs" / "images" / "monitor_csv.png"


def digits() -> tuple[torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    data = load_digits()
    images = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16.0  # (N, 1, 8, 8) in [0, 1]
    return (images - 0.5) / 0.5, torch.tensor(data.target)


def run(arm: str, out: Path, steps: int) -> Path:
    import timm

    torch.manual_seed(0)
    model = timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, img_size=8, patch_size=2, in_chans=1, depth=4,
        embed_dim=64, num_heads=4, num_classes=10,
    )
    if ARMS[arm] is not None:
        speccond.apply(model, speccond.SpectralConfig(**ARMS[arm]))
    images, labels = digits()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    path = out / f"{arm.replace(' ', '').replace('=', '')}.csv"
    path.unlink(missing_ok=True)
    monitor = Monitor(model, writer=path, every=4)
    generator = torch.Generator().manual_seed(0)
    for step in range(steps):
        batch = torch.randint(0, len(labels), (32,), generator=generator)
        with monitor.step(step):
            loss = F.cross_entropy(model(images[batch]), labels[batch])
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/monitor-plot"))
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (kappa_axis, entropy_axis) = plt.subplots(1, 2, figsize=(9, 3.2))
    for arm in ARMS:
        metrics = read_csv_metrics(run(arm, args.out, args.steps))
        for axis, name in ((kappa_axis, "speccond/kappa/mean"), (entropy_axis, "speccond/entropy/mean")):
            steps, values = zip(*metrics[name])
            axis.plot(steps, values, label=arm)
    kappa_axis.set(title="speccond/kappa/mean (per head, W + C)", xlabel="step", yscale="log")
    entropy_axis.set(title="speccond/entropy/mean (nats)", xlabel="step")
    entropy_axis.axhline(torch.tensor(17.0).log().item(), color="grey", linestyle="--", linewidth=0.8)  # log N, 17 tokens
    kappa_axis.legend()
    figure.tight_layout()
    IMAGE.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(IMAGE, dpi=110)
    print(f"wrote {IMAGE}")


if __name__ == "__main__":
    main()

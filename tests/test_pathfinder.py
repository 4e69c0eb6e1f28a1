"""Pathfinder: generated images whose labels agree with the drawn paths, balanced, deterministic, with no
global statistic that tells the label, prepared and checksummed like any dataset."""
from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from speccond import data
from speccond.data import pathfinder
from speccond.data.pathfinder import PathfinderConfig, generate
from speccond.data.store import arrays_sha256


@pytest.fixture(scope="module")
def sample() -> pathfinder.Pathfinder:
    torch.set_num_threads(1)  # the conftest's setting, which module fixtures come before
    return generate(2000, "tests")


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> dict[str, torch.Tensor]:
    """pathfinder-small, prepared in a fresh data dir."""
    torch.set_num_threads(1)
    home = tmp_path_factory.mktemp("data")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECCOND_DATA", str(home))
        path = data.prepare("pathfinder-small")
        assert path == home / "pathfinder-small" / "arrays.safetensors"
        assert data.prepare("pathfinder-small") == path  # idempotent: the cache is reused
        return data.load("pathfinder-small")


def _dilate(mask: torch.Tensor, radius: int) -> torch.Tensor:
    """``mask`` (N, H, W) bool grown by ``radius`` pixels (Chebyshev), by shifted ors along each axis."""
    for dim in (1, 2):
        grown = mask.clone()
        for shift in range(1, radius + 1):
            size = mask.shape[dim] - shift
            grown.narrow(dim, shift, size).logical_or_(mask.narrow(dim, 0, size))
            grown.narrow(dim, 0, size).logical_or_(mask.narrow(dim, shift, size))
        mask = grown
    return mask


def _spread(reached: torch.Tensor, within: torch.Tensor, radius: int) -> torch.Tensor:
    """Flood fill: the pixels of ``within`` (N, H, W) bool linked to ``reached`` by steps of at most
    ``radius`` pixels (Chebyshev) through ``within``."""
    reached = reached & within
    while True:
        grown = _dilate(reached, radius) & within
        if torch.equal(grown, reached):
            return reached
        reached = grown


def test_the_dots_are_the_only_3x3_squares_of_ink(sample):
    ink = sample.images[:, 0] > 0  # (N, 32, 32)
    squares = -F.max_pool2d(-ink.float().unsqueeze(1), 3, 1, 0).squeeze(1)  # (N, 30, 30): 1 where a 3 x 3 is all ink
    found = squares.nonzero()  # (M, 3): image, row - 1, col - 1 of each square's centre
    assert found.shape[0] == 2 * len(sample.labels)
    centres = found[:, 1:].view(-1, 2, 2) + 1  # (N, 2, 2), row-major order
    expected = torch.sort(sample.dots[..., 0] * 32 + sample.dots[..., 1], dim=1).values
    assert torch.equal(centres[..., 0] * 32 + centres[..., 1], expected)


def test_labels_agree_with_the_paths_the_dots_are_on(sample):
    ids = sample.path_ids.long()  # (N, 32, 32)
    assert torch.equal(sample.images[:, 0] > 0, ids > 0)  # every ink pixel is on exactly one path
    present = torch.zeros(len(ids), 8, dtype=torch.long).scatter_add_(1, ids.flatten(1), torch.ones(len(ids), 1024).long())
    assert bool((present > 0).all())  # 2 target paths and 5 distractors in every image
    for dy, dx in ((0, 1), (1, 0), (1, 1), (1, -1)):  # different paths never touch, not even diagonally
        a = ids[:, : 32 - dy, max(0, -dx) : 32 - max(0, dx)]
        b = ids[:, dy:, max(0, dx) : 32 - max(0, -dx)]
        assert not bool(((a > 0) & (b > 0) & (a != b)).any())
    index = torch.arange(len(ids))
    on = ids[index.unsqueeze(1), sample.dots[..., 0], sample.dots[..., 1]]  # (N, 2) the path under each dot
    assert bool(((on == 1) | (on == 2)).all())  # the dots are on the target paths
    assert torch.equal(sample.labels, (on[:, 0] == on[:, 1]).long())
    # Independently, on the first 400 images: fill from the first dot along its path (its dashes are at
    # most 2 pixels apart); the second dot is reached exactly when the label says connected.
    n, dots = 400, sample.dots[:400]
    seed = torch.zeros(n, 32, 32, dtype=torch.bool)
    seed[index[:n], dots[:, 0, 0], dots[:, 0, 1]] = True
    reached = _spread(seed, ids[:n] == on[:n, :1, None], radius=2)
    assert torch.equal(reached[index[:n], dots[:, 1, 0], dots[:, 1, 1]].long(), sample.labels[:n])
    # And every path is one chain under that linking: filled from its first pixel, it is all reached.
    masks = (ids[:n].unsqueeze(1) == torch.arange(1, 8).view(1, 7, 1, 1)).flatten(0, 1)  # (n * 7, 32, 32)
    start = torch.zeros_like(masks)
    start.view(n * 7, -1)[torch.arange(n * 7), masks.flatten(1).float().argmax(1)] = True
    assert torch.equal(_spread(start, masks, radius=2), masks)


def test_labels_are_balanced_in_every_even_prefix(sample):
    counts = torch.cumsum(sample.labels, 0)[1::2]  # ones among the first 2, 4, 6, ...
    assert torch.equal(counts, torch.arange(1, len(sample.labels) // 2 + 1))
    assert data.spec("pathfinder").classes == ("disconnected", "connected")


def test_generation_is_deterministic_and_the_seed_matters():
    first, again, other = generate(16, "a"), generate(16, "a"), generate(16, 7)  # int seeds too
    assert all(torch.equal(x, y) for x, y in zip(first, again))
    assert not torch.equal(first.images, other.images)


def _global_statistics(images: torch.Tensor) -> torch.Tensor:
    """(N, F) float64: pixel statistics of uint8 (N, 1, 32, 32) images that ignore where the paths go."""
    x = images[:, 0].float() / 255  # (N, 32, 32)
    ink = x.sum((1, 2))  # (N,)
    where = torch.arange(32, dtype=torch.float32)
    row_mass, col_mass = x.sum(2) / ink[:, None], x.sum(1) / ink[:, None]  # (N, 32)
    row_mean, col_mean = (row_mass * where).sum(1), (col_mass * where).sum(1)
    row_std = ((row_mass * (where - row_mean[:, None]) ** 2).sum(1)).sqrt()
    col_std = ((col_mass * (where - col_mean[:, None]) ** 2).sum(1)).sqrt()
    quadrants = x.view(-1, 2, 16, 2, 16).sum((2, 4)).flatten(1) / ink[:, None]  # (N, 4)
    neighbours = F.conv2d(x.unsqueeze(1), torch.ones(1, 1, 3, 3, dtype=x.dtype), padding=1).squeeze(1) - x
    crowded = ((neighbours >= 3) & (x > 0)).float().sum((1, 2))  # ink pixels with 3 or more ink neighbours
    border = ink - x[:, 3:-3, 3:-3].sum((1, 2))
    stats = [ink, x.mean((1, 2)), row_mean, col_mean, row_std, col_std, crowded, border, *quadrants.T]
    return torch.stack(stats, dim=1).double()


def _logistic_accuracy(train_x, train_y, test_x, test_y) -> float:
    """Test accuracy of a logistic regression fitted by Newton's method (ridge 1e-6) on standardised features."""
    mean, std = train_x.mean(0), train_x.std(0).clamp_min(1e-9)
    a = torch.cat([(train_x - mean) / std, torch.ones(len(train_x), 1, dtype=train_x.dtype)], dim=1)  # (N, F + 1)
    b = torch.cat([(test_x - mean) / std, torch.ones(len(test_x), 1, dtype=test_x.dtype)], dim=1)
    w = torch.zeros(a.shape[1], dtype=a.dtype)
    for _ in range(25):
        p = torch.sigmoid(a @ w)
        hessian = (a * (p * (1 - p)).unsqueeze(1)).T @ a + 1e-6 * torch.eye(a.shape[1], dtype=a.dtype)
        w = w + torch.linalg.solve(hessian, a.T @ (train_y.double() - p))
    return float(((b @ w > 0).long() == test_y).double().mean())


def test_no_global_pixel_statistic_tells_the_label(small):
    train, labels = small["train_images"], small["train_labels"]
    ink = (train[:, 0] > 0).flatten(1).sum(1)  # (N,) ink pixels
    intensity = train.double().mean((1, 2, 3))  # (N,) mean pixel intensity
    for value in (ink.double(), intensity):
        a, b = value[labels == 0], value[labels == 1]
        assert abs(float(a.mean() - b.mean())) < 0.05 * float(value.std())
    grid = torch.arange(int(ink.min()), int(ink.max()) + 1)
    cdf = [(ink[labels == c].unsqueeze(1) <= grid).double().mean(0) for c in (0, 1)]
    assert float((cdf[0] - cdf[1]).abs().max()) < 0.04  # Kolmogorov-Smirnov; same distribution: p > 0.002
    accuracy = _logistic_accuracy(
        _global_statistics(train), labels, _global_statistics(small["test_images"]), small["test_labels"]
    )
    assert abs(accuracy - 0.5) < 0.03, accuracy


def test_the_one_cue_left_as_in_lra_the_dot_distance_is_weak(sample):
    distance = (sample.dots[:, 0] - sample.dots[:, 1]).double().norm(dim=1)  # (N,)
    ranks = torch.empty_like(distance)
    ranks[torch.argsort(distance)] = torch.arange(1, len(distance) + 1, dtype=distance.dtype)
    ones = int(sample.labels.sum())
    auc = (float(ranks[sample.labels == 1].sum()) - ones * (ones + 1) / 2) / (ones * (len(distance) - ones))
    assert 0.45 < auc < 0.57, auc  # about 0.53: a "connected" pair is a little farther apart


def test_prepare_gives_the_documented_arrays(small):
    spec = data.spec("pathfinder-small")
    assert arrays_sha256(small) == spec.generated_sha256
    assert spec.image_shape == (1, 32, 32) and spec.format_version == 1 and spec.files == {}
    for split, count in {"train": 8000, "val": 1000, "test": 2000}.items():
        images, labels = small[f"{split}_images"], small[f"{split}_labels"]
        assert images.shape == (count, 1, 32, 32) and images.dtype == torch.uint8
        assert labels.shape == (count,) and labels.dtype == torch.int64
        assert int(labels.sum()) == count // 2
        assert set(torch.unique(images).tolist()) == {0, 255}
    train = {bytes(image.numpy()) for image in small["train_images"]}
    assert not any(bytes(image.numpy()) in train for image in small["test_images"])  # the splits are disjoint
    assert pathfinder.SIZES == {"train": 160_000, "val": 20_000, "test": 20_000}  # LRA's 80 / 10 / 10 of 200k
    assert len(data.spec("pathfinder").generated_sha256) == 64


def test_a_drifted_generator_is_refused_and_nothing_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCOND_DATA", str(tmp_path))
    spec = data.spec("pathfinder-small")
    drifted = dataclasses.replace(spec, parse=pathfinder._parser({"train": 4}))  # generates other arrays
    monkeypatch.setitem(data.DATASETS, "pathfinder-small", drifted)
    expected = rf"pathfinder-small.*SHA-256 [0-9a-f]{{64}}, expected {spec.generated_sha256}.*nothing was cached"
    with pytest.raises(ValueError, match=expected):
        data.prepare("pathfinder-small")
    assert not (tmp_path / "pathfinder-small" / "arrays.safetensors").exists()


def test_bad_settings_say_what_to_do():
    with pytest.raises(ValueError, match="clearance must be an int >= 2"):
        PathfinderConfig(clearance=1)
    with pytest.raises(ValueError, match="directions must be a multiple of 4"):
        PathfinderConfig(directions=30)
    with pytest.raises(ValueError, match="count must be an int >= 0, got -1"):
        generate(-1, "x")
    with pytest.raises(ValueError, match="too crowded.*use fewer or shorter paths"):
        generate(2, "x", PathfinderConfig(size=10, target_dashes=14, retries=1))

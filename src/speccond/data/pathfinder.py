"""Pathfinder-32 (Linsley et al. 2018; Long Range Arena, Tay et al. 2021), generated: ``pathfinder(-small)``.

Each image (1 x 32 x 32, uint8) shows two dots, two *target* paths and five *distractor* paths; a path is
a chain of dashes (short line segments with gaps). The first dot sits on the start of one target path;
the second on the end of the same path (label 1, "connected") or of the other one (label 0,
"disconnected"). All geometry is drawn before, and independently of, the label: the two classes differ
only in which path end carries the second dot, so every image has 7 paths, 48 dashes and 2 dots, and no
count of dots, dashes or ink tells the label (tests/test_pathfinder.py checks this).

A path grows dash by dash, as in Linsley's generator (``two_snakes``, ``extend_snake``,
``get_coords_cmf``): a dash of ``dash_length`` pixels starts ``margin`` past a pivot and runs along the
path's heading; the next pivot is ``dash_length + 2 * margin`` further on, so the gap between dashes is
about ``2 * margin``; each new dash turns by an angle a drawn with weight cos(continuity * a)^2 (turns of
90 degrees or more never, at continuity 1) among the turns that keep the dash inside the padding and
``clearance`` away from all ink but the path's own previous dash.

Settings, and where they come from: LRA's Pathfinder32 builder (google-research/long-range-arena,
``lra_benchmarks/data/pathfinder.py``, whose docstring lists the arguments it gave
github.com/drewlinsley/pathfinder's generator) and LRA's reported task ``pathfinder32_hard``
(``curv_contour_length_14``, split 80 / 10 / 10 by ``lra_benchmarks/image/input_pipeline.py``):

    here                            LRA Pathfinder-32
    size 32                         window_size [32, 32]
    target_dashes 14                contour_length 14 (the "hard" split that LRA reports)
    distractors 5 of 4 dashes       num_distractor_snakes 20 // 4 of distractor_length 14 // 3
    dash_length 2, margin 1         paddle_length 2, paddle_margin_list [1] (pivot step 2 + 2 * 1)
    seed_distance 7                 seed_distance 7
    continuity 1.0                  continuity 1.0 (weight cos(min(continuity * a, 90 deg))^2)
    padding 1                       padding 1
    dots 3 x 3 pixels               marker_radius 1.5
    directions 24 (15 degrees)      the pixels on a circle of radius 3 around the pivot (about 19)
    train / val / test 160k/20k/20k 200k images per difficulty, split 80 / 10 / 10

Simplified, on purpose (each keeps the task, and makes generation fast and exact):

- Paths are drawn one after another (first target, second target starting ``seed_distance`` from the
  first one's start, then the distractors); a path that runs into a dead end is taken out and redrawn
  from a fresh start, up to ``retries`` times. Linsley grows the two targets in turn and redraws the
  whole image, and keeps images with missing distractors; here every image has all 7 paths.
- A dash is also refused when the pivot of the next dash would fall outside or next to ink (a one-step
  lookahead), which avoids most dead ends; the last dash of a path has no such constraint.
- Clearance: ink of different paths (and dots) is at Chebyshev distance 2 or more, so at least one
  background pixel apart, never touching, as with Linsley's 1 pixel margin. The path masks
  (``generate(...).path_ids``) make connectivity exact.
- Rendering is binary: a dash's pixels are those its points 1 pixel apart fall in (so 2 or 3 pixels,
  8-connected), dots are 3 x 3 squares, all ink is 255 (LRA anti-aliases at 2x and scales contrast).

One cue is left, as in LRA: the two dots of a "connected" image are the two ends of one path, those of
a "disconnected" one the start of one and the end of the other, so their distances differ slightly
(measured in tests/test_pathfinder.py). Pixel counts and intensities do not differ.

Determinism: random bits come from CPython's ``random.Random(str)`` (MT19937, the same stream on every
platform), drawn as whole 32-bit words; all geometry is integer arithmetic (pivots in quarter pixels,
directions rounded to 1/2048), so the images are bit-identical on any machine and torch version; only
the two small tables (directions, turn weights) use libm's sin and cos, rounded to coarse integer grids.
``generated_sha256`` catches any drift. Each split is generated from its own seed (its name); batches
are sized to the images still wanted, so ``generate(n, seed)`` depends on n (``pathfinder-small``'s
splits are not prefixes of ``pathfinder``'s).

Speed (one thread, this machine, torch 2.14.1): 2,000 to 2,500 images per CPU second, generation being
batched tensor work on thousands of images at once. ``pathfinder-small`` (11k images) takes 6 s of CPU,
``pathfinder`` (200k) 80 to 95 s (2 to 3 minutes of wall time while training jobs held both cores).

    classes: 0 "disconnected", 1 "connected"

Stored: {train,val,test}_images uint8 (N, 1, 32, 32), 0 background, 255 ink; {train,val,test}_labels
int64 (N,), exactly half of each split 1. ``docs/images/pathfinder_samples.png`` shows
``generate(24, "samples")``.
"""
from __future__ import annotations

import logging
import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch

from speccond.data.store import DatasetSpec

log = logging.getLogger(__name__)

CLASSES = ("disconnected", "connected")
# Images attempted per batch: 1.15 x those still wanted (most images succeed), at least 64, at most
# ATTEMPTS. This schedule is part of the definition of the data: changing it changes every image.
ATTEMPTS = 8192


@dataclass(frozen=True)
class PathfinderConfig:
    """Geometry of the images; the defaults are LRA's Pathfinder-32 settings (module docstring)."""

    size: int = 32  # image side in pixels
    target_dashes: int = 14  # dashes on each of the two target paths
    distractors: int = 5  # distractor paths
    distractor_dashes: int = 4  # dashes on each distractor path
    dash_length: int = 2  # length of a dash, pixels
    margin: int = 1  # the gap between consecutive dashes is about 2 * margin, pixels
    seed_distance: int = 7  # distance between the start points of the two target paths, pixels
    continuity: float = 1.0  # a turn by angle a has weight cos(continuity * a)^2, zero at and past 90 degrees
    clearance: int = 2  # least Chebyshev distance between ink of different paths, pixels (2: never touching)
    padding: int = 1  # no dash pixel this close to the edge (the 3 x 3 dots need at least 1)
    directions: int = 24  # orientations a dash can take, equally spaced (15 degrees apart)
    proposals: int = 16  # start points tried for a path; the first that keeps clear is drawn
    retries: int = 16  # fresh starts for a path that runs into a dead end, before the image is dropped

    def __post_init__(self) -> None:
        positive = (
            "size", "target_dashes", "distractor_dashes", "dash_length", "margin", "seed_distance", "padding",
            "proposals", "retries",
        )
        for name in positive:
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"PathfinderConfig.{name} must be a positive int, got {getattr(self, name)!r}")
        if not isinstance(self.distractors, int) or self.distractors < 0:
            raise ValueError(f"PathfinderConfig.distractors must be an int >= 0, got {self.distractors!r}")
        if not isinstance(self.directions, int) or self.directions < 8 or self.directions % 4:
            raise ValueError(f"PathfinderConfig.directions must be a multiple of 4, >= 8, got {self.directions!r}")
        if not self.continuity > 0:
            raise ValueError(f"PathfinderConfig.continuity must be > 0, got {self.continuity!r}")
        if not isinstance(self.clearance, int) or self.clearance < 2:
            raise ValueError(f"PathfinderConfig.clearance must be an int >= 2 (paths never touch), got {self.clearance!r}")
        if self.size < 2 * self.padding + 8:
            raise ValueError(
                f"PathfinderConfig.size={self.size} leaves no room inside padding={self.padding}; "
                f"use size >= {2 * self.padding + 8}"
            )


class Pathfinder(NamedTuple):
    images: torch.Tensor  # uint8 (N, 1, S, S): 0 background, 255 ink (dashes and dots)
    labels: torch.Tensor  # int64 (N,): 1 when both dots are on one path
    path_ids: torch.Tensor  # int8 (N, S, S): 0 background, 1 and 2 the target paths, 3.. the distractors
    dots: torch.Tensor  # int64 (N, 2, 2): (row, col) of the centre pixel of each dot


def generate(count: int, seed: str | int, config: PathfinderConfig = PathfinderConfig()) -> Pathfinder:
    """``count`` images from ``seed`` (any str or int), exactly half (rounded down) labelled 1; the same
    images for the same (count, seed, config) on every machine."""
    if not isinstance(count, int) or count < 0:
        raise ValueError(f"count must be an int >= 0, got {count!r}")
    geometry = _Bits(f"pathfinder:{seed}:geometry")
    tables = _Tables(config)
    none = torch.zeros(0, 2, 2, dtype=torch.long)
    empty = (torch.zeros(0, config.size, config.size, dtype=torch.int8), none, none)
    parts, made, attempts = [empty], 0, 0
    while made < count:
        batch = min(max(64, math.ceil(1.15 * (count - made))), ATTEMPTS)
        part = _attempt(geometry, tables, config, batch)
        parts.append(part)
        made += part[0].shape[0]
        attempts += batch
        if made == 0 and attempts >= 4096:
            raise ValueError(
                f"{config} is too crowded: none of {attempts} attempts placed all {2 + config.distractors} paths; "
                f"use fewer or shorter paths, a smaller clearance or a larger size"
            )
    log.info("pathfinder %s: %d images from %d attempts", seed, count, attempts)
    ids, starts, ends = (torch.cat([part[i] for part in parts])[:count] for i in range(3))
    # Labels in pairs (one of each per pair, order drawn), so every even prefix is balanced.
    words = _Bits(f"pathfinder:{seed}:labels").words(count + count % 2)
    index = torch.arange(count)
    first = words[:count] & 1  # (N,) which target path carries the first dot, at its start
    labels = ((words[index - index % 2] >> 1) & 1) ^ (index % 2)  # (N,)
    second = torch.where(labels == 1, first, 1 - first)  # (N,) the path whose end carries the second dot
    dots = torch.stack([starts[index, first], ends[index, second]], dim=1)  # (N, 2, 2) (row, col)
    for which, path in ((0, first), (1, second)):
        for dr in (-1, 0, 1):
            for dc in (-1, 0, 1):
                rows, cols = dots[:, which, 0] + dr, dots[:, which, 1] + dc
                under = ids[index, rows, cols]
                assert bool(((under == 0) | (under == path + 1)).all()), "a dot covers another path"
                ids[index, rows, cols] = (path + 1).to(torch.int8)
    images = (ids > 0).to(torch.uint8).mul(255).unsqueeze(1)  # (N, 1, S, S)
    return Pathfinder(images, labels, ids, dots)


class _Bits:
    """Uniform 32-bit words from CPython's MT19937 (``random.Random(seed)``): the same stream everywhere."""

    def __init__(self, seed: str) -> None:
        self._rng = random.Random(seed)

    def words(self, *shape: int) -> torch.Tensor:
        """int64 in [0, 2^32), of ``shape``."""
        n = math.prod(shape)
        if n == 0:
            return torch.zeros(shape, dtype=torch.long)
        raw = bytearray(self._rng.getrandbits(32 * n).to_bytes(4 * n, "little"))  # word i = bytes 4i .. 4i + 3
        if sys.byteorder == "little":
            return (torch.frombuffer(raw, dtype=torch.int32).long() & 0xFFFFFFFF).view(shape)
        b = torch.frombuffer(raw, dtype=torch.uint8).view(n, 4).long()  # pragma: no cover - big-endian machines
        return (b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16) | (b[:, 3] << 24)).view(shape)

    def below(self, bound: int, *shape: int) -> torch.Tensor:
        """int64 uniform in [0, bound) (multiply-shift; exact for bound < 2^31)."""
        return (self.words(*shape) * bound) >> 32


class _Tables:
    """Integer lookup tables for one config (small; built per call).

    A pivot is kept in quarter pixels (q); a dash from a pivot with heading h covers the pixels that its
    points 1 pixel apart (margin to margin + dash_length from the pivot) fall in. Those pixels, relative
    to the pivot's pixel, depend only on h and the pivot's quarter-pixel fraction, so they are tabled, as
    flat offsets into the padded (side x side) maps."""

    def __init__(self, c: PathfinderConfig) -> None:
        D = c.directions
        # Border of the working maps: a dash (to margin + dash_length), its dot and their halo, or the next
        # pivot, from any pivot inside the image stay in them.
        self.pad = max(c.dash_length + 2 * c.margin, c.margin + c.dash_length + 1 + c.clearance - 1)
        self.side = c.size + 2 * self.pad
        angles = [math.tau * j / D for j in range(D)]
        # Unit direction vectors in 1/2048 (dy, dx); everything below is integer arithmetic on these.
        unit = [(round(math.sin(a) * 2048), round(math.cos(a) * 2048)) for a in angles]
        turns = [k for k in range(-D // 4, D // 4 + 1) if abs(c.continuity * k * 360 / D) < 90]
        self.turns = torch.tensor(turns)  # (T,) in direction steps
        weights = [math.cos(math.radians(c.continuity * k * 360 / D)) ** 2 for k in turns]
        self.weights = torch.tensor([round(w * 65536) for w in weights])  # (T,) integers, so draws are exact

        def quarter(length: int, d: tuple[int, int]) -> tuple[int, int]:  # length * d in quarter pixels, rounded
            return ((4 * length * d[0] + 1024) // 2048, (4 * length * d[1] + 1024) // 2048)

        self.step = torch.tensor([quarter(c.dash_length + 2 * c.margin, d) for d in unit])  # (D, 2) pivot to next pivot
        self.seed = torch.tensor([quarter(c.seed_distance, d) for d in unit])  # (D, 2)
        self.back = torch.tensor([quarter(c.margin, d) for d in unit])  # (D, 2) a start pixel to its pivot, negated
        offsets = []  # (D * 16, L + 2): the dash's pixels, then the next pivot's pixel, as flat offsets
        for h, d in enumerate(unit):
            for fy in range(4):
                for fx in range(4):
                    row = []
                    for along in range(c.margin, c.margin + c.dash_length + 1):  # pixels from the pivot
                        row.append(((fy * 512 + along * d[0]) // 2048, (fx * 512 + along * d[1]) // 2048))
                    step = self.step[h].tolist()
                    row.append(((fy + step[0]) // 4, (fx + step[1]) // 4))
                    offsets.append([dy * self.side + dx for dy, dx in row])
        self.offsets = torch.tensor(offsets)
        reach = c.clearance - 1
        near = range(-reach, reach + 1)
        self.halo = torch.tensor([dr * self.side + dc for dr in near for dc in near])  # within clearance - 1
        self.block = torch.tensor([dr * self.side + dc for dr in (-1, 0, 1) for dc in (-1, 0, 1)])  # a dot's 3 x 3
        inside = torch.zeros(self.side, self.side, dtype=torch.bool)
        low, high = self.pad + c.padding, self.pad + c.size - c.padding
        inside[low:high, low:high] = True
        self.outside = ~inside.view(-1)  # (side^2,) where no dash pixel may go
        self.low, self.high = 0, 4 * c.size - 1  # pivots (of dead rows) are clamped into the image

    def candidates(self, pivots: torch.Tensor, headings: torch.Tensor) -> torch.Tensor:
        """Flat map index (R, K, P + 1) of the dash pixels and next pivot, for headings (R, K) from pivots
        (R, K, 2) or, shared by all K, (R, 2), in quarter pixels."""
        q = pivots.clamp(self.low, self.high)
        base = ((q[..., 0] >> 2) + self.pad) * self.side + (q[..., 1] >> 2) + self.pad  # (R, K) or (R,)
        fraction = (q[..., 0] & 3) * 4 + (q[..., 1] & 3)
        if pivots.dim() == 2:
            base, fraction = base.unsqueeze(1), fraction.unsqueeze(1)
        index = headings * 16 + fraction  # (R, K)
        return base.unsqueeze(-1) + self.offsets.index_select(0, index.view(-1)).view(*index.shape, -1)


class _Choice(NamedTuple):
    ok: torch.Tensor  # bool (R,): a proposal kept clear
    dash: torch.Tensor  # (R, P) flat map index of the dash's pixels
    cover: torch.Tensor  # (R, Q) those and, for a path end, its dot's 3 x 3
    pivot: torch.Tensor  # (R, 2) the next pivot, quarter pixels
    heading: torch.Tensor  # (R,)


def _choose(
    bits: _Bits, t: _Tables, pivots: torch.Tensor, headings: torch.Tensor, near: torch.Tensor, base: torch.Tensor,
    dot: int | None, weights: torch.Tensor | None, lookahead: bool,
) -> _Choice:
    """One dash per image among K proposals (headings (R, K) from pivots (R, K, 2) or (R, 2), in quarter
    pixels) that stay inside the padding and off ``near`` (the flat halo counts of all images; image r's
    map starts at ``base[r]``): the first such, or one drawn in proportion to ``weights`` (K,). With
    ``lookahead``, a proposal whose next pivot is outside or near ink is refused too, which avoids most
    dead ends (Linsley's generator runs into them and redraws the image). With ``dot`` (0: the dash's
    first pixel, -1: its last), the 3 x 3 dot there must be clear too."""
    R, K = headings.shape
    flat = t.candidates(pivots, headings)  # (R, K, P + 1)
    dash = flat[..., :-1]  # (R, K, P)
    check = flat if lookahead else dash
    bad = t.outside.index_select(0, check.reshape(-1)).view(R, K, -1).any(-1)  # (R, K)
    if dot is not None:
        check = torch.cat([check, dash[..., dot, None] + t.block], dim=-1)
    counts = near.index_select(0, (check + base.view(R, 1, 1)).view(-1)).view(R, K, -1)  # (R, K, Q) uint8
    bad |= counts.any(-1).bool()  # (any() of uint8 is uint8)
    if weights is None:
        pick = (~bad).to(torch.uint8).argmax(1)  # (R,) the first clear proposal
    else:  # drawn among the clear ones in proportion to their (integer) weights: exact
        cumulative = torch.where(bad, 0, weights).cumsum(1)  # (R, K)
        drawn = (bits.words(R, 1) * cumulative[:, -1:]) >> 32  # (R, 1) uniform in [0, total)
        pick = torch.searchsorted(cumulative, drawn, right=True).squeeze(1).clamp(max=K - 1)
    chosen = headings.gather(1, pick.unsqueeze(1)).squeeze(1)  # (R,)
    dash = dash.gather(1, pick.view(R, 1, 1).expand(-1, 1, dash.shape[-1])).squeeze(1)  # (R, P)
    cover = dash if dot is None else torch.cat([dash, dash[:, dot, None] + t.block], dim=-1)
    pivot = pivots.gather(1, pick.view(R, 1, 1).expand(-1, 1, 2)).squeeze(1) if pivots.dim() == 3 else pivots
    return _Choice(~bad.all(1), dash, cover, pivot + t.step[chosen], chosen)


def _pixel(t: _Tables, flat: torch.Tensor) -> torch.Tensor:
    """(row, col) in the image of flat map indices (...,) -> (..., 2)."""
    return torch.stack([flat // t.side - t.pad, flat % t.side - t.pad], dim=-1)


def _starts(
    bits: _Bits, t: _Tables, c: PathfinderConfig, rows: int, anchor: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """K proposed first pivots (rows, K, 2) q and headings (rows, K): uniform inside the padding, or with
    the first dash starting ``seed_distance`` from the pixel ``anchor`` (rows, 2) in a uniform direction."""
    K, D = c.proposals, c.directions
    headings = bits.below(D, rows, K)
    if anchor is None:
        pivots = 4 * c.padding + bits.below(4 * (c.size - 2 * c.padding), rows, K, 2)
    else:
        pivots = 4 * anchor.unsqueeze(1) + 2 + t.seed[bits.below(D, rows, K)] - t.back[headings]
    return pivots, headings


def _attempt(bits: _Bits, t: _Tables, c: PathfinderConfig, R: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Draw R images at once; return those where every path was placed, in order: ids (n, S, S)
    int8 (dashes only), and the start and end pixels (n, 2, 2) ((target path, (row, col))).

    Paths are drawn one after another: the first target path, the second (its first dash starting
    ``seed_distance`` from the first one's), then the distractors. A path that runs into a dead end is
    taken out again and redrawn from a fresh start, up to ``retries`` times, before the image is dropped.
    The maps of all images are kept flat, image r's at r * side^2: ``near`` counts, per pixel, the
    dash pixels (and dot pixels) within clearance - 1 of it, so a path can be taken out by subtraction
    (modulo 256: uint8 arithmetic wraps, well defined)."""
    area = t.side * t.side
    near = torch.zeros(R * area, dtype=torch.uint8)  # counts stay far below 256; dead images' corners wrap
    ids = torch.zeros(R * area, dtype=torch.int8)
    alive = torch.ones(R, dtype=torch.bool)
    tips = torch.zeros(R, 2, 2, dtype=torch.long)  # flat index (in its image) of (start, end) of each target path
    plan = [(c.target_dashes, True)] * 2 + [(c.distractor_dashes, False)] * c.distractors
    for j, (dashes, target) in enumerate(plan):
        todo = alive.clone()
        for _ in range(c.retries):
            rows = todo.nonzero().squeeze(1)
            if rows.numel() == 0:
                break
            anchor = _pixel(t, tips[rows, 0, 0]) if j == 1 else None
            ok, ends = _path(bits, t, c, near, ids, rows, dashes, anchor, target, j + 1)
            todo[rows[ok]] = False
            if target:
                tips[rows[ok], j] = ends[ok]
        alive &= ~todo
    inner = slice(t.pad, t.pad + c.size)
    points = _pixel(t, tips[alive])  # (n, 2, 2, 2) (path, start/end, (row, col))
    return ids.view(R, t.side, t.side)[alive][:, inner, inner].contiguous(), points[:, :, 0], points[:, :, 1]


def _path(
    bits: _Bits, t: _Tables, c: PathfinderConfig, near: torch.Tensor, ids: torch.Tensor, rows: torch.Tensor,
    dashes: int, anchor: torch.Tensor | None, dots: bool, path_id: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw a path of ``dashes`` dashes into the images ``rows`` (n,) of the flat maps ``near`` and ``ids``,
    clear of all ink there; with ``dots``, the 3 x 3 dots at both ends are kept clear too. Returns ok (n,)
    and the flat index of its first and last pixel (n, 2); where not ok, the path is taken out again
    (as soon as a quarter of the images still drawing have hit a dead end)."""
    n = rows.numel()
    live = torch.arange(n)  # which of the n images are still drawing
    base = rows * t.side * t.side  # (n,) where each image's maps start
    ok = torch.ones(n, dtype=torch.bool)
    written: list[tuple[torch.Tensor, torch.Tensor | None]] = []  # per dash: flat indices of its ink, its halo
    for k in range(dashes):
        dot = (0 if k == 0 else (-1 if k == dashes - 1 else None)) if dots else None
        if k == 0:
            pivots, headings = _starts(bits, t, c, n, anchor)
            choice = _choose(bits, t, pivots, headings, near, base, dot, None, dashes > 1)
            first = choice.dash[:, 0]
        else:
            headings = (previous.heading.unsqueeze(1) + t.turns) % c.directions  # (m, T) every allowed turn
            choice = _choose(bits, t, previous.pivot, headings, near, base, dot, t.weights, k < dashes - 1)
            # The previous dash is now one the path must keep clear of.
            written[-1] = (written[-1][0], _count(near, t, previous.cover, base, ok))
        ok &= choice.ok
        dash = torch.where(ok.unsqueeze(1), choice.dash, 0) + base.unsqueeze(1)  # dead images write to a corner
        ids.index_fill_(0, dash.view(-1), path_id)
        written.append((dash, None))
        previous = choice
        if k == dashes - 1 or ok.sum() < 0.75 * len(ok):
            if k == dashes - 1:
                written[-1] = (written[-1][0], _count(near, t, previous.cover, base, ok))
            failed, kept = (~ok).nonzero().squeeze(1), ok.nonzero().squeeze(1)
            if failed.numel():
                for dash, halo in written:
                    ids.index_fill_(0, dash.index_select(0, failed).view(-1), 0)
                    if halo is not None:
                        gone = halo.index_select(0, failed).view(-1)
                        near.scatter_add_(0, gone, torch.full((1,), 255, dtype=near.dtype).expand(gone.numel()))  # -1
                written = [(d.index_select(0, kept), None if h is None else h.index_select(0, kept)) for d, h in written]
                live, base, first = live.index_select(0, kept), base.index_select(0, kept), first.index_select(0, kept)
                previous = _Choice(*(field.index_select(0, kept) for field in previous))
                ok = ok.index_select(0, kept)
                if kept.numel() == 0:
                    break
    done = torch.zeros(n, dtype=torch.bool)
    done[live] = True
    ends = torch.zeros(n, 2, dtype=torch.long)
    ends[live] = torch.stack([first, previous.dash[:, -1]], dim=1)
    return done, ends


def _count(near: torch.Tensor, t: _Tables, cover: torch.Tensor, base: torch.Tensor, ok: torch.Tensor) -> torch.Tensor:
    """Add 1 in ``near`` around (within clearance - 1 of) each pixel of ``cover`` (n, Q), in the images
    whose maps start at ``base`` (n,); dead images (not ``ok``) count their map's corner instead. Returns
    the flat indices counted, (n, Q * halo), to take them out again."""
    index = torch.where(ok.view(-1, 1, 1), cover.unsqueeze(-1) + t.halo, 0) + base.view(-1, 1, 1)
    index = index.view(cover.shape[0], -1)
    near.scatter_add_(0, index.view(-1), torch.ones(1, dtype=near.dtype).expand(index.numel()))
    return index


# LRA: 200k images per difficulty, split 80 / 10 / 10. Each split's seed is its name.
SIZES = {"train": 160_000, "val": 20_000, "test": 20_000}
SMALL_SIZES = {"train": 8_000, "val": 1_000, "test": 2_000}


def _parser(sizes: dict[str, int]):
    def parse(files: dict[str, Path]) -> dict[str, torch.Tensor]:
        arrays = {}
        for split, count in sizes.items():
            made = generate(count, split)
            arrays[f"{split}_images"], arrays[f"{split}_labels"] = made.images, made.labels
        return arrays

    return parse


def _spec(name: str, sizes: dict[str, int], digest: str) -> DatasetSpec:
    return DatasetSpec(
        name=name,
        files={},
        sources=(),
        parse=_parser(sizes),
        hint="nothing to obtain: the dataset is generated",
        format_version=1,
        image_shape=(1, 32, 32),
        classes=CLASSES,
        generated_sha256=digest,
    )


SPEC = _spec("pathfinder", SIZES, "b9bc83b9e27a024a9df9a4eb55de6c5a3678058839da079203ec5cb34bfd3fa4")
SMALL_SPEC = _spec("pathfinder-small", SMALL_SIZES, "0a0f5fcddacdecaea4f65584f421f8337076634a1466854b31db0edfaa5f9568")
SPECS = (SPEC, SMALL_SPEC)

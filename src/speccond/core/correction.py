"""SpectralCorrection: the fixed matrix C of one projection parameter, as a module.

One class serves both backends: as a torch parametrization its ``forward(W)`` returns W + C; as a child
of a Linear-like module (the activation backend) ``plus(W)`` gives the W + C an nn.Linear's forward
multiplies by, and ``add_to_output(x, y)`` returns y + x C^T for the other Linear-like modules (the
same map, applied to the activations). C is a buffer, never a parameter: no optimiser state, no gradient, dL/dW = dL/d(W + C).

Two representations:

- identity (Theorem 3.8): lam_role times the rectangular identity of each q/k/v block, stored sparsely
  as (out_index, in_index, values) in (out, in) coordinates, one value per diagonal entry. With numeric
  lams all of it derives from the config, so nothing is saved in the state_dict. With lam "auto" the
  values vary per block or per head (lam = sigma_max (t + 1) / (t - 1) of that part of W, t =
  target_kappa) and depend on the weights they were chosen from, so ``values`` is saved.
  With ``key_basis="orthogonal"`` the k block's entries are dense per head instead: lam R_h E_h, R_h a fixed
  random dh x dh orthogonal matrix per k head (``speccond.core.spectral.key_rotations``), saved as the
  buffer ``key_rotations`` (heads_k, dh, dh); ``values`` still holds k's lam on each diagonal entry (the lam
  of column j of head h's block), so "auto", refresh and the reports read k's lams as they read q's.
- svd (Theorem 3.5): a dense (out, in) matrix, sigma_max U V^T per head or per block. It depends on the
  weights at the moment it was computed, so it is saved in the state_dict.

Every correction also saves a marker, the buffer ``speccond``: its description (kind, lam per role,
granularity, target_kappa and key_basis where they matter, layout) as UTF-8 JSON in a uint8 tensor, so a
state dict of a conditioned model says so under either backend. Loading it into a plain model gives
unexpected keys under strict loading; loading it into a conditioned model checks that the correction is the
one saved (a numeric lam is not saved otherwise: lam = 10 loaded into a lam = 1 model would pass silently).
State dicts written before the marker existed have none: loading tolerates its absence
(``speccond.checkpoint`` reads the marker keys to rebuild the conditioning).
"""
from __future__ import annotations

import json
import logging
import math

import torch
import torch.nn.functional as F
from torch import nn

from speccond.core.config import AUTO
from speccond.core.effective_weight import EffectiveWeight
from speccond.core.layout import ProjectionLayout
from speccond.core.sharded import gathered, is_sharded, shaped_like
from speccond.core.spectral import auto_lam, key_rotations, rounded_auto_bound, svd_correction

log = logging.getLogger(__name__)

MARKER = "speccond"  # name of the buffer that marks a state dict as conditioned
MARKER_FORMAT = 1  # version of the marker's JSON; a newer one is refused with a message


class SpectralCorrection(nn.Module):
    """Holds C for one projection parameter.

    Args:
        layout: where the q, k, v blocks sit in the parameter.
        shape: the parameter's stored shape.
        scales: lam per role present in ``layout.roles`` (0 leaves a block untouched), a number or "auto"
            (identity only). For "svd" only zero versus non-zero matters: the SVD correction's scale is
            sigma_max of the weight.
        kind: "identity" or "svd".
        granularity: "head" or "projection": the parts of a q/k/v block that get their own SVD
            correction, or their own lam when it is "auto".
        weight: the stored weight: C is computed from it ("svd", "auto") and takes its dtype (both kinds;
            without it the identity values are float64, so no lam is rounded before it meets the weight).
        notes: caveats the adapter reported (shown in reports).
        target_kappa: what "auto" aims at: each part's lam is sigma_max(W_part) (t + 1) / (t - 1), so
            kappa(W_part + lam E_part) <= t by Weyl's inequality, where E_part is the part's slice of its
            block's rectangular identity I_k (``speccond.core.spectral.auto_lam``). The bound needs E_part to
            have min(rows, cols) unit singular values: true for a whole block of any shape, and for every
            head when block_out <= in_features (or one head); otherwise per-head "auto" is refused.
        precision: the dtype the SVD and sigma_max behind "svd" and "auto" are computed in. float64 for
            every correction apply attaches (the published runs' bits depend on it); apply's collapse
            advice passes float32 for the candidate settings it only predicts from and never attaches.
        key_basis: "identity" or "orthogonal" (identity only): k's block per k head h is lam E_h or
            lam R_h E_h (SpectralConfig.key_basis). Without a corrected k in ``layout`` (a separate q or
            v projection) there is nothing to turn and it is ignored.
    """

    def __init__(
        self,
        layout: ProjectionLayout,
        shape: torch.Size,
        scales: dict[str, float],
        kind: str,
        granularity: str = "head",
        weight: torch.Tensor | None = None,
        notes: tuple[str, ...] = (),
        target_kappa: float = 2.0,
        precision: torch.dtype = torch.float64,
        key_basis: str = "identity",
    ) -> None:
        super().__init__()
        self.precision = precision  # what "svd" and "auto" compute C in (see the class docstring)
        self.notes = tuple(notes)
        self.acts_as = layout.roles  # the paper's role of each block, when an adapter says otherwise
        self.probe_skip = ""  # why speccond.verify cannot probe the owning attention ("" = it can)
        self.collapse_exempt = ""  # why apply's collapse warning skips the owning attention ("" = it may not)
        self.layout = layout
        self.kind = kind
        self.granularity = granularity
        self.scales = {role: AUTO if scales[role] == AUTO else float(scales[role]) for role in layout.roles}
        self.auto_roles = tuple(role for role, lam in self.scales.items() if lam == AUTO)
        self.target_kappa = float(target_kappa)
        self.out_features, self.in_features = layout.check_shape(shape, "SpectralCorrection")
        # Output features of each role's block: its heads times dh (k, v narrower under grouped-query).
        self.block_widths = {role: layout.block_width(role, self.out_features) for role in layout.roles}
        if key_basis not in ("identity", "orthogonal"):
            raise ValueError(f"key_basis must be 'identity' or 'orthogonal', got {key_basis!r}")
        if key_basis == "orthogonal" and kind != "identity":
            raise ValueError(f"key_basis='orthogonal' turns the identity correction's k block, got kind={kind!r}")
        # Whether k's block is lam R_h E_h per head (dense) rather than lam E_h (on the diagonal).
        self.rotates_key = key_basis == "orthogonal" and self.scales.get("k", 0) != 0
        if self.auto_roles:
            self._check_auto(weight)
        if kind == "identity" and weight is not None:
            self._check_lams_fit(weight)
        if kind == "identity":
            out_index, in_index = self._identity_indices()
            values = self._identity_values(weight, torch.float64 if weight is None else weight.dtype)
            self.register_buffer("out_index", out_index, persistent=False)  # (n,)
            self.register_buffer("in_index", in_index, persistent=False)  # (n,)
            # Saved only when some lam is "auto": then the values depend on the weights they came from.
            self.register_buffer("values", values, persistent=bool(self.auto_roles))  # (n,)
            if self.rotates_key:
                heads, head_dim = layout.heads("k"), layout.head_dim(self.out_features)
                rotations = key_rotations(heads, head_dim).to(values.dtype)
                # Drawn from a fixed seed, saved all the same: a load gives back the very R it was trained with.
                self.register_buffer("key_rotations", rotations.to(values.device))  # (heads_k, dh, dh)
                key_rows = layout.block_rows("k", self.out_features)  # (width_k,)
                self.register_buffer("key_rows", key_rows, persistent=False)
                offset = self._offsets()["k"]
                positions = torch.arange(values.numel())  # (n,)
                kept = (positions < offset) | (positions >= offset + self._diagonal("k"))
                # The entries added one by one (q's, v's diagonals): positions in values, out_index, in_index.
                self.register_buffer("direct", positions[kept], persistent=False)  # (n - diagonal_k,)
            # Blocked layouts put each role's diagonal on contiguous output rows fed by x[..., :k]:
            # then the activation backend adds lam * x[..., :k] to a slice in place, saving nothing for
            # backward. (start_row, length, offset into values) per corrected role; None when rows are
            # interleaved (per-head layouts), which use index_add.
            self.segments = self._contiguous_segments(out_index, in_index)
        elif kind == "svd":
            if weight is None:
                raise ValueError("the svd correction needs the weight it is computed from")
            self.register_buffer("matrix", self._svd_matrix(weight).to(weight.dtype))  # (out, in)
        else:
            raise ValueError(f"unknown correction kind {kind!r}; expected 'identity' or 'svd'")
        # The marker: saved (persistent), never trained, not floating point (model.half() leaves it).
        self.register_buffer(MARKER, encode_marker(self.description()))  # (bytes,) uint8

    # -- construction -------------------------------------------------------------------------------
    def _corrected_roles(self) -> list[str]:
        """Roles with a non-zero (or "auto") lam, in block order: the order of the identity entries."""
        return [role for role, lam in self.scales.items() if lam != 0]

    def _check_auto(self, weight: torch.Tensor | None) -> None:
        if self.kind != "identity":
            raise ValueError(f"lam='auto' needs the identity correction, got kind={self.kind!r}")
        if weight is None:
            raise ValueError("lam='auto' needs the weight its lam is chosen from")
        if not self.target_kappa > 1:
            raise ValueError(f"lam='auto' needs target_kappa > 1, got {self.target_kappa}")
        if weight.is_floating_point():
            eps = torch.finfo(weight.dtype).eps
            guaranteed = rounded_auto_bound(self.target_kappa, eps)
            if guaranteed - 1.0 > 2.0 * (self.target_kappa - 1.0):
                dtype = str(weight.dtype).removeprefix("torch.")
                raise ValueError(
                    f"lam='auto' with target_kappa={self.target_kappa!r} asks for a kappa closer to 1 than {dtype} "
                    f"weights can hold: storing lam and W + lam I rounds by up to eps/2 (eps = {eps:.3g}), which "
                    f"moves kappa by about eps, so only kappa <= {guaranteed:.10g} is guaranteed; use "
                    f"target_kappa >= {1.0 + 4.0 * eps:.10g}, or condition float64 weights"
                )
        too_tall = [r for r in self.auto_roles if self.layout.heads(r) > 1 and self.block_widths[r] > self.in_features]
        if self.granularity == "head" and too_tall:
            role = too_tall[0]
            heads, width = self.layout.heads(role), self.block_widths[role]
            raise ValueError(
                f"lam='auto' with granularity='head' needs every head's slice of the rectangular identity to "
                f"hold a full diagonal, but the {'/'.join(too_tall)} block is {width} x "
                f"{self.in_features} with {heads} heads of {width // heads} rows: the rows past {self.in_features} "
                "carry no diagonal entry, so no lam brings those heads' kappa to target_kappa; use "
                "SpectralConfig(granularity='projection') (one lam per q/k/v block, which bounds the block's "
                "kappa)"
            )

    def _check_lams_fit(self, weight: torch.Tensor) -> None:
        """Refuse a numeric lam that the weight's dtype cannot hold next to W: lam^2 (the attention logits
        hold lam^2 x_i.x_j) beyond the dtype's largest value, or lam so large that W + lam I rounds every
        diagonal entry of W to lam (the model's own weights there lost). The message gives the largest lam
        that keeps both: below 2 max|W_ii| / eps, lam's spacing stays under twice the largest |W_ii|."""
        if not weight.is_floating_point():
            return
        info = torch.finfo(weight.dtype)
        w = self.layout.out_in(gathered(weight.detach()))  # (out, in), the weight's own dtype
        for role in self._corrected_roles():
            lam = self.scales[role]
            if lam == AUTO:
                continue
            rows = self.layout.block_rows(role, self.out_features).to(w.device)[: self._diagonal(role)]
            diagonal = w[rows, torch.arange(rows.numel(), device=w.device)]  # (diagonal,) W_ii of the block
            largest_w = float(diagonal.abs().max()) if diagonal.numel() else 0.0
            keeps_w = 2.0 * largest_w / info.eps if largest_w > 0 and math.isfinite(largest_w) else math.inf
            limit = min(math.sqrt(info.max), keeps_w)
            dtype = str(weight.dtype).removeprefix("torch.")
            if lam >= math.sqrt(info.max):
                raise ValueError(
                    f"lam_{role}={lam:g} is too large for {dtype} weights: lam^2 = {lam * lam:.3g} is beyond the "
                    f"largest {dtype} ({info.max:.3g}), so attention logits overflow and outputs turn inf/NaN; use "
                    f"lam below {limit:.3g} for these weights in {dtype}, or condition in float64"
                )
            rounded = diagonal + torch.tensor(lam, dtype=weight.dtype, device=w.device)
            if largest_w > 0 and bool((rounded == torch.tensor(lam, dtype=weight.dtype)).all()):
                raise ValueError(
                    f"lam_{role}={lam:g}: W + lam I rounds every diagonal entry of the {role} block to lam in "
                    f"{dtype} (|W_ii| <= {largest_w:.3g}, below half the spacing of {dtype} numbers near lam), "
                    f"so the model's own weights there would be lost; use lam below {limit:.3g} for these "
                    f"weights in {dtype}, or condition in float64"
                )

    def _diagonal(self, role: str) -> int:
        """Entries on the diagonal of ``role``'s rectangular identity: min(width, in)."""
        return min(self.block_widths[role], self.in_features)

    def _offsets(self) -> dict[str, int]:
        """Where each corrected role's entries start in ``values`` (role after role)."""
        offsets, start = {}, 0
        for role in self._corrected_roles():
            offsets[role] = start
            start += self._diagonal(role)
        return offsets

    def _identity_indices(self) -> tuple[torch.Tensor, torch.Tensor]:
        outs, ins = [], []
        for role in self._corrected_roles():
            diagonal = self._diagonal(role)
            rows = self.layout.block_rows(role, self.out_features)  # (width,) logical order
            outs.append(rows[:diagonal])
            ins.append(torch.arange(diagonal))
        if not outs:
            empty = torch.zeros(0, dtype=torch.long)
            return empty, empty.clone()
        return torch.cat(outs), torch.cat(ins)

    def _identity_values(self, weight: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
        """lam of every diagonal entry, role after role: (n,); "auto" roles chosen from ``weight``."""
        device = None if weight is None else weight.device
        vals = []
        for role in self._corrected_roles():
            lam, diagonal = self.scales[role], self._diagonal(role)
            if lam == AUTO:
                vals.append(self._auto_diagonal(weight, role)[:diagonal].to(dtype))
            else:
                vals.append(torch.full((diagonal,), lam, dtype=dtype, device=device))
        return torch.cat(vals) if vals else torch.zeros(0, dtype=dtype, device=device)

    def _auto_diagonal(self, weight: torch.Tensor, role: str) -> torch.Tensor:
        """The lam of each row of ``role``'s block: (width,), in ``precision``, constant per head or per block."""
        w = self.layout.out_in(gathered(weight.detach())).to(self.precision)  # (out, in)
        rows = self.layout.block_rows(role, self.out_features).to(w.device)
        parts = self.layout.heads(role) if self.granularity == "head" else 1
        part_out = self.block_widths[role] // parts
        blocks = w[rows].reshape(parts, part_out, self.in_features)  # (parts, rows per part, in)
        if self.precision != torch.float64 and 2 * part_out <= self.in_features:
            # only predicted from: sigma_max^2 is the top eigenvalue of the small W W^T, to eps relative at any kappa
            sigma_max = torch.linalg.eigvalsh(blocks @ blocks.mT)[:, -1].clamp_min(0).sqrt()  # (parts,)
        else:
            sigma_max = torch.linalg.matrix_norm(blocks, ord=2)  # (parts,)
        bad = ~(torch.isfinite(sigma_max) & (sigma_max > 0))
        if bad.any():
            part = int(bad.nonzero()[0])
            what = f"head {part}" if self.granularity == "head" else "block"
            raise ValueError(
                f"lam='auto' follows sigma_max of each corrected part, but {what} of the {role} block has "
                f"sigma_max = {float(sigma_max[part])} (all-zero or non-finite weight); give lam_{role} a number"
            )
        lams = auto_lam(sigma_max, self.target_kappa)  # (parts,)
        return lams.repeat_interleave(part_out)  # (width,)

    def _contiguous_segments(self, out_index: torch.Tensor, in_index: torch.Tensor):
        segments = []
        for role, offset in self._offsets().items():
            if role == "k" and self.rotates_key:
                continue  # added as a dense block (add_to_output)
            diagonal = self._diagonal(role)
            rows = out_index[offset : offset + diagonal]
            cols = in_index[offset : offset + diagonal]
            start = int(rows[0]) if rows.numel() else 0
            if not torch.equal(rows, torch.arange(start, start + diagonal)) or not torch.equal(cols, torch.arange(diagonal)):
                return None
            segments.append((start, diagonal, offset))
        return tuple(segments)

    def _svd_matrix(self, weight: torch.Tensor) -> torch.Tensor:
        w = self.layout.out_in(gathered(weight.detach())).to(self.precision)  # (out, in)
        matrix = torch.zeros_like(w)
        head_out = self.layout.head_dim(self.out_features)
        for role, lam in self.scales.items():
            if lam == 0:
                continue
            rows = self.layout.block_rows(role, self.out_features).to(w.device)  # (width,)
            block = w[rows]  # (width, in), heads in order
            if not bool(torch.isfinite(block).all()):
                bad = (~torch.isfinite(block)).nonzero()
                row, col = (int(i) for i in bad[0])
                raise ValueError(
                    f"the svd correction follows sigma_max U V^T of the weight, but the {role} block holds "
                    f"non-finite values ({int(bad.shape[0])}, the first at row {row}, column {col} of the block): "
                    "repair the weights (or reload them from a checkpoint) first; C was left as it was"
                )
            if self.granularity == "projection":
                matrix[rows] = svd_correction(block, self.precision)
                continue
            heads = block.reshape(self.layout.heads(role), head_out, self.in_features)  # (heads, dh, in)
            # One batched SVD: each head's C is bit for bit the one its own SVD gives (tests/test_apply_cost.py)
            matrix[rows] = svd_correction(heads, self.precision).reshape(-1, self.in_features)  # (width, in)
        return matrix

    @property
    def follows_weights(self) -> bool:
        """Whether C is computed from the weights ("svd", or an identity with some lam "auto")."""
        return self.kind == "svd" or bool(self.auto_roles)

    def recomputed(self, weight: torch.Tensor) -> torch.Tensor:
        """The buffer that follows the weights (``matrix`` or ``values``), computed from ``weight`` (stored
        orientation), without storing it; numeric identity lams are kept."""
        if self.kind == "svd":
            return self._svd_matrix(weight).to(self.matrix.dtype)
        return self._identity_values(weight, self.values.dtype)

    def recompute(self, weight: torch.Tensor) -> None:
        """Recompute an svd correction or the "auto" lams from ``weight``; a numeric identity is a no-op."""
        if self.follows_weights:
            self.store(self.recomputed(weight))

    def store(self, buffer: torch.Tensor) -> None:
        """Copy a result of :meth:`recomputed` into place."""
        with torch.no_grad():
            (self.matrix if self.kind == "svd" else self.values).copy_(buffer)

    # -- the marker -----------------------------------------------------------------------------------
    def description(self) -> dict:
        """What determines C given W, as JSON-ready values: the marker's content. Granularity is given only
        where it matters (svd, "auto"), target_kappa only with an "auto" lam, key_basis only when k is turned."""
        scales = {role: lam if lam == AUTO else float(lam) for role, lam in self.scales.items()}
        described = {"format": MARKER_FORMAT, "kind": self.kind, "scales": scales, "layout": self.layout.to_dict()}
        if self.follows_weights:
            described["granularity"] = self.granularity
        if self.auto_roles:
            described["target_kappa"] = self.target_kappa
        if self.rotates_key:
            described["key_basis"] = "orthogonal"
        return described

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
        """torch's loader, plus the marker: absent (a state dict from before markers) is accepted; present, it
        must describe this correction, else the load fails naming both. The marker itself is never copied."""
        key = prefix + MARKER
        if key in state_dict:
            problem = marker_mismatch(state_dict[key], self.description())
            if problem:
                error_msgs.append(f"{key}: {problem}")
            state_dict = {k: v for k, v in state_dict.items() if k != key}
        else:
            log.debug("%s: no marker (a state dict written before speccond saved one); accepted", key)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        if key in missing_keys:
            missing_keys.remove(key)

    # -- views ----------------------------------------------------------------------------------------
    def head_lams(self, role: str) -> tuple[float, ...]:
        """Identity only: the lam on each head's slice of ``role``'s block, read from the ``values`` buffer
        (so it follows refresh and load_state_dict); 0.0 for a head whose rows hold no diagonal entry."""
        if self.kind != "identity":
            raise ValueError("head_lams is defined for the identity correction only")
        heads = self.layout.heads(role)
        if self.scales[role] == 0:
            return (0.0,) * heads
        diagonal, offset = self._diagonal(role), self._offsets()[role]
        values = self.values[offset : offset + diagonal].tolist()  # (diagonal,)
        head_out = self.block_widths[role] // heads
        return tuple(float(values[h * head_out]) if h * head_out < diagonal else 0.0 for h in range(heads))

    def dense_out_in(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """C as a dense (out, in) matrix."""
        if self.kind == "svd":
            return self.matrix if dtype is None else self.matrix.to(dtype)
        dense = torch.zeros(
            self.out_features, self.in_features, dtype=dtype or self.values.dtype, device=self.values.device
        )
        out_index, in_index, values = self._direct_entries(dense.dtype)
        dense[out_index, in_index] = values
        if self.rotates_key:
            dense[self.key_rows] = self.key_block(dense.dtype)
        return dense

    def _direct_entries(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(out_index, in_index, values) of the entries added one by one: every diagonal entry, but k's when
        k's block is rotated (:meth:`key_block` adds it): (m,) each, values in ``dtype``."""
        if not self.rotates_key:
            return self.out_index, self.in_index, self.values.to(dtype)
        return self.out_index[self.direct], self.in_index[self.direct], self.values[self.direct].to(dtype)

    def key_block(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Rotated k only: k's block of C, (width_k, in): head h's rows hold lam R_h E_h, that is lam_j R_h[:, j]
        on the head's j-th diagonal column (lam_j its lam from ``values``, one per head or per block), zero
        elsewhere: block diagonal in the first min(width_k, in) columns."""
        dtype = dtype or self.values.dtype
        heads, head_dim, _ = self.key_rotations.shape
        diagonal, offset = self._diagonal("k"), self._offsets()["k"]
        lams = torch.zeros(heads * head_dim, dtype=dtype, device=self.values.device)  # (width_k,) per column
        lams[:diagonal] = self.values[offset : offset + diagonal].to(dtype)  # past the diagonal: 0
        scaled = self.key_rotations.to(dtype) * lams.reshape(heads, 1, head_dim)  # (heads, dh, dh) lam_j R_h[:, j]
        block = torch.block_diag(*scaled.unbind())  # (width_k, width_k)
        if self.in_features >= heads * head_dim:
            return F.pad(block, (0, self.in_features - heads * head_dim))  # (width_k, in)
        return block[:, : self.in_features]  # columns past in carry no diagonal entry (their lam is 0)

    def dense(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """C in the parameter's stored orientation."""
        return self.layout.out_in(self.dense_out_in(dtype))

    # -- the two backends -----------------------------------------------------------------------------
    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        """Weight backend: W_eff = W + C, in W's stored orientation and dtype.

        Read from the parameter itself (eager, a plain tensor), W + C comes back as an
        :class:`~speccond.core.effective_weight.EffectiveWeight`: writes into it (PEFT's merge writes
        ``weight.data``) are stored as (value - C) in W instead of being lost on a temporary."""
        effective = self.plus(weight)
        if isinstance(weight, nn.Parameter) and type(effective) is torch.Tensor and not torch.compiler.is_compiling():
            return EffectiveWeight.wrap(effective, self, weight)
        return effective

    def plus(self, weight: torch.Tensor) -> torch.Tensor:
        """W + C as a new tensor (differentiable in W), in W's stored orientation and dtype; a DTensor laid
        out as W when W is one (FSDP2 between steps)."""
        if is_sharded(weight):
            return weight + shaped_like(self.dense(weight.dtype), weight)
        if self.kind == "svd":
            return weight + self.layout.out_in(self.matrix).to(weight.dtype)
        out_index, in_index, values = self._direct_entries(weight.dtype)
        out_axis = 0 if self.layout.storage == "out_in" else 1
        index = (out_index, in_index) if out_axis == 0 else (in_index, out_index)
        effective = weight.index_put(index, values, accumulate=True)
        if not self.rotates_key:
            return effective
        block = self.key_block(weight.dtype)  # (width_k, in)
        return effective.index_add(out_axis, self.key_rows, block if out_axis == 0 else block.t())

    def right_inverse(self, effective: torch.Tensor) -> torch.Tensor:
        """Assigning ``module.weight = W_eff`` stores W_eff - C."""
        return effective - shaped_like(self.dense(effective.dtype).to(effective.device), effective)

    def add_to_output(self, inputs: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
        """Activation backend: y + x C^T, where y = x W^T (+ b) is the projection's output (..., out)."""
        if self.kind == "svd":
            return output + F.linear(inputs, self.matrix.to(inputs.dtype)).to(output.dtype)
        if self.rotates_key:  # k's dense block first, out of place: the diagonals below may then add in place
            added = F.linear(inputs, self.key_block(inputs.dtype)).to(output.dtype)  # (..., width_k)
            output = output.index_add(-1, self.key_rows, added)
        if self.segments is not None:
            # In place on the projection's fresh output (Linear saves its input and weight, not its
            # output, for backward), so no (..., out) temporary is created or kept for backward.
            for start, length, offset in self.segments:
                lam = self.values[offset : offset + length].to(output.dtype)  # (length,): per head with "auto"
                output[..., start : start + length].add_(inputs[..., :length].to(output.dtype) * lam)
            return output
        out_index, in_index, values = self._direct_entries(inputs.dtype)
        shifted = inputs.index_select(-1, in_index) * values  # (..., m)
        return output.index_add(-1, out_index, shifted.to(output.dtype))

    def extra_repr(self) -> str:
        scales = ", ".join(f"{r}={s}" if s == AUTO else f"{r}={s:g}" for r, s in self.scales.items())
        if self.auto_roles:
            scales += f", target_kappa={self.target_kappa:g}"
        kind = self.kind if self.kind == "identity" else f"svd/{self.granularity}"
        if self.rotates_key:
            scales += ", key_basis=orthogonal"
        return f"{kind}, {scales}, layout=({self.layout.describe()})"


def encode_marker(description: dict) -> torch.Tensor:
    """A description as a uint8 tensor of compact, key-sorted JSON: (bytes,)."""
    text = json.dumps(description, sort_keys=True, separators=(",", ":"))
    return torch.tensor(list(text.encode()), dtype=torch.uint8)


def decode_marker(marker: torch.Tensor) -> dict:
    """The description a marker holds. Raises ValueError when it is not a marker this version can read."""
    if not isinstance(marker, torch.Tensor) or marker.dtype != torch.uint8 or marker.dim() != 1:
        what = f"{marker.dtype} tensor of shape {tuple(marker.shape)}" if isinstance(marker, torch.Tensor) else type(marker).__name__
        raise ValueError(f"a speccond marker is a 1-D uint8 tensor of JSON, got a {what}")
    try:
        described = json.loads(bytes(marker.cpu().tolist()).decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"unreadable speccond marker ({error})") from None
    if not isinstance(described, dict) or not isinstance(described.get("format"), int):
        raise ValueError(f"a speccond marker holds a JSON object with an integer 'format', got {described!r:.80}")
    if described["format"] > MARKER_FORMAT:
        raise ValueError(
            f"marker format {described['format']} was written by a newer speccond (this one reads format "
            f"{MARKER_FORMAT}); upgrade speccond to load it"
        )
    return described


def marker_mismatch(marker: torch.Tensor, expected: dict) -> str:
    """'' when ``marker`` describes the correction ``expected`` describes, else what differs and what to do.
    For the svd correction only zero versus non-zero lam matters, so that is all that is compared."""
    try:
        saved = decode_marker(marker)
    except ValueError as error:
        return str(error)
    if essentials(saved) == essentials(expected):
        return ""
    return (
        f"the checkpoint's correction is {describe_marker(saved)} but this model's is {describe_marker(expected)}; "
        "condition the model as the checkpoint was: speccond.load_conditioned(model, checkpoint) reads the "
        "conditioning from the checkpoint"
    )


def describe_marker(described: dict) -> str:
    """Short text of a description, e.g. "identity q=10 k=10 v=10" or "svd/head q k v"."""
    layout = described.get("layout") or {}
    saved = described.get("scales", {})
    scales = {role: saved[role] for role in layout.get("roles", "") if role in saved} or saved  # block order
    if described.get("kind") == "svd":
        text = f"svd/{described.get('granularity')} " + " ".join(role for role, lam in scales.items() if lam != 0)
    else:
        text = f"{described.get('kind')} " + " ".join(
            f"{role}={lam if lam == AUTO else f'{lam:g}'}" for role, lam in scales.items()
        )
        if "target_kappa" in described:
            text += f" target_kappa={described['target_kappa']:g} ({described.get('granularity')})"
        if "key_basis" in described:
            text += f" key_basis={described['key_basis']}"
    return text + " (" + ", ".join(f"{k}={v}" for k, v in sorted(layout.items())) + ")"


def essentials(described: dict) -> dict:
    """What two descriptions must share to describe the same correction (svd: which lams are non-zero)."""
    shared = {k: v for k, v in described.items() if k not in ("format", "backend")}
    if described.get("kind") == "svd":
        shared["scales"] = {role: lam != 0 for role, lam in described.get("scales", {}).items()}
    return shared

"""SpectralCorrection: the fixed matrix C of one projection parameter, as a module.

One class serves both backends: as a torch parametrization its ``forward(W)`` returns W + C; as a child
of a Linear-like module its ``add_to_output(x, y)`` returns y + x C^T (the same map, applied to the
activations). C is a buffer, never a parameter: no optimiser state, no gradient, dL/dW = dL/d(W + C).

Two representations:

- identity (Theorem 3.8): lam_role times the rectangular identity of each q/k/v block, stored sparsely
  as (out_index, in_index, values) in (out, in) coordinates. Derivable from the config, so the buffers
  are not saved in the state_dict.
- svd (Theorem 3.5): a dense (out, in) matrix, sigma_max U V^T per head or per block. It depends on the
  weights at the moment it was computed, so it is saved in the state_dict.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from speccond.layout import ProjectionLayout
from speccond.spectral import svd_correction


class SpectralCorrection(nn.Module):
    """Holds C for one projection parameter.

    Args:
        layout: where the q, k, v blocks sit in the parameter.
        shape: the parameter's stored shape.
        scales: lam per role present in ``layout.roles`` (0 leaves a block untouched). For "svd" only zero
            versus non-zero matters: the SVD correction's scale is sigma_max of the weight.
        kind: "identity" or "svd".
        granularity: for "svd": "head" or "projection".
        weight: the stored weight: C is computed from it ("svd") and takes its dtype (both kinds; without
            it the identity values are float64, so no lam is rounded before it meets the weight).
        notes: caveats the adapter reported (shown in reports).
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
    ) -> None:
        super().__init__()
        self.notes = tuple(notes)
        self.acts_as = layout.roles  # the paper's role of each block, when an adapter says otherwise
        self.probe_skip = ""  # why speccond.verify cannot probe the owning attention ("" = it can)
        self.layout = layout
        self.kind = kind
        self.granularity = granularity
        self.scales = {role: float(scales[role]) for role in layout.roles}
        self.block_out, self.in_features = layout.check_shape(shape, "SpectralCorrection")
        self.out_features = self.block_out * len(layout.roles)
        if kind == "identity":
            out_index, in_index, values = self._identity_entries(torch.float64 if weight is None else weight.dtype)
            self.register_buffer("out_index", out_index, persistent=False)  # (n,)
            self.register_buffer("in_index", in_index, persistent=False)  # (n,)
            self.register_buffer("values", values, persistent=False)  # (n,)
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

    # -- construction -------------------------------------------------------------------------------
    def _identity_entries(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        diagonal = min(self.block_out, self.in_features)
        outs, ins, vals = [], [], []
        for role, lam in self.scales.items():
            if lam == 0:
                continue
            rows = self.layout.block_rows(role, self.out_features)  # (block_out,) logical order
            outs.append(rows[:diagonal])
            ins.append(torch.arange(diagonal))
            vals.append(torch.full((diagonal,), lam, dtype=dtype))
        if not outs:
            empty = torch.zeros(0, dtype=torch.long)
            return empty, empty.clone(), torch.zeros(0, dtype=dtype)
        return torch.cat(outs), torch.cat(ins), torch.cat(vals)

    def _contiguous_segments(self, out_index: torch.Tensor, in_index: torch.Tensor):
        diagonal = min(self.block_out, self.in_features)
        segments = []
        for position in range(sum(1 for s in self.scales.values() if s != 0)):
            rows = out_index[position * diagonal : (position + 1) * diagonal]
            cols = in_index[position * diagonal : (position + 1) * diagonal]
            start = int(rows[0]) if rows.numel() else 0
            if not torch.equal(rows, torch.arange(start, start + diagonal)) or not torch.equal(cols, torch.arange(diagonal)):
                return None
            segments.append((start, diagonal, position * diagonal))
        return tuple(segments)

    def _svd_matrix(self, weight: torch.Tensor) -> torch.Tensor:
        w = self.layout.out_in(weight.detach()).to(torch.float64)  # (out, in)
        matrix = torch.zeros_like(w)
        head_out = self.block_out // self.layout.num_heads
        for role, lam in self.scales.items():
            if lam == 0:
                continue
            rows = self.layout.block_rows(role, self.out_features).to(w.device)  # (block_out,)
            if self.granularity == "projection":
                matrix[rows] = svd_correction(w[rows])
                continue
            for head in range(self.layout.num_heads):
                head_rows = rows[head * head_out : (head + 1) * head_out]  # (dh,)
                matrix[head_rows] = svd_correction(w[head_rows])
        return matrix

    def recompute(self, weight: torch.Tensor) -> None:
        """Recompute an svd correction from ``weight`` (stored orientation); identity is a no-op."""
        if self.kind == "svd":
            with torch.no_grad():
                self.matrix.copy_(self._svd_matrix(weight).to(self.matrix.dtype))

    # -- views ----------------------------------------------------------------------------------------
    def dense_out_in(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """C as a dense (out, in) matrix."""
        if self.kind == "svd":
            return self.matrix if dtype is None else self.matrix.to(dtype)
        dense = torch.zeros(
            self.out_features, self.in_features, dtype=dtype or self.values.dtype, device=self.values.device
        )
        dense[self.out_index, self.in_index] = self.values.to(dense.dtype)
        return dense

    def dense(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """C in the parameter's stored orientation."""
        return self.layout.out_in(self.dense_out_in(dtype))

    # -- the two backends -----------------------------------------------------------------------------
    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        """Weight backend: W_eff = W + C, in W's stored orientation and dtype."""
        if self.kind == "svd":
            return weight + self.layout.out_in(self.matrix).to(weight.dtype)
        index = (self.out_index, self.in_index)
        if self.layout.storage == "in_out":
            index = (self.in_index, self.out_index)
        return weight.index_put(index, self.values.to(weight.dtype), accumulate=True)

    def right_inverse(self, effective: torch.Tensor) -> torch.Tensor:
        """Assigning ``module.weight = W_eff`` stores W_eff - C."""
        return effective - self.dense(effective.dtype).to(effective.device)

    def add_to_output(self, inputs: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
        """Activation backend: y + x C^T, where y = x W^T (+ b) is the projection's output (..., out)."""
        if self.kind == "svd":
            return output + F.linear(inputs, self.matrix.to(inputs.dtype)).to(output.dtype)
        if self.segments is not None:
            # In place on the projection's fresh output (Linear saves its input and weight, not its
            # output, for backward), so no (..., out) temporary is created or kept for backward.
            for start, length, offset in self.segments:
                lam = self.values[offset].to(output.dtype)  # 0-dim: follows .to() and stays in the graph
                output[..., start : start + length].add_(inputs[..., :length].to(output.dtype) * lam)
            return output
        shifted = inputs.index_select(-1, self.in_index) * self.values.to(inputs.dtype)  # (..., n)
        return output.index_add(-1, self.out_index, shifted.to(output.dtype))

    def extra_repr(self) -> str:
        scales = ", ".join(f"{r}={s:g}" for r, s in self.scales.items())
        kind = self.kind if self.kind == "identity" else f"svd/{self.granularity}"
        return f"{kind}, {scales}, layout=({self.layout.describe()})"

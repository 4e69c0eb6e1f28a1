"""The arithmetic of a training step: float32, or torch.amp autocast in bfloat16 or float16.

    precision = MixedPrecision(config.run.precision, context.device)
    with precision.forward():            # autocast of the forward and the loss (nothing for float32)
        loss = ...
    precision.backward(loss)             # scaled by the GradScaler for float16
    precision.unscale(optimizer)         # before gradient clipping, so the clip sees true gradients
    precision.step(optimizer)            # a float16 step with inf or NaN gradients is skipped, as torch.amp does

"float32" (the default, and every published run's) touches nothing: no autocast context, no scaler, the
same checkpoint contents, so those runs regenerate bit for bit. "bfloat16" autocasts the forward (CUDA
and CPU). "float16" autocasts it and scales the loss with ``torch.amp.GradScaler``, whose state goes into
each checkpoint and comes back on resume, so an interrupted float16 run resumes to the same result.
Evaluation stays in float32.
"""
from __future__ import annotations

from contextlib import nullcontext

import torch

PRECISIONS = {"float32": None, "bfloat16": torch.bfloat16, "float16": torch.float16}


class MixedPrecision:
    def __init__(self, precision: str, device: torch.device):
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        self.dtype = PRECISIONS[precision]
        self.device_type = device.type
        self.scaler = torch.amp.GradScaler(device.type) if self.dtype is torch.float16 else None

    def forward(self):
        return nullcontext() if self.dtype is None else torch.autocast(self.device_type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        (loss if self.scaler is None else self.scaler.scale(loss)).backward()

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        if self.scaler is None:
            optimizer.step()
            return
        self.scaler.step(optimizer)
        self.scaler.update()

    def state(self) -> dict:
        """What a checkpoint keeps of it: the scaler's state for float16, nothing otherwise."""
        return {} if self.scaler is None else {"grad_scaler": self.scaler.state_dict()}

    def load(self, state: dict) -> None:
        if self.scaler is not None and "grad_scaler" in state:
            self.scaler.load_state_dict(state["grad_scaler"])

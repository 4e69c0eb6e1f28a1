"""W + C as the weight backend hands it out: reads see W + C, writes reach the stored W.

torch.nn.utils.parametrize computes ``module.weight`` afresh on every read, so a write into what was
read lands on a temporary and is lost without a word. Code that edits weights in place does exactly
that: PEFT's ``merge`` / ``unmerge`` (``base_layer.weight.data += delta``, ``base_layer.weight.data =
merged``), PiSSA-style initialisations, ``torch.nn.init.normal_(module.weight)``. Assignment,
``module.weight = X``, already works in torch: ``right_inverse`` stores X - C.

:class:`EffectiveWeight` gives writes the same meaning as that assignment. It is the tensor
``SpectralCorrection.forward`` returns (autograd-attached to W, ``as_subclass``), and

- assigning ``.data`` stores ``value - C`` in W;
- an in-place method on it, or on its ``.data`` (an EffectiveWeight too, same storage), runs and then
  stores ``result - C`` in W (``torch.nn.init`` writes this way);

so afterwards the module reads the written value as its weight, within one rounding of the subtraction
and re-addition of C. Every other op sees a plain tensor and returns one (``__torch_function__`` is
disabled, so fast paths that refuse tensor subclasses are not turned off either).

Only plain tensors on the eager path are wrapped: under ``torch.compile`` tracing, and for tensor
subclasses (DTensor under FSDP2), ``forward`` returns W + C as it is, and writes into those are lost
as in torch.
"""
from __future__ import annotations

import torch

# In-place tensor methods that write data; the others ending in "_" change no values (a needless write
# back would round W).
_NOT_WRITES = frozenset({"requires_grad_", "retain_grad", "share_memory_", "pin_memory", "record_stream", "set_", "detach_", "rename_"})
_WRITE_DUNDERS = (
    "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__", "__ipow__",
    "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__", "__imatmul__", "__setitem__",
)


class EffectiveWeight(torch.Tensor):
    """W + C, whose writes are stored as (written value) - C in the parametrization's W.

    No ``__torch_function__`` override (it is disabled): ops see a plain tensor, results are plain
    tensors, and fast paths that refuse tensor subclasses with one (nn.TransformerEncoderLayer's) still
    run. The writes are caught as methods instead: ``.data`` assignment and each in-place method.
    """

    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def wrap(effective: torch.Tensor, correction, stored: torch.Tensor) -> torch.Tensor:
        """``effective`` as an EffectiveWeight writing back through ``correction`` into ``stored``."""
        wrapped = effective.as_subclass(EffectiveWeight)
        wrapped._sink = (correction, stored)
        return wrapped

    def _write_back(self) -> None:
        correction, stored = self._sink
        with torch.no_grad():
            value = torch.Tensor.data.__get__(self)  # a plain alias of what was written
            if value.shape != stored.shape:
                raise ValueError(
                    f"a write to a conditioned weight must keep its shape {tuple(stored.shape)}, got "
                    f"{tuple(value.shape)}; to change the module's shape, speccond.remove(model) first"
                )
            stored.copy_(correction.right_inverse(value))

    @property
    def data(self) -> torch.Tensor:
        alias = torch.Tensor.data.__get__(self).as_subclass(EffectiveWeight)  # same storage
        alias._sink = self._sink
        return alias

    @data.setter
    def data(self, value: torch.Tensor) -> None:
        torch.Tensor.data.__set__(self, value)
        self._write_back()


def _writing(name: str):
    method = getattr(torch.Tensor, name)

    def write(self, *args, **kwargs):
        result = method(self, *args, **kwargs)
        self._write_back()
        return self if result is None else result

    write.__name__ = name
    write.__doc__ = f"torch.Tensor.{name}, then the written value is stored as (value - C) in W."
    return write


for _name in (
    *(n for n in dir(torch.Tensor) if n.endswith("_") and not n.startswith("_") and n not in _NOT_WRITES),
    *_WRITE_DUNDERS,
):
    if callable(getattr(torch.Tensor, _name, None)):
        setattr(EffectiveWeight, _name, _writing(_name))

"""Attention that runs where no found attention layer is running: one forward, watched for it.

Structure finds the attention layers without running anything (the adapters, the names of q, k, v
projections: layers.attention_layers and layers.coverage_refusal). It can miss attention whose projection's
name tells nothing: a ``mixer`` Linear whose output a module splits into q, k, v and hands to
``scaled_dot_product_attention``, beside layers an adapter does recognise. A table of the found layers would
then leave that attention out without a word. So the forward the head diagnostics run anyway
(heads.capture_input) runs under :func:`watched`, which notes every attention computation made while no
found attention module is running, with the innermost module that made it:

- a call of ``scaled_dot_product_attention`` (the functional form, which transformers' and timm's
  attention call, and through which ``nn.MultiheadAttention`` runs);
- a softmax over a tensor of 4 or more dimensions: (batch, heads, queries, keys) scores. Softmax over
  fewer (class logits, a router's (tokens, experts) weights) is not counted, so single-head attention
  written as a 3-D softmax is not seen.

Only calls made while some module's forward is running count: a custom autograd function's backward or
an optimiser step that calls softmax runs outside every module. The watch is a ``TorchFunctionMode`` and
global module hooks for as long as the ``with`` block lasts; it reads and changes nothing
(tests/test_diagnostics_refuse_unrecognised.py). The monitor watches the first measured step of a model
the same way (monitor/measurement.py), or, under transformers' Trainer, each forward of that step
(:class:`ForwardWatch`). Dynamo cannot trace the watch, so compiled code (``torch.compile``)
runs eagerly while it lasts (``torch.compiler.set_stance("force_eager")``): a compiled model's first
measured step runs uncompiled, once.
"""
from __future__ import annotations

import warnings
from contextlib import ExitStack, contextmanager
from typing import Iterable, Iterator

import torch
from torch import nn
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.overrides import TorchFunctionMode

ATTENTION_FUNCTIONS = ("scaled_dot_product_attention",)
SOFTMAX_FUNCTIONS = ("softmax", "_softmax")
SCORES_NDIM = 4  # (B, H, N, M): the fewest dimensions of a softmax counted as attention


class Census:
    """Where attention ran outside the found attention modules during a :func:`watched` forward."""

    def __init__(self, model: nn.Module, found: Iterable[nn.Module]) -> None:
        self._names = {id(module): name for name, module in model.named_modules()}
        self._found = {id(module) for module in found}
        self._running: list[nn.Module] = []  # the modules whose forward is running, outermost first
        self.unfound: dict[str, int] = {}  # innermost running module's name -> attention calls it made

    def entered(self, module: nn.Module) -> None:
        self._running.append(module)

    def left(self, module: nn.Module) -> None:
        for position in range(len(self._running) - 1, -1, -1):  # the innermost entry of this module
            if self._running[position] is module:
                del self._running[position]
                return

    def attention_ran(self) -> None:
        if not self._running or any(id(module) in self._found for module in self._running):
            return  # outside every module's forward (a backward, an optimiser step), or inside a found layer
        named = [self._names[id(m)] for m in self._running if id(m) in self._names]
        where = named[-1] if named else ""
        self.unfound[where] = self.unfound.get(where, 0) + 1

    def refusal(self, model: nn.Module, what: str, advice: str) -> str:
        """Why ``what`` refuses ``model``: where attention ran outside the found layers ('' when nowhere)."""
        if not self.unfound:
            return ""
        parts = []
        for name, calls in self.unfound.items():
            module = model.get_submodule(name) if name else model
            parts.append(f"{name or '<root>'} ({type(module).__name__}, {calls} call{'s' if calls > 1 else ''})")
        return (f"{what}: attention ran in {', '.join(parts)} of {type(model).__name__}, outside every attention "
                f"layer speccond found, so {what} would leave it out; {advice}")


class _AttentionWatch(TorchFunctionMode):
    def __init__(self, census: Census) -> None:
        super().__init__()
        self.census = census

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in ATTENTION_FUNCTIONS or (name in SOFTMAX_FUNCTIONS and _scores(args)):
            self.census.attention_ran()
        return func(*args, **(kwargs or {}))


def _scores(args: tuple) -> bool:
    return bool(args) and isinstance(args[0], torch.Tensor) and args[0].dim() >= SCORES_NDIM


@contextmanager
def watched(model: nn.Module, found: Iterable[nn.Module]) -> Iterator[Census]:
    """Run the body (one forward of ``model``) under the watch; the Census says where attention ran that no
    module in ``found`` was running around."""
    census = Census(model, found)
    with _watching(census):
        yield census


class ForwardWatch:
    """The watch over each forward of ``model`` until :meth:`remove`: entered by the model's forward pre-hook
    and left by its forward hook, which runs even when the forward raises. For a loop whose step can end
    without a word to the monitor (transformers' Trainer has no callback for an exception), so that nothing
    of the watch outlives a forward. The model itself counts as running during it: attention in its own
    forward, outside its children, is counted under its name ('<root>')."""

    def __init__(self, model: nn.Module, found: Iterable[nn.Module]) -> None:
        self.census = Census(model, found)
        self._model = model
        self._stack: ExitStack | None = None
        self._handles = [model.register_forward_pre_hook(self._enter),
                         model.register_forward_hook(self._leave, always_call=True)]

    def _enter(self, _module: nn.Module, _args: tuple) -> None:
        if self._stack is None:
            self._stack = ExitStack()
            self._stack.enter_context(_watching(self.census))
            self.census.entered(self._model)

    def _leave(self, *_ignored) -> None:
        if self._stack is not None:
            self.census.left(self._model)
            stack, self._stack = self._stack, None
            stack.close()

    def remove(self) -> None:
        self._leave()
        for handle in self._handles:
            handle.remove()


@contextmanager
def _watching(census: Census) -> Iterator[None]:
    pre = register_module_forward_pre_hook(lambda module, _args: census.entered(module))
    post = register_module_forward_hook(lambda module, _args, _out: census.left(module), always_call=True)
    try:
        with torch.compiler.set_stance("force_eager"), _AttentionWatch(census), warnings.catch_warnings():
            # dynamo cannot trace the watch; an OptimizedModule's forward runs the hooks twice, which the
            # running stack absorbs, so torch's warning about it says nothing to the user
            warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)` when there are global hooks")
            yield
    finally:
        pre.remove()
        post.remove()

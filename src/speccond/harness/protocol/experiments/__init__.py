"""The published protocols as config functions (big_vision's shape: each ``get_config(smoke=False)`` with its
command and run time in its docstring), and the runner of ``speccond protocol`` (runner.py).

    fair.py      the fair comparison (docs/RESULTS.md, "Pre-registered protocol of the fair comparison")
    width64.py   the protocol at head width 64 and its instances (cpu, gpu, gpuchoice; 10 epochs)
    scale.py     the quick comparison on one GPU: width64's arms at its GPU choice, ViT-S's heads, 2 seeds
"""
from __future__ import annotations

from speccond.harness.protocol.experiments import fair, scale, width64
from speccond.harness.protocol.experiments.spec import Protocol

PROTOCOLS = {  # speccond protocol run NAME: the config function and its arguments
    "fair": (fair.get_config, {}),
    "width64": (width64.get_config, {}),
    "width64-10ep": (width64.get_config, {"epochs": 10}),
    "width64-gpu": (width64.get_config, {"instance": "gpu"}),
    "width64-gpu-10ep": (width64.get_config, {"instance": "gpu", "epochs": 10}),
    "width64-gpuchoice": (width64.get_config, {"instance": "gpuchoice"}),
    "scale-gpu": (scale.get_config, {}),
}


def protocol(name: str, smoke: bool = False) -> Protocol:
    """The protocol registered as ``name``; ``smoke`` shrinks it for tests."""
    if name not in PROTOCOLS:
        raise ValueError(f"unknown protocol {name!r}; the published ones: {', '.join(PROTOCOLS)}")
    config, arguments = PROTOCOLS[name]
    return config(smoke=smoke, **arguments)

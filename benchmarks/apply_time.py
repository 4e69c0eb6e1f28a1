"""What speccond.apply and then ``print(report)`` cost, paired against building the plain model (docs/BENCHMARKS.md).

The targets (docs/BENCHMARKS.md): on a timm ViT-B/16, apply + print(report) within 1.5 s on one quiet core; on a decoder of
TinyLlama-1.1B's shape (22 layers, width 2048, 32 heads, 4 key/value heads, built from config) within 30 s
and at most twice the model's memory.

Each repetition runs in a fresh process on one thread: it imports timm or transformers (not timed), builds
the model from config (timed: the plain construction the others are paired with), then times ``speccond.apply(model, config)`` and ``str(report)``
(the per-head spectra print shows are computed on that first print; the whole blocks' wait for report.compute()). Memory: the process's peak resident set while
apply and the report run (the peak is reset after construction, /proc/self/clear_refs), against the
bytes of the model's parameters and buffers. Printed per model and correction: the medians of each time,
the paired ratio (apply + print) / construction per repetition, and the load average before and after
(single times drift a lot while other processes share the cores; the ratio drifts less).

Command (from the repository root; ``taskset -c 0`` keeps it on one core):

    OMP_NUM_THREADS=1 taskset -c 0 .venv/bin/python benchmarks/apply_time.py                             # ViT-B/16
    OMP_NUM_THREADS=1 taskset -c 0 .venv/bin/python benchmarks/apply_time.py --model tinyllama --reps 1  # TinyLlama shape
    .venv/bin/python benchmarks/apply_time.py --reps 1 --corrections identity             # a smoke run
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings

TARGETS = {"vit_base_patch16_224": (1.5, None), "tinyllama": (30.0, 2.0)}  # (seconds, peak memory / model)
CONFIGS = {"identity": {"lam": 10.0}, "svd": {}}  # SpectralConfig fields: the paper's lam = 10; the default, svd per head


def build(model_name: str):
    """The plain model, built from config; its library is imported by :func:`imported` before the timing."""
    if model_name == "tinyllama":
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(  # TinyLlama-1.1B's shape
            vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
            num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=2048,
        )
        return LlamaForCausalLM(config)
    import timm

    return timm.create_model(model_name, pretrained=False)


def imported(model_name: str) -> None:
    """Import the library :func:`build` uses, with its model classes."""
    if model_name == "tinyllama":
        import transformers.models.llama.modeling_llama  # noqa: F401
    else:
        import timm  # noqa: F401


def _peak_rss_bytes() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM"))


def one_repetition(model_name: str, correction: str) -> dict:
    """Figures of one repetition, in this process: build, apply, print."""
    import torch

    import speccond

    torch.set_num_threads(1)
    imported(model_name)  # not timed: importing timm or transformers is no part of building a model
    start = time.perf_counter()
    model = build(model_name)
    built = time.perf_counter() - start
    model_bytes = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # resets the peak resident set to the current one
    before = _peak_rss_bytes()
    config = speccond.SpectralConfig(**CONFIGS[correction])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lam = 10's collapse warning, expected here
        start = time.perf_counter()
        report = speccond.apply(model, config)
        applied = time.perf_counter() - start
    start = time.perf_counter()
    text = str(report)
    printed = time.perf_counter() - start
    return {"build_s": built, "apply_s": applied, "print_s": printed, "lines": len(text.splitlines()),
            "rss_before": before, "peak_rss": _peak_rss_bytes(), "model_bytes": model_bytes}


def run(model_name: str, correction: str, reps: int) -> None:
    figures = []
    for _ in range(reps):
        child = subprocess.run(
            [sys.executable, __file__, "--child", model_name, correction],
            capture_output=True, text=True, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        figures.append(json.loads(child.stdout.strip().splitlines()[-1]))
    median = lambda key: statistics.median(f[key] for f in figures)  # noqa: E731
    ratios = [(f["apply_s"] + f["print_s"]) / f["build_s"] for f in figures]
    both = [f["apply_s"] + f["print_s"] for f in figures]
    seconds, memory = TARGETS.get(model_name, (None, None))
    memory_ratio = max(f["peak_rss"] / f["model_bytes"] for f in figures)
    print(f"{model_name}, {correction} ({figures[0]['lines']} report lines), {reps} repetition(s):")
    print(f"  build (plain model) median {median('build_s'):7.2f} s")
    print(f"  apply               median {median('apply_s'):7.2f} s")
    print(f"  print(report)       median {median('print_s'):7.2f} s")
    print(f"  apply + print       median {statistics.median(both):7.2f} s  (all: "
          + ", ".join(f"{b:.2f}" for b in both) + (f"; target {seconds:g} s)" if seconds else ")"))
    print(f"  (apply + print) / build, paired: median {statistics.median(ratios):.3f}  (all: "
          + ", ".join(f"{r:.3f}" for r in ratios) + ")")
    print(f"  peak RSS during apply + print {max(f['peak_rss'] for f in figures) / 2**30:.2f} GiB, model "
          f"{figures[0]['model_bytes'] / 2**30:.2f} GiB: ratio {memory_ratio:.2f}"
          + (f" (target <= {memory:g})" if memory else "")
          + f"; above the process after construction: +{max(f['peak_rss'] - f['rss_before'] for f in figures) / 2**30:.2f} GiB")


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        print(json.dumps(one_repetition(sys.argv[2], sys.argv[3])))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="repetitions per model and correction (default 3)")
    parser.add_argument("--model", default="vit_base_patch16_224",
                        help="a timm model name, or tinyllama (a LlamaForCausalLM of TinyLlama-1.1B's shape); built from config")
    parser.add_argument("--corrections", nargs="+", choices=sorted(CONFIGS), default=["identity", "svd"])
    args = parser.parse_args()
    print(f"1 thread per process, load average before {os.getloadavg()[0]:.2f}")
    for correction in args.corrections:
        run(args.model, correction, args.reps)
    print(f"load average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

"""Overhead of spectral conditioning on a small timm ViT, on CPU: time, peak memory and FLOPs.

What it measures (all against the same plain model):

- Training step time (zero_grad + forward + cross-entropy + backward + AdamW step, random data, the same
  batch for every arm) for seven arms, each a deep copy of one initial model with its own optimiser:
      plain          no correction
      id-weight      C = lam * I_k, weight backend (parametrization: W + C is formed every forward)
      id-activation  C = lam * I_k, activation backend (timm's qkv is an nn.Linear: F.linear(x, W + C, b), the
                     weight stays a plain Parameter)
      svd-never      C = sigma_max U V^T per head, weight backend, computed once, never refreshed
      svd-every      the same, speccond.refresh(model) after every optimiser step (inside the timed region)
      plain-again    a second plain copy (timing only): the A/A control, whose ratio shows the noise floor
      by-hand        the plain model with lam * I added to each q, k, v block of qkv by hand (timing only):
                     the same function without speccond, against which the identity arms are also paired
  Subnormal floats are flushed to zero (torch.set_flush_denormal(True); --keep-subnormals to keep them):
  lam = 10 makes attention nearly one-hot, the softmax fills with subnormals, and this CPU computes them
  slowly, a cost of the function (by-hand pays it too), not of speccond.
  Timing is paired and interleaved: at every step index one step of each arm runs, in an order that rotates
  with the step index, each timed with time.perf_counter; the ratio arm / plain is taken per step index and
  the report gives the median paired ratio with its interquartile range, plus the median ms per step.
  Single times drift (about 5 % on a quiet machine, far more while other processes share the two cores),
  so only the paired ratios are meant to be compared; the load average is printed with the results.
- Inference: speccond.apply then speccond.remove(model, merge=True) against the plain model, eval mode,
  torch.no_grad(), paired and interleaved in the same way; median ratio.
- Peak memory, two ways, ratio against plain:
  tensor peak (the figure the memory target is checked on): torch.profiler(profile_memory=True) over one
  training step, after a first step has allocated the AdamW state: the peak of allocated-minus-freed CPU
  tensor bytes, plus the bytes that live between steps (parameters, buffers such as C, AdamW state).
  The CPU analogue of torch.cuda.max_memory_allocated, and deterministic.
  process peak RSS: each arm runs a few training steps in a fresh subprocess (this script re-invoked with
  a hidden flag; the five run at the same time, which changes their wall time, not their RSS). Just
  before the first step the child resets its peak resident set (writes 5 to /proc/self/clear_refs); after
  the last it reads VmHWM from /proc/self/status. This includes the torch and timm libraries (about
  0.85 GiB here), allocator slack (a few per cent of run-to-run scatter), and library code paged in by
  speccond.apply (its condition-number report runs SVDs): a whole-process view. resource.getrusage's
  ru_maxrss is not used: it cannot be reset, `import torch` alone nearly sets it at small batches, and a
  child started by fork/exec can inherit the parent's high-water mark (it read the same number for
  every arm in a first version of this script).
- FLOPs of one training step with torch.utils.flop_counter.FlopCounterMode. It counts only matmul-like
  aten ops (mm, addmm, bmm, convolution, scaled-dot-product attention, ...); the elementwise work of the
  correction (index_put on the (3D, D) weight for both identity arms, W + C for svd) is not counted. The paper's
  analytic extra, 1/(2D) of the q, k, v projection FLOPs, is printed next to the counted figures, with
  the analytic element counts of what the counter leaves out.

Command (from the repository root):

    .venv/bin/python benchmarks/overhead.py                 # full run (batch 128, 20 paired steps)
    .venv/bin/python benchmarks/overhead.py --quick         # smoke run (batch 16, 6 paired steps)
    .venv/bin/python benchmarks/overhead.py --json out.json # also write the results as JSON

Expected run time on the 2-core development machine: full run about 7 minutes with at most one other busy
process (a plain training step at batch 128 takes about 1.6-1.8 s here, not 0.86 s: one step is about
133 GFLOP by FlopCounterMode and a 2048^2 matmul reaches about 62 GFLOP/s on the two cores), 10-12
minutes measured while other processes shared the cores; --quick takes 1.5-4.5 minutes, mostly imports
of the five memory subprocesses. The profiler prints a few lines to stderr; they can be ignored.
"""
from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

import speccond

warnings.filterwarnings("ignore", category=DeprecationWarning)

EMBED_DIM = 192
DEPTH = 6
NUM_HEADS = 3
IMG_SIZE = 32
PATCH_SIZE = 4
NUM_CLASSES = 10
TOKENS = (IMG_SIZE // PATCH_SIZE) ** 2 + 1  # 65: 64 patches + class token
LAM = 10.0
SEED = 0

ARM_CONFIGS: dict[str, Optional[speccond.SpectralConfig]] = {
    "plain": None,
    "id-weight": speccond.SpectralConfig(lam=LAM, correction="identity", backend="weight"),
    "id-activation": speccond.SpectralConfig(lam=LAM, correction="identity", backend="activation"),
    "svd-never": speccond.SpectralConfig(lam=LAM, correction="svd", granularity="head", backend="weight"),
    "svd-every": speccond.SpectralConfig(lam=LAM, correction="svd", granularity="head", backend="weight"),
}
REFRESH_EVERY_STEP = {"svd-every"}
CONTROL = "plain-again"  # a second plain copy, timed only: its ratio to plain shows the noise floor (A/A)
BY_HAND = "by-hand"  # timed only: the plain model with lam * I added to each q, k, v block of qkv by hand
TARGETS = {
    "identity training ratio": 1.01,  # against plain
    "identity training ratio vs by-hand": 1.03,  # against the same function built by hand
    "merged inference ratio": 1.00,
    "identity memory ratio": 1.01,
}
INFERENCE_TOLERANCE = 0.01  # the merged model is checked against 1.00 +- this


# -- model, arms, one step ---------------------------------------------------------------------------
def build_model() -> nn.Module:
    import timm

    torch.manual_seed(SEED)
    return timm.create_model(
        "vit_tiny_patch16_224",
        pretrained=False,
        img_size=IMG_SIZE,
        patch_size=PATCH_SIZE,
        embed_dim=EMBED_DIM,
        depth=DEPTH,
        num_heads=NUM_HEADS,
        num_classes=NUM_CLASSES,
    )


@dataclass
class Arm:
    name: str
    model: nn.Module
    optimizer: torch.optim.Optimizer
    refresh: bool
    times: list[float] = field(default_factory=list)  # seconds per timed step


def make_arm(name: str, base: nn.Module) -> Arm:
    model = copy.deepcopy(base)
    config = ARM_CONFIGS.get(name)  # None: plain, the A/A control, or the function built by hand
    if config is not None:
        speccond.apply(model, config)
    if name == BY_HAND:  # W + lam I_k on each of the q, k, v blocks of timm's fused (3D, D) qkv weight
        with torch.no_grad():
            for block in model.blocks:
                block.attn.qkv.weight.view(3, EMBED_DIM, EMBED_DIM).add_(LAM * torch.eye(EMBED_DIM))
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return Arm(name, model, optimizer, refresh=name in REFRESH_EVERY_STEP)


def make_batch(step: int, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 + step)
    images = torch.randn(batch, 3, IMG_SIZE, IMG_SIZE, generator=gen)  # (B, 3, 32, 32)
    labels = torch.randint(0, NUM_CLASSES, (batch,), generator=gen)  # (B,)
    return images, labels


def train_step(arm: Arm, images: torch.Tensor, labels: torch.Tensor) -> None:
    arm.optimizer.zero_grad(set_to_none=True)
    logits = arm.model(images)  # (B, classes)
    F.cross_entropy(logits, labels).backward()
    arm.optimizer.step()
    if arm.refresh:
        speccond.refresh(arm.model)


def timed(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def rotated(items: list, shift: int) -> list:
    shift %= len(items)
    return items[shift:] + items[:shift]


# -- statistics --------------------------------------------------------------------------------------
def paired_summary(times: list[float], reference: list[float]) -> dict:
    ratios = [t / r for t, r in zip(times, reference)]
    q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
    return {
        "median_ms": 1e3 * statistics.median(times),
        "median_ratio": statistics.median(ratios),
        "ratio_q1": q1,
        "ratio_q3": q3,
        "steps": len(ratios),
    }


# -- training time -----------------------------------------------------------------------------------
def measure_training(base: nn.Module, batch: int, steps: int, warmup: int) -> dict[str, dict]:
    arms = [make_arm(name, base) for name in [*ARM_CONFIGS, CONTROL, BY_HAND]]  # arms[0] is plain
    for step in range(warmup + steps):
        images, labels = make_batch(step, batch)
        for arm in rotated(arms, step):
            elapsed = timed(lambda: train_step(arm, images, labels))
            if step >= warmup:
                arm.times.append(elapsed)
    plain, by_hand = arms[0].times, arms[-1].times
    out = {arm.name: paired_summary(arm.times, plain) for arm in arms}
    for arm in arms:  # the same function (lam * I) without speccond: the overhead of speccond itself
        if arm.name.startswith("id-"):
            out[arm.name]["vs_by_hand"] = paired_summary(arm.times, by_hand)
    return out


# -- inference time ----------------------------------------------------------------------------------
def merged_copy(base: nn.Module) -> nn.Module:
    model = copy.deepcopy(base)
    speccond.apply(model, ARM_CONFIGS["id-weight"])
    speccond.remove(model, merge=True)
    return model


def measure_inference(base: nn.Module, batch: int, steps: int, warmup: int) -> dict:
    models = {"plain": copy.deepcopy(base).eval(), "merged": merged_copy(base).eval()}
    times: dict[str, list[float]] = {name: [] for name in models}
    names = list(models)
    with torch.no_grad():
        for step in range(warmup + steps):
            images, _ = make_batch(step, batch)
            for name in rotated(names, step):
                elapsed = timed(lambda: models[name](images))
                if step >= warmup:
                    times[name].append(elapsed)
    summary = paired_summary(times["merged"], times["plain"])
    summary["plain_median_ms"] = 1e3 * statistics.median(times["plain"])
    return summary


# -- peak memory (one fresh process per arm) ---------------------------------------------------------
def proc_status_kib(field_name: str) -> int:
    """A memory field of /proc/self/status (VmRSS, VmHWM), in KiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field_name} not in /proc/self/status")


def reset_peak_rss() -> None:
    """Set the peak resident set (VmHWM) back to the current one (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def memory_child(name: str, batch: int, steps: int) -> dict:
    """Runs inside the subprocess: build the arm, reset the peak, run ``steps`` training steps, read the peak."""
    arm = make_arm(name, build_model())
    images, labels = make_batch(0, batch)
    gc.collect()
    reset_peak_rss()
    rss_before = proc_status_kib("VmRSS")  # torch + timm + model; optimiser state not yet allocated
    for _ in range(steps):
        train_step(arm, images, labels)
    peak = proc_status_kib("VmHWM")
    return {"peak_kib": peak, "rss_before_kib": rss_before, "step_rise_kib": peak - rss_before}


def start_memory_child(name: str, batch: int, steps: int, threads: int) -> subprocess.Popen:
    command = [
        sys.executable, os.path.abspath(__file__), "--_memory-arm", name,
        "--batch", str(batch), "--threads", str(threads), "--memory-steps", str(steps),
    ]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def child_result(child: subprocess.Popen) -> dict:
    stdout, stderr = child.communicate()
    if child.returncode != 0:
        raise RuntimeError(f"memory subprocess failed ({child.returncode}):\n{stderr}")
    return json.loads(stdout.strip().splitlines()[-1])


def measure_all_memory(batch: int, steps: int, threads: int) -> dict[str, dict]:
    """One fresh process per arm, all started at once: each one's RSS is its own, only the wall time is shared."""
    children = {name: start_memory_child(name, batch, steps, threads) for name in ARM_CONFIGS}
    results = {name: child_result(child) for name, child in children.items()}
    plain = results["plain"]
    for result in results.values():
        result["peak_ratio"] = result["peak_kib"] / plain["peak_kib"]
        result["step_rise_ratio"] = result["step_rise_kib"] / plain["step_rise_kib"]
    return results


def persistent_tensor_bytes(arm: Arm) -> int:
    """Bytes of the tensors that live between steps: parameters, buffers (C included), AdamW state."""
    tensors = list(arm.model.parameters()) + list(arm.model.buffers())
    tensors += [t for state in arm.optimizer.state.values() for t in state.values() if torch.is_tensor(t)]
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values())


def step_peak_bytes(arm: Arm, images: torch.Tensor, labels: torch.Tensor) -> int:
    """Peak of (allocated - freed) CPU tensor bytes over one training step, from the profiler's memory events."""
    arm.optimizer.zero_grad(set_to_none=True)  # outside the profile: frees of older blocks are not recorded
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        train_step(arm, images, labels)
    # kineto's raw events: one "[memory]" event per allocation (+bytes) or free (-bytes)
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    live = peak = 0
    for event in events:
        live += event.nbytes()
        peak = max(peak, live)
    return peak


def tensor_memory(name: str, base: nn.Module, batch: int) -> dict:
    arm = make_arm(name, base)
    images, labels = make_batch(0, batch)
    train_step(arm, images, labels)  # allocates the AdamW state
    persistent = persistent_tensor_bytes(arm)
    step_peak = step_peak_bytes(arm, images, labels)
    return {"persistent_bytes": persistent, "step_peak_bytes": step_peak, "peak_bytes": persistent + step_peak}


def measure_tensor_memory(base: nn.Module, batch: int) -> dict[str, dict]:
    results = {name: tensor_memory(name, base, batch) for name in ARM_CONFIGS}
    plain = results["plain"]
    for result in results.values():
        result["peak_ratio"] = result["peak_bytes"] / plain["peak_bytes"]
    return results


# -- FLOPs -------------------------------------------------------------------------------------------
def count_flops(name: str, base: nn.Module, batch: int) -> dict:
    arm = make_arm(name, base)
    images, labels = make_batch(0, batch)
    with FlopCounterMode(display=False) as counter:
        train_step(arm, images, labels)
    per_module = counter.get_flop_counts()
    qkv = sum(sum(ops.values()) for module, ops in per_module.items() if module.endswith("attn.qkv"))
    return {"total": counter.get_total_flops(), "qkv": qkv}


def measure_flops(base: nn.Module, batch: int) -> dict[str, dict]:
    results = {name: count_flops(name, base, batch) for name in ARM_CONFIGS}
    plain = results["plain"]
    for result in results.values():
        result["total_ratio"] = result["total"] / plain["total"]
        result["qkv_ratio"] = result["qkv"] / plain["qkv"] if plain["qkv"] else float("nan")
    return results


def analytic_flops(batch: int) -> dict:
    """The paper's count (one op per element of X C) and what each backend does that the counter skips."""
    d, n, b = EMBED_DIM, TOKENS, batch
    qkv_forward = 2 * b * n * d * (3 * d)  # X (B*N, D) @ W^T (D, 3D)
    return {
        "paper_extra_fraction": 1 / (2 * d),
        "qkv_forward_flops_per_layer": qkv_forward,
        # both identity arms: index_put adds lam to 3D entries of W (plus a copy of the (3D, D) weight)
        "weight_backend_adds_per_layer_forward": 3 * d,
        # the activation backend's hook on a Linear-like module without nn.Linear's forward (Conv1D):
        # lam * x[..., :k] added to three output slices, (B, N, 3D) elements; backward about the same again
        "activation_hook_elementwise_per_layer_forward": 2 * b * n * 3 * d,
    }


# -- report ------------------------------------------------------------------------------------------
def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def print_report(args: argparse.Namespace, results: dict, elapsed_s: float) -> None:
    training, tensors, memory = results["training"], results["tensor_memory"], results["memory"]
    flops, inference, analytic = results["flops"], results["inference"], results["analytic"]
    mib = 1 / 2**20
    print()
    print(f"speccond overhead: timm ViT D={EMBED_DIM} depth={DEPTH} heads={NUM_HEADS} tokens={TOKENS}, "
          f"batch {args.batch}, {args.steps} paired steps after {args.warmup} warm-up, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}, lam {LAM:g}, subnormals "
          f"{'kept' if args.keep_subnormals else 'flushed to zero (torch.set_flush_denormal)'}")
    header = (f"{'arm':<14} {'ms/step':>8} {'ratio vs plain [IQR]':>26} {'tensor MiB':>10} {'ratio':>7} "
              f"{'RSS MiB':>8} {'ratio':>7} {'FLOPs ratio':>11}")
    print(header)
    print("-" * len(header))
    for name in ARM_CONFIGS:
        t, tm, m, f = training[name], tensors[name], memory[name], flops[name]
        ratio = f"{t['median_ratio']:.4f} [{t['ratio_q1']:.4f}, {t['ratio_q3']:.4f}]"
        print(f"{name:<14} {t['median_ms']:>8.1f} {ratio:>26} {tm['peak_bytes'] * mib:>10.1f} "
              f"{tm['peak_ratio']:>7.4f} {m['peak_kib'] / 1024:>8.1f} {m['peak_ratio']:>7.4f} "
              f"{f['total_ratio']:>11.6f}")
    control = training[CONTROL]
    ratio = f"{control['median_ratio']:.4f} [{control['ratio_q1']:.4f}, {control['ratio_q3']:.4f}]"
    print(f"{CONTROL:<14} {control['median_ms']:>8.1f} {ratio:>26}   A/A control: plain timed twice, the noise floor")
    hand = training[BY_HAND]
    ratio = f"{hand['median_ratio']:.4f} [{hand['ratio_q1']:.4f}, {hand['ratio_q3']:.4f}]"
    print(f"{BY_HAND:<14} {hand['median_ms']:>8.1f} {ratio:>26}   W + lam I built by hand, no speccond (same function)")
    for name in ("id-weight", "id-activation"):
        versus = training[name]["vs_by_hand"]
        ratio = f"{versus['median_ratio']:.4f} [{versus['ratio_q1']:.4f}, {versus['ratio_q3']:.4f}]"
        print(f"{name + ' / hand':<22} {ratio:>26}   paired, against the same function built by hand")
    inf = f"{inference['median_ratio']:.4f} [{inference['ratio_q1']:.4f}, {inference['ratio_q3']:.4f}]"
    print(f"{'merged (inf.)':<14} {inference['median_ms']:>8.1f} {inf:>26}   "
          f"plain inference {inference['plain_median_ms']:.1f} ms (eval, no_grad)")
    print()
    print("ms/step: median single-step time (noisy); ratio: median of the per-step arm/plain ratios, "
          "interquartile range in brackets.")
    print("tensor MiB: parameters + buffers + AdamW state + profiler peak of live tensor bytes over one step.")
    print(f"RSS MiB: peak resident set of a fresh process over {args.memory_steps} training steps "
          "(VmHWM, reset just before them; includes Python, torch, timm).")
    print("FLOPs ratio: FlopCounterMode total of one training step; it counts matmul-like aten ops only.")
    # From totals: FlopCounterMode's per-module attribution of the qkv backward differs between arms, so
    # the attn.qkv module figures are not comparable.
    extra = (flops["id-activation"]["total"] - flops["plain"]["total"]) / flops["plain"]["qkv"]
    print(f"q,k,v projection FLOPs: paper's analytic extra 1/(2D) = {analytic['paper_extra_fraction']:.4%}; "
          f"counted extra (id-activation, total minus plain over plain's qkv) = {extra:.4%}. Per layer and forward:")
    print(f"  qkv matmul {analytic['qkv_forward_flops_per_layer']:,} FLOPs (counted); not counted: weight backend "
          f"{analytic['weight_backend_adds_per_layer_forward']:,} adds (index_put on W, either backend here); the "
          f"activation backend's hook (Conv1D) would add ~{analytic['activation_hook_elementwise_per_layer_forward']:,} "
          "(lam * x added to output slices).")
    print("  svd-every's extra counted FLOPs are the matmuls inside the refresh (U V^T per head; the SVDs "
          "themselves are not counted).")
    print()
    max_train, max_memory = TARGETS["identity training ratio"], TARGETS["identity memory ratio"]
    id_ratios = [training[n]["median_ratio"] for n in ("id-weight", "id-activation")]
    id_memory = [tensors[n]["peak_ratio"] for n in ("id-weight", "id-activation")]
    id_rss = [memory[n]["peak_ratio"] for n in ("id-weight", "id-activation")]
    print("targets:")
    print(f"  identity training ratio <= {max_train}: weight {id_ratios[0]:.4f} {verdict(id_ratios[0] <= max_train)}, "
          f"activation {id_ratios[1]:.4f} {verdict(id_ratios[1] <= max_train)}")
    hand_max = TARGETS["identity training ratio vs by-hand"]
    hand = [training[n]["vs_by_hand"]["median_ratio"] for n in ("id-weight", "id-activation")]
    print(f"  identity training ratio vs by-hand <= {hand_max}: weight {hand[0]:.4f} {verdict(hand[0] <= hand_max)}, "
          f"activation {hand[1]:.4f} {verdict(hand[1] <= hand_max)}")
    print(f"  (noise floor, A/A control {control['median_ratio']:.4f} [{control['ratio_q1']:.4f}, "
          f"{control['ratio_q3']:.4f}]: a 1 % timing verdict means little when this IQR is wider than +-1 %)")
    merged_ok = abs(inference["median_ratio"] - TARGETS["merged inference ratio"]) <= INFERENCE_TOLERANCE
    print(f"  merged inference ratio {TARGETS['merged inference ratio']:.2f} (+-{INFERENCE_TOLERANCE}): "
          f"{inference['median_ratio']:.4f} {verdict(merged_ok)}")
    print(f"  identity peak-memory ratio (tensor) <= {max_memory}: weight {id_memory[0]:.4f} "
          f"{verdict(id_memory[0] <= max_memory)}, activation {id_memory[1]:.4f} {verdict(id_memory[1] <= max_memory)} "
          f"(process RSS: {id_rss[0]:.4f}, {id_rss[1]:.4f})")
    load = results["load_average"]
    phases = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in results["phase_s"].items())
    print(f"total run time {elapsed_s:.0f} s ({phases}); 1-min load average {load['before'][0]:.2f} before, "
          f"{load['after'][0]:.2f} after ({os.cpu_count()} CPUs: above that, other processes competed)")


# -- command line ------------------------------------------------------------------------------------
def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20, help="paired training steps per arm (after warm-up)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds before the timed ones")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    parser.add_argument("--memory-steps", type=int, default=2, help="training steps in each memory subprocess")
    parser.add_argument("--quick", action="store_true", help="smoke run: batch 16, 6 steps, 1 warm-up")
    parser.add_argument("--keep-subnormals", action="store_true",
                        help="do not flush subnormal floats to zero (lam = 10 fills the softmax with them, which "
                             "slows this CPU down for reasons that are not the method's)")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    parser.add_argument("--_memory-arm", dest="memory_arm", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.batch, args.steps, args.warmup, args.memory_steps = 16, 6, 1, 2
    return args


def run_benchmark(args: argparse.Namespace) -> dict:
    base = build_model()
    phases = {
        "flops": lambda: measure_flops(base, args.batch),
        "tensor_memory": lambda: measure_tensor_memory(base, args.batch),
        "memory": lambda: measure_all_memory(args.batch, args.memory_steps, args.threads),
        "inference": lambda: measure_inference(base, args.batch, args.steps, args.warmup),
        "training": lambda: measure_training(base, args.batch, args.steps, args.warmup),
    }
    results: dict = {"config": {k: v for k, v in vars(args).items() if k != "memory_arm"}, "phase_s": {}}
    for name, measure in phases.items():
        start = time.perf_counter()
        results[name] = measure()
        results["phase_s"][name] = time.perf_counter() - start
    results["analytic"] = analytic_flops(args.batch)
    return results


def main(argv: Optional[list[str]] = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(not args.keep_subnormals)
    if args.memory_arm is not None:
        print(json.dumps(memory_child(args.memory_arm, args.batch, args.memory_steps)))
        return
    start, load_before = time.perf_counter(), os.getloadavg()
    results = run_benchmark(args)
    elapsed = time.perf_counter() - start
    results["run_time_s"] = elapsed
    results["load_average"] = {"before": load_before, "after": os.getloadavg()}
    print_report(args, results, elapsed)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=2)


if __name__ == "__main__":
    main()

"""Speed and memory of every form of every layer in ``ttr_edu.ops``, side by side, on the CPU.

For T in {256, 1024, 4096}, D_k = D_v = 64, B·H = 8 (B = 1, H = 8), fp32, forward only (``torch.no_grad``), this
prints per layer and form:

* the median wall time over ``--repeats`` rounds; within a round every form of a layer runs once, in turn, so the
  forms share whatever load the machine has at that moment (the speedup is measured side by side, in one run);
* the speedup against the layer's recurrent form (its median time divided by this form's);
* the peak memory allocated by PyTorch during one call, from the profiler's allocation records
  (``torch.profiler`` with ``profile_memory=True``: a running sum of every allocation and free, in order).

Then it checks the issue's targets: ``delta_rule_chunk`` ≥ 20× faster than ``delta_rule_recurrent`` at T = 4096,
``linear_attention_chunk`` at least as fast as ``linear_attention_parallel``, and chunk forms whose peak memory grows
linearly in T (×4 from T = 1024 to 4096; a T×T buffer would give ×16).

Usage::

    python benchmarks/ops_cpu.py                 # the full table (a few minutes on 2 busy cores)
    python benchmarks/ops_cpu.py --T 256 1024 --repeats 3 --layers delta_rule linear_attention
    python benchmarks/ops_cpu.py --T 4096 --layers delta_rule --chunk-size 32   # another chunk size

One thread by default: on a shared machine several threads per process contend and the timings swing by 10x or
more (``--threads`` to change it). Note that on a CPU the chunk forms win by replacing thousands of small per-token
ops with a few large matmuls, not by doing less arithmetic (they do about twice the FLOPs of the recurrence), so
their speedup grows with the number of cores the matmuls can use.

Local linear attention costs O(T² D_k²) (≈ 1.1 TFLOP per call at T = 4096); it is skipped above ``--max-T-lla``
(default 1024) and the table says so.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile

from ttr_edu import ops

B, H, D = 1, 8, 64


def make_inputs(T: int, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, D, generator=gen)
    k = ops.l2_norm(torch.randn(B, T, H, D, generator=gen))
    v = torch.randn(B, T, H, D, generator=gen)
    beta = torch.rand(B, T, H, generator=gen)
    g = -0.1 * torch.rand(B, T, H, generator=gen)
    return dict(q=q, k=k, v=v, beta=beta, g=g)


def _qkv(x):
    return x["q"], x["k"], x["v"]


#: layer -> form -> call(inputs, chunk_size). The recurrent form is the baseline of the speedup column.
LAYERS: dict[str, dict[str, Callable]] = {
    "linear_attention": {
        "recurrent": lambda x, C: ops.linear_attention_recurrent(*_qkv(x)),
        "parallel": lambda x, C: ops.linear_attention_parallel(*_qkv(x)),
        "chunk": lambda x, C: ops.linear_attention_chunk(*_qkv(x), chunk_size=C),
    },
    "delta_rule": {
        "recurrent": lambda x, C: ops.delta_rule_recurrent(*_qkv(x), x["beta"]),
        "parallel": lambda x, C: ops.delta_rule_parallel(*_qkv(x), x["beta"]),
        "chunk": lambda x, C: ops.delta_rule_chunk(*_qkv(x), x["beta"], chunk_size=C),
    },
    "gated_linear_attention": {
        "recurrent": lambda x, C: ops.gated_linear_attention_recurrent(*_qkv(x), x["g"]),
        "chunk": lambda x, C: ops.gated_linear_attention_chunk(*_qkv(x), x["g"], chunk_size=C),
    },
    "gated_delta_rule": {
        "recurrent": lambda x, C: ops.gated_delta_rule_recurrent(*_qkv(x), x["g"], x["beta"]),
        "chunk": lambda x, C: ops.gated_delta_rule_chunk(*_qkv(x), x["g"], x["beta"], chunk_size=C),
    },
    "rls": {
        "recurrent": lambda x, C: ops.rls_recurrent(*_qkv(x)),
        "exact": lambda x, C: ops.rls_exact(*_qkv(x)),
    },
    "softmax_attention": {"parallel": lambda x, C: ops.softmax_attention(*_qkv(x))},
    "local_linear_attention": {"parallel": lambda x, C: ops.local_linear_attention(*_qkv(x))},
}


def peak_memory_bytes(fn: Callable[[], object]) -> int:
    """Peak bytes held by PyTorch's CPU allocator during ``fn()``, above what was held before it.

    The profiler attributes each allocation and free to the op (or the ``[memory]`` record) where it happened;
    summing them in time order traces the live memory, whose maximum is the peak.
    """
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    records = sorted(
        (e for e in prof.events() if e.self_cpu_memory_usage != 0), key=lambda e: e.time_range.start
    )
    live = peak = 0
    for event in records:
        live += event.self_cpu_memory_usage
        peak = max(peak, live)
    return peak


def time_layer(forms: dict[str, Callable], inputs: dict, chunk_size: int, repeats: int) -> dict[str, float]:
    """Median seconds per form; each round runs every form once, in turn (side by side)."""
    for fn in forms.values():  # warm-up: first-call allocations and dispatch caches
        fn(inputs, chunk_size)
    samples: dict[str, list[float]] = {name: [] for name in forms}
    for _ in range(repeats):
        for name, fn in forms.items():
            start = time.perf_counter()
            fn(inputs, chunk_size)
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(times) for name, times in samples.items()}


def fmt_bytes(n: int) -> str:
    return f"{n / 2**20:9.1f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--T", type=int, nargs="+", default=[256, 1024, 4096], help="sequence lengths")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds per T (the median is printed)")
    parser.add_argument("--layers", nargs="+", default=list(LAYERS), choices=list(LAYERS))
    parser.add_argument("--chunk-size", type=int, default=64, help="chunk_size of the chunk forms (fla's 64)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: stable on a shared machine)")
    parser.add_argument("--max-T-lla", type=int, default=1024, help="largest T for local linear attention")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(
        f"ttr_edu.ops on CPU: B={B}, H={H}, D_k=D_v={D}, fp32, forward only; torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s); median of {args.repeats} rounds; chunk_size {args.chunk_size}\n"
    )
    header = f"{'layer':<24} {'form':<10} {'T':>5} {'median ms':>11} {'speedup':>9} {'peak MiB':>9}"
    print(header)
    print("-" * len(header))
    results: dict[tuple[str, str, int], tuple[float, int]] = {}
    with torch.no_grad():
        for layer in args.layers:
            forms = LAYERS[layer]
            for T in args.T:
                if layer == "local_linear_attention" and T > args.max_T_lla:
                    print(f"{layer:<24} {'parallel':<10} {T:>5}   skipped: O(T² D_k²), raise --max-T-lla to run")
                    continue
                inputs = make_inputs(T)
                medians = time_layer(forms, inputs, args.chunk_size, args.repeats)
                baseline = medians.get("recurrent")
                for name, fn in forms.items():
                    peak = peak_memory_bytes(lambda: fn(inputs, args.chunk_size))
                    results[layer, name, T] = (medians[name], peak)
                    speedup = f"{baseline / medians[name]:8.1f}x" if baseline else f"{'—':>9}"
                    print(f"{layer:<24} {name:<10} {T:>5} {medians[name] * 1e3:11.2f} {speedup} {fmt_bytes(peak)}")
            print()
    report_targets(results)


def report_targets(results: dict[tuple[str, str, int], tuple[float, int]]) -> None:
    print("targets")
    key_rec, key_chunk = ("delta_rule", "recurrent", 4096), ("delta_rule", "chunk", 4096)
    if key_rec in results and key_chunk in results:
        ratio = results[key_rec][0] / results[key_chunk][0]
        verdict = "met" if ratio >= 20 else "NOT met"
        print(f"  delta_rule_chunk vs delta_rule_recurrent at T=4096: {ratio:.1f}x (target >= 20x): {verdict}")
    for T in sorted({t for (_, _, t) in results}):
        par, chk = results.get(("linear_attention", "parallel", T)), results.get(("linear_attention", "chunk", T))
        if par and chk:
            ratio = par[0] / chk[0]
            verdict = "met" if ratio >= 1 else "NOT met"
            print(f"  linear_attention_chunk vs _parallel at T={T}: {ratio:.1f}x faster (target >= 1x): {verdict}")
    for (layer, form, T), (_, peak) in sorted(results.items()):
        small = results.get((layer, form, T // 4))
        if T == 4096 and small and form in ("chunk", "parallel"):
            growth = peak / small[1]
            shape = "linear" if growth < 6 else "quadratic"
            print(f"  peak memory of {layer}_{form}, T 1024 -> 4096: x{growth:.1f} ({shape} in T)")


if __name__ == "__main__":
    main()

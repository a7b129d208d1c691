"""Speed and memory of every form of every layer in ``ttr_edu.ops``, side by side, on the CPU.

For T in {256, 1024, 4096}, D_k = D_v = 64, B·H = 8 (B = 1, H = 8), fp32, forward only (``torch.no_grad``), this
prints per layer and form:

* the median time over ``--repeats`` rounds; within a round every form of a layer runs in turn (timed on its
  second consecutive call, see :func:`time_layer`), together with fla's naive chunk form of the layer and a
  reference matmul, so all of them share whatever load the machine has at that moment. The clock is the process's
  CPU time by default (``--clock cpu``): on a shared machine it counts the work done on our one thread, not the time
  spent waiting for a core (``--clock wall`` for wall time). The input policy's scans for NaN/inf are switched off
  (:func:`ttr_edu.finite_checks`, as a training loop on known-finite data does; ``--finite-checks on`` includes
  them): a pass or more over every input and the output that is not the algorithm, which fla's forms do not do
  and a profile by op names alone leaves out;
* the speedup against the layer's recurrent form (its median time divided by this form's);
* ``fla/ours``: for chunk forms, the time of flash-linear-attention's pure-PyTorch chunk form of the same layer at
  the same chunk size (``naive_chunk_linear_attn``, ``delta_rule_chunkwise``, ``naive_chunk_simple_gla``,
  ``naive_chunk_gated_delta_rule``) divided by ours: above 1, ours is faster. fla is an optional peer
  (``pip install -e .[bench]``); without it the column says so. fla has no pure-PyTorch chunk form of the per-key
  GLA. fla's delta rule reference is heads-first, so it is handed heads-first contiguous inputs (its best case);
* ``GFLOP/s`` and ``% mm``: for chunk forms, the FLOPs of the chunk algorithm (:func:`chunk_flops`) per second, and
  that rate as a fraction of the one-core rate of a 1024³ fp32 matmul timed in the same rounds;
* ``prod %``: for chunk forms, the share of the form's time spent in the ops that do its counted FLOPs (matrix
  products and triangular solves), from the same profiles as ``copy %``. With the rate targets the products' own
  rate is printed too: the counted FLOPs over the products' profiled self time, as a share of the matmul rate. It
  tells slow products from time spent elsewhere. (For ``gla_chunk`` the products include the in-chunk sums of the
  log decays, a product with a triangular matrix of ones that the FLOP count leaves out, so its products' own rate
  reads low.) Profiled times carry the profiler's cost per op, which falls mostly on the many small ops;
* ``copy %``: for chunk forms, the share of the form's time spent in ``aten::copy_`` and ``aten::cat`` (moving data
  between layouts), from ``torch.profiler`` in the same run: the median over ``--repeats`` profiled calls, each the
  self time of those ops over the self time of all ops of the call. Unlike a rate, this share hardly depends on the
  machine's memory system (30 % + 11 % for ``delta_rule_chunk`` before its blocks were read in place);
* the peak memory allocated by PyTorch during one call, from the profiler's allocation records
  (``torch.profiler`` with ``profile_memory=True``: a running sum of every allocation and free, in order).

Then it checks the speed targets of the chunk forms at T = 1024 and 4096 and prints each with "met" or "NOT met": every
chunk form spends under 10 % of its time in ``copy_``/``cat``; ``delta_rule_chunk`` runs at no less than 45 % of the
one-core matmul rate, ``gated_delta_rule_chunk`` and the per-key ``gla_chunk`` at no less than 35 %; every chunk form is
at least 1.2× as fast as fla's naive chunk form of the same layer (fla has none of per-key GLA). They count as met when
all of them hold in three consecutive runs. Also printed, as before: ``linear_attention_chunk`` against
``linear_attention_parallel``, and how the peak memory of the chunk forms grows from T = 1024 to 4096 (×4 linear, a
T×T buffer would give ×16). The CPU model and the load average before and after are printed with the numbers.

Usage::

    python benchmarks/ops_cpu.py                 # the full table (several minutes on 2 busy cores)
    python benchmarks/ops_cpu.py --T 1024 4096 --repeats 7 --layers delta_rule gated_linear_attention
    python benchmarks/ops_cpu.py --T 4096 --layers delta_rule --chunk-size 32   # another chunk size

One thread by default: on a shared machine several threads per process contend and the timings swing by 10x or
more (``--threads`` to change it). On a CPU the chunk forms win by replacing thousands of small per-token ops with a
few large matmuls, not by doing less arithmetic.

Two forms cost O(T² D_k²) time: local linear attention (≈ 1.1 TFLOP per call at T = 4096) and RLS's exact solve
(each token's regression summed from the definition, about 2 s per call at T = 1024 here). They are skipped above
``--max-T-quadratic`` (default 1024) and the table says so.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: fla's loader lives in tests/
from benchmarks._profiler_log import without_profiler_trace_points
from tests.helpers.fla_naive import fla_naive, fla_version
from ttr_edu import finite_checks, ops

B, H, D = 1, 8, 64


def make_inputs(T: int, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, D, generator=gen)
    k = ops.l2_norm(torch.randn(B, T, H, D, generator=gen))
    v = torch.randn(B, T, H, D, generator=gen)
    beta = torch.rand(B, T, H, generator=gen)
    g = -0.1 * torch.rand(B, T, H, generator=gen)
    gk = F.logsigmoid(torch.randn(B, T, H, D, generator=gen) + 4.0)  # per-key log decay, mostly near 0
    heads_first = {name: x.transpose(1, 2).contiguous() for name, x in dict(q=q, k=k, v=v, beta=beta).items()}
    return dict(q=q, k=k, v=v, beta=beta, g=g, gk=gk, heads_first=heads_first)


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
    "gla": {
        "recurrent": lambda x, C: ops.gla_recurrent(*_qkv(x), x["gk"]),
        "chunk": lambda x, C: ops.gla_chunk(*_qkv(x), x["gk"], chunk_size=C),
    },
    "rls": {
        "recurrent": lambda x, C: ops.rls_recurrent(*_qkv(x)),
        "exact": lambda x, C: ops.rls_exact(*_qkv(x)),
    },
    "softmax_attention": {"parallel": lambda x, C: ops.softmax_attention(*_qkv(x))},
    "local_linear_attention": {"parallel": lambda x, C: ops.local_linear_attention(*_qkv(x))},
}


#: Forms whose time and memory grow like T² D_k²: skipped above ``--max-T-quadratic``.
QUADRATIC_FORMS = {("local_linear_attention", "parallel"), ("rls", "exact")}


def fla_chunk_form(layer: str, chunk_size: int, T: int) -> Callable | str:
    """fla's pure-PyTorch chunk form of ``layer`` as ``call(inputs)``, or the reason there is none."""
    if fla_version() is None:
        return "fla not installed"
    if layer == "linear_attention":
        if chunk_size != 64 or T % 64:
            return "fla: C=64 | T only"  # naive_chunk_linear_attn hard-codes chunks of 64 and needs T % 64 == 0
        fn = fla_naive("linear_attn").naive_chunk_linear_attn
        return lambda x: fn(*_qkv(x))
    if layer == "delta_rule":
        if T % chunk_size:
            return "fla: C | T only"
        fn = fla_naive("delta_rule").delta_rule_chunkwise
        return lambda x: fn(*(x["heads_first"][n] for n in ("q", "k", "v", "beta")), chunk_size=chunk_size)
    if layer == "gated_linear_attention":
        fn = fla_naive("simple_gla").naive_chunk_simple_gla
        return lambda x: fn(*_qkv(x), x["g"], chunk_size=chunk_size)
    if layer == "gated_delta_rule":
        fn = fla_naive("gated_delta_rule").naive_chunk_gated_delta_rule
        return lambda x: fn(*_qkv(x), x["g"], x["beta"], chunk_size=chunk_size)
    if layer == "gla":
        return "no fla naive chunk"
    return ""


def chunk_flops(layer: str, T: int, C: int, D: int = D, heads: int = B * H) -> float:
    """FLOPs of a chunk form (a multiply-add counts 2; dense products as executed, masked halves included).

    Per chunk of C tokens, D_k = D_v = D:

    * linear attention, scalar and per-key GLA: Q Kᵀ, (·) V, Q S, Kᵀ V -> ``4 C² D + 4 C D²`` (the decays are
      elementwise, not counted);
    * delta rule, gated or not: K Kᵀ, Q Kᵀ, the triangular solve for ``[W U]`` (``C²`` per right-hand side, 2 D of
      them), (Q Kᵀ ⊙ M) u -> ``8 C² D``; W S, Q S, Kᵀ u -> ``6 C D²``. (fla's kernels form the C×C inverse and two
      more products, ``10 C² D + C³ / 3``: counting that would flatter ours.)
    """
    per_chunk = 8 * C * C * D + 6 * C * D * D if "delta_rule" in layer else 4 * C * C * D + 4 * C * D * D
    return per_chunk * -(-T // C) * heads


MATMUL_N = 1024


def matmul_probe() -> Callable[[], object]:
    """A 1024³ fp32 matmul (2.1 GFLOP): the one-core rate the chunk forms are measured against."""
    gen = torch.Generator().manual_seed(1)
    a, b = torch.randn(MATMUL_N, MATMUL_N, generator=gen), torch.randn(MATMUL_N, MATMUL_N, generator=gen)
    return lambda: a @ b


def tile_probe() -> Callable[[], object]:
    """512 products of 64×64 tiles (the chunk forms' tile at C = D = 64), batched as the chunk forms batch them: 8
    products of 64 tiles (a block of 8 chunks at B·H = 8). A best case: the same 1 MiB operands every time, so they
    stay in the L2 cache, where a block's buffers (about 9 MiB) do not all fit. The rate a chunk form could reach if
    it were nothing but its matmuls and they were all in cache, printed for context."""
    gen = torch.Generator().manual_seed(2)
    a, b = torch.randn(64, 64, 64, generator=gen), torch.randn(64, 64, 64, generator=gen)
    out = torch.empty(64, 64, 64)
    return lambda: [torch.bmm(a, b, out=out) for _ in range(8)]


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


def peak_memory_bytes(fn: Callable[[], object]) -> int:
    """Peak bytes held by PyTorch's CPU allocator during ``fn()``, above what was held before it.

    The profiler attributes each allocation and free to the op (or the ``[memory]`` record) where it happened;
    summing them in time order traces the live memory, whose maximum is the peak.
    """
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    records = sorted((e for e in prof.events() if e.self_cpu_memory_usage != 0), key=lambda e: e.time_range.start)
    live = peak = 0
    for event in records:
        live += event.self_cpu_memory_usage
        peak = max(peak, live)
    return peak


#: The ops that move data between layouts; :func:`time_shares` reports their share of a call's time.
DATA_MOVEMENT_OPS = ("aten::copy_", "aten::cat")
#: The ops that do the counted FLOPs (:func:`chunk_flops`): matrix products, batched or not, and triangular solves.
PRODUCT_OPS = (
    "aten::bmm",
    "aten::baddbmm",
    "aten::baddbmm_",
    "aten::mm",
    "aten::addmm",
    "aten::linalg_solve_triangular",
)


def time_shares(fn: Callable[[], object], calls: int) -> dict[str, float]:
    """The shares of ``fn()``'s time spent in :data:`DATA_MOVEMENT_OPS` (``"copy"``) and in :data:`PRODUCT_OPS`
    (``"products"``), and the products' self time in seconds (``"product_seconds"``): per profiled call, the ops'
    self time (over the self time of every op of the call, for a share); the median over ``calls`` calls (a
    preemption on a shared machine lands on one op of one call and would skew a single profile)."""
    samples: dict[str, list[float]] = {"copy": [], "products": [], "product_seconds": []}
    for _ in range(calls):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
        events = prof.key_averages()
        total = sum(e.self_cpu_time_total for e in events) or 1.0
        in_group = {
            group: sum(e.self_cpu_time_total for e in events if e.key in names)
            for group, names in (("copy", DATA_MOVEMENT_OPS), ("products", PRODUCT_OPS))
        }
        samples["copy"].append(in_group["copy"] / total)
        samples["products"].append(in_group["products"] / total)
        samples["product_seconds"].append(in_group["products"] * 1e-6)  # the profiler counts microseconds
    return {group: statistics.median(values) for group, values in samples.items()}


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``, as ``lscpu`` prints it), or what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def time_layer(forms: dict[str, Callable], repeats: int, clock: Callable[[], float]) -> dict[str, float]:
    """Median seconds per entry of ``forms`` (zero-argument calls); each round runs every entry in turn.

    Each entry is timed on its second consecutive call. The first, untimed, absorbs what the previous entry left
    behind: after the parallel form's T×T buffers are freed, the allocator hands the next call fresh pages, and
    their page faults (kernel time, counted by the CPU clock) slow the next entry down, whichever entry that is
    (``delta_rule_chunk`` at T = 1024 read 30 % of the matmul rate after the parallel form, 47 % after itself).
    Timed this way, every entry runs as it would in a loop that calls it again and again, and the rounds still
    interleave the entries, so they share the machine's load.
    """
    for fn in forms.values():  # warm-up: first-call allocations and dispatch caches
        fn()
    samples: dict[str, list[float]] = {name: [] for name in forms}
    for _ in range(repeats):
        for name, fn in forms.items():
            fn()  # untimed: settles the allocator after the previous entry
            start = clock()
            fn()
            samples[name].append(clock() - start)
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
    parser.add_argument("--clock", choices=list(CLOCKS), default="cpu", help="process CPU time or wall time")
    parser.add_argument(
        "--finite-checks",
        choices=["on", "off"],
        default="off",
        help="the input policy's NaN/inf scans of every input and output (ttr_edu.finite_checks); off by default",
    )
    parser.add_argument(
        "--max-T-quadratic",
        "--max-T-lla",
        type=int,
        default=1024,  # --max-T-lla: its old name
        help="largest T for the O(T² D_k²) forms (local linear attention, RLS's exact solve)",
    )
    args = parser.parse_args(argv)
    with finite_checks(args.finite_checks == "on"):
        run(args)


def run(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    clock = CLOCKS[args.clock]
    fla = fla_version()
    print(
        f"ttr_edu.ops on CPU: B={B}, H={H}, D_k=D_v={D}, fp32, forward only; torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s); median of {args.repeats} rounds of {args.clock} time; chunk_size "
        f"{args.chunk_size}; finite checks {args.finite_checks}; fla {fla or 'not installed'}; load average "
        f"{load()} on {os.cpu_count()} cores of {cpu_model()}\n"
    )
    header = (
        f"{'layer':<24} {'form':<10} {'T':>5} {'median ms':>11} {'speedup':>9} {'fla/ours':>20} {'GFLOP/s':>8} "
        f"{'% mm':>5} {'prod %':>7} {'copy %':>7} {'peak MiB':>9}"
    )
    print(header)
    print("-" * len(header))
    results: dict[tuple[str, str, int], tuple[float, int]] = {}
    fla_ratios: dict[tuple[str, int], float] = {}
    matmul_rates: list[float] = []
    probe, tiles = matmul_probe(), tile_probe()
    tile_rates: list[float] = []
    with torch.no_grad():
        for layer in args.layers:
            for T in args.T:
                too_long = T > args.max_T_quadratic
                skipped = [name for name in LAYERS[layer] if too_long and (layer, name) in QUADRATIC_FORMS]
                for name in skipped:
                    print(f"{layer:<24} {name:<10} {T:>5}   skipped: O(T² D_k²), raise --max-T-quadratic to run")
                forms = {name: fn for name, fn in LAYERS[layer].items() if name not in skipped}
                if not forms:
                    continue
                inputs = make_inputs(T)
                calls = {name: (lambda fn=fn: fn(inputs, args.chunk_size)) for name, fn in forms.items()}
                peer = fla_chunk_form(layer, args.chunk_size, T) if "chunk" in forms else ""
                if callable(peer):
                    calls["fla naive chunk"] = lambda: peer(inputs)
                calls["matmul"], calls["tiles"] = probe, tiles
                medians = time_layer(calls, args.repeats, clock)
                matmul_rate = 2 * MATMUL_N**3 / medians["matmul"]
                matmul_rates.append(matmul_rate)
                tile_rates.append(2 * 512 * 64**3 / medians["tiles"])
                baseline = medians.get("recurrent")
                for name, fn in forms.items():
                    peak = peak_memory_bytes(lambda: fn(inputs, args.chunk_size))
                    results[layer, name, T] = (medians[name], peak)
                    speedup = f"{baseline / medians[name]:8.1f}x" if baseline else f"{'—':>9}"
                    vs_fla, rate, share = f"{'—':>20}", f"{'—':>8}", f"{'—':>5}"
                    in_products = moved = f"{'—':>7}"
                    if name == "chunk":
                        if callable(peer):
                            fla_ratios[layer, T] = medians["fla naive chunk"] / medians[name]
                            vs_fla = f"{fla_ratios[layer, T]:19.2f}x"
                        else:
                            vs_fla = f"{peer:>20}"
                        flops = chunk_flops(layer, T, args.chunk_size)
                        rate = f"{flops / medians[name] / 1e9:8.1f}"
                        share = f"{100 * flops / medians[name] / matmul_rate:4.0f}%"
                        results[layer, "share", T] = (flops / medians[name] / matmul_rate, 0)
                        shares = time_shares(lambda: fn(inputs, args.chunk_size), args.repeats)
                        results[layer, "copy", T] = (shares["copy"], 0)
                        results[layer, "products", T] = (shares["products"], 0)
                        if shares["product_seconds"]:
                            own_rate = flops / shares["product_seconds"] / matmul_rate
                            results[layer, "product_rate", T] = (own_rate, 0)
                        in_products, moved = f"{100 * shares['products']:6.1f}%", f"{100 * shares['copy']:6.1f}%"
                    print(
                        f"{layer:<24} {name:<10} {T:>5} {medians[name] * 1e3:11.2f} {speedup} {vs_fla} {rate} "
                        f"{share} {in_products} {moved} {fmt_bytes(peak)}"
                    )
                if callable(peer):
                    print(f"{'  fla naive chunk form':<35} {T:>5} {medians['fla naive chunk'] * 1e3:11.2f}")
            print()
    if matmul_rates:
        print(
            f"one-core matmul ({MATMUL_N}³ fp32), timed in every round: "
            f"median {statistics.median(matmul_rates) / 1e9:.1f}"
            f" GFLOP/s (range {min(matmul_rates) / 1e9:.1f}–{max(matmul_rates) / 1e9:.1f} over the layers); "
            f"512 products of 64×64 tiles: median {statistics.median(tile_rates) / 1e9:.1f} GFLOP/s "
            f"({100 * statistics.median(tile_rates) / statistics.median(matmul_rates):.0f}% of it)"
        )
    print(f"load average after the run: {load()}\n")
    report_targets(results, fla_ratios, args.layers)


def load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


#: The rate targets: the chunk form's FLOP rate as a share of the one-core matmul rate.
RATE_TARGETS = {"delta_rule": 0.45, "gated_delta_rule": 0.35, "gla": 0.35}
#: The other targets: the share of time moving data (below), the speed against fla's naive form (at least).
COPY_TARGET, FLA_TARGET = 0.10, 1.2
TARGET_T = (1024, 4096)


def report_targets(results: dict[tuple[str, str, int], tuple[float, int]], fla_ratios: dict, layers) -> None:
    print("targets (T = 1024 and 4096, B·H = 8, D = 64, fp32, one thread; to hold in three consecutive runs)")
    verdict = lambda ok: "met" if ok else "NOT met"  # noqa: E731
    chunk_layers = [layer for layer in layers if "chunk" in LAYERS[layer]]
    for layer in chunk_layers:
        for T in TARGET_T:
            copies = results.get((layer, "copy", T))
            if copies is None:
                print(f"  {layer}_chunk at T={T}: not measured (add {T} to --T): NOT met")
                continue
            print(
                f"  {layer}_chunk at T={T}: {100 * copies[0]:.1f}% of its time in copy_/cat "
                f"(target < {100 * COPY_TARGET:.0f}%): {verdict(copies[0] < COPY_TARGET)}"
            )
    for layer, target in RATE_TARGETS.items():
        if layer not in chunk_layers:
            continue
        for T in TARGET_T:
            share = results.get((layer, "share", T))
            if share is None:
                continue
            products, own_rate = results.get((layer, "products", T)), results.get((layer, "product_rate", T))
            # the counted FLOPs over the products' own (profiled) time: slow products, or time spent elsewhere?
            ceiling = (
                f"; its products take {100 * products[0]:.0f}% of its profiled time and run at "
                f"{100 * own_rate[0]:.0f}% of the matmul rate by themselves"
                if products and own_rate
                else ""
            )
            print(
                f"  {layer}_chunk at T={T}: {100 * share[0]:.1f}% of the one-core matmul rate{ceiling} "
                f"(target >= {100 * target:.0f}%): {verdict(share[0] >= target)}"
            )
    for layer in chunk_layers:
        for T in TARGET_T:
            if (layer, "copy", T) not in results:
                continue
            ratio = fla_ratios.get((layer, T))
            if ratio is None:
                peer = fla_chunk_form(layer, 64, T)
                why = peer if isinstance(peer, str) and peer else "no fla peer"
                print(f"  {layer}_chunk vs fla's naive chunk form at T={T}: {why}, nothing to compare")
                continue
            print(
                f"  {layer}_chunk vs fla's naive chunk form at T={T}: fla/ours = {ratio:.2f} "
                f"(target >= {FLA_TARGET}): {verdict(ratio >= FLA_TARGET)}"
            )
    for T in sorted({t for (_, _, t) in results}):
        par, chk = results.get(("linear_attention", "parallel", T)), results.get(("linear_attention", "chunk", T))
        if par and chk:
            ratio = par[0] / chk[0]
            print(
                f"  linear_attention_chunk vs _parallel at T={T}: {ratio:.1f}x faster (target >= 1x): "
                f"{verdict(ratio >= 1)}"
            )
    for (layer, form, T), (_, peak) in sorted(results.items()):
        small = results.get((layer, form, T // 4))
        if T == 4096 and small and form in ("chunk", "parallel"):
            growth = peak / small[1]
            shape = "linear" if growth < 6 else "quadratic"
            print(f"  peak memory of {layer}_{form}, T 1024 -> 4096: x{growth:.1f} ({shape} in T)")


if __name__ == "__main__":
    with without_profiler_trace_points():
        main()

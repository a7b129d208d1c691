"""Speed of the Triton kernels (ttr_edu.kernels) on a CUDA GPU, printed side by side.

For B=8, H=16, D_k=D_v=128, T in {1024, 4096, 16384}, bf16 and fp32, and each layer (linear attention, delta
rule, gated delta rule), it prints:

* the median time of the kernel's forward pass (triton.testing.do_bench);
* its achieved TFLOP/s and GB/s, next to the device's measured ceilings (a large matmul in the same dtype, a
  large copy); the FLOPs are those of the chunk algorithm (model below), the bytes those of reading the inputs
  and writing the output once;
* the speedup against the PyTorch reference chunk form (ttr_edu.ops) on the same GPU;
* where flash-linear-attention is installed, the time ratio fla / ours of its chunked kernel (> 1: ours is faster);
* the relative error ‖ours − reference‖ / ‖reference‖, so a fast wrong kernel cannot pass unnoticed.

With ``--varlen`` every case also runs as a variable-length batch in fla's convention: the same B·T tokens packed in
one row as B sequences of unequal lengths (``cu_seqlens``, seeded), which the kernels run one program per sequence and
head. The per-key-gate GLA (``ttr_edu.ops.gla_chunk``) has no Triton kernel yet, so it is not benchmarked here.

Usage::

    python benchmarks/kernels_gpu.py                 # the full table (needs CUDA)
    python benchmarks/kernels_gpu.py --T 1024 --dtypes bf16 --layers delta_rule
    python benchmarks/kernels_gpu.py --varlen        # also packed variable-length batches (cu_seqlens)
    python benchmarks/kernels_gpu.py --dry-run       # no GPU: print the plan and the FLOP / byte model

Targets (what a GPU kernel must earn over the readable forms): at least 5x faster than the reference chunk form; at
least 0.5x fla's chunked kernel.
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import sys
from dataclasses import dataclass

import torch

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
LAYERS = ("linear_attention", "delta_rule", "gated_delta_rule")


@dataclass(frozen=True)
class Case:
    layer: str
    dtype: str
    B: int
    T: int
    H: int
    D: int
    chunk_size: int
    varlen: bool = False

    def flops(self) -> float:
        """FLOPs of the chunk algorithm (a multiply-add counts 2), summed over B·H heads and T/C chunks.

        Per chunk of C tokens with D_k = D_v = D:
        linear attention: Q Kᵀ, (Q Kᵀ ⊙ M) V, Q S, Kᵀ V -> 4 C² D + 4 C D²;
        delta rule: K Kᵀ, Q Kᵀ, T K, T V, (Q Kᵀ ⊙ M) U -> 10 C² D; W S, Q S, Kᵀ U -> 6 C D²;
        the triangular inverse C³/3 (gating adds O(C²) elementwise work, not counted).
        """
        C, D = self.chunk_size, self.D
        per_chunk = (
            4 * C * C * D + 4 * C * D * D
            if self.layer == "linear_attention"
            else (10 * C * C * D + 6 * C * D * D + C**3 / 3)
        )
        if self.varlen:  # each sequence pads its own last chunk
            n_chunks = sum(-(-length // C) for length in varlen_lengths(self))
            return per_chunk * n_chunks * self.H
        n_chunks = -(-self.T // C)
        return per_chunk * n_chunks * self.B * self.H

    def bytes(self) -> float:
        """Bytes that must move at least once: q, k, v (and beta, g) read, o written, the final state written."""
        element = torch.finfo(DTYPES[self.dtype]).bits // 8
        tokens = self.B * self.T * self.H
        per_token = {"linear_attention": 0, "delta_rule": 1, "gated_delta_rule": 2}[self.layer]
        return tokens * (4 * self.D + per_token) * element + self.B * self.H * self.D * self.D * 4


def varlen_lengths(case: Case) -> list[int]:
    """B sequence lengths that sum to B·T, from T/4 to 7T/4 (seeded): the varlen case packs the same tokens."""
    gen = torch.Generator().manual_seed(case.T)
    weights = 0.25 + 1.5 * torch.rand(case.B, generator=gen, dtype=torch.float64)
    lengths = [max(1, int(w)) for w in (weights / weights.sum() * case.B * case.T).tolist()]
    lengths[-1] += case.B * case.T - sum(lengths)
    return lengths


def cu_seqlens_of(case: Case, device: str) -> torch.Tensor:
    offsets = torch.tensor([0, *varlen_lengths(case)], device=device).cumsum(0)
    return offsets.to(torch.int64)


def make_inputs(case: Case, device: str):
    gen = torch.Generator(device=device).manual_seed(0)
    shape = (1, case.B * case.T, case.H, case.D) if case.varlen else (case.B, case.T, case.H, case.D)
    dtype = DTYPES[case.dtype]
    q = torch.randn(shape, device=device, generator=gen).to(dtype)
    k = torch.nn.functional.normalize(torch.randn(shape, device=device, generator=gen), dim=-1).to(dtype)
    v = torch.randn(shape, device=device, generator=gen).to(dtype)
    beta = torch.rand(shape[:3], device=device, generator=gen).to(dtype)
    g = torch.nn.functional.logsigmoid(torch.randn(shape[:3], device=device, generator=gen) + 4.0).to(dtype)
    return {"linear_attention": (q, k, v), "delta_rule": (q, k, v, beta), "gated_delta_rule": (q, k, v, g, beta)}[
        case.layer
    ]


def ours(layer: str):
    from ttr_edu import kernels

    return getattr(kernels, f"{layer}_chunk")


def reference(layer: str):
    from ttr_edu import ops

    return getattr(ops, f"{layer}_chunk")


def options(case: Case, device: str = "cuda") -> dict:
    extra = {} if case.layer == "linear_attention" else {"check_stability": "ignore"}
    if case.varlen:
        extra["cu_seqlens"] = cu_seqlens_of(case, device)
    return {"chunk_size": case.chunk_size, **extra}


def fla_fn(layer: str, cu_seqlens=None):
    """fla's chunked kernel for ``layer`` in the (B, T, H, D) layout, or None when fla is not installed."""
    try:
        if layer == "linear_attention":
            from fla.ops.linear_attn import chunk_linear_attn as fn
        elif layer == "delta_rule":
            from fla.ops.delta_rule import chunk_delta_rule as fn
        else:
            from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fn
    except ImportError:
        return None
    kwargs = {"head_first": False} if "head_first" in inspect.signature(fn).parameters else {}
    if layer == "linear_attention":
        kwargs["normalize"] = False  # fla normalises by default; ours and the reference do not
    if cu_seqlens is not None:
        kwargs["cu_seqlens"] = cu_seqlens  # fla's own variable-length convention, the one ours follows
    return lambda *args: fn(*args, **kwargs)


def median_ms(fn) -> float:
    from triton.testing import do_bench

    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def device_ceilings(dtype: torch.dtype) -> tuple[float, float]:
    """Measured ceilings: TFLOP/s of an 8192² matmul in ``dtype`` (fp32 without tf32: cuBLAS's fp32 rate), and GB/s
    of copying 1 GiB (read + write).

    Our fp32 kernels multiply in tf32x3 (three tf32 tensor-core products, see ``_dispatch.dot_precision``), so they
    can exceed this fp32 ceiling; the bf16 ceiling is the tensor cores' bf16 rate."""
    n = 8192
    a, b = torch.randn(n, n, device="cuda", dtype=dtype), torch.randn(n, n, device="cuda", dtype=dtype)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        tflops = 2 * n**3 / (median_ms(lambda: a @ b) * 1e-3) / 1e12
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    x = torch.empty(2**28, device="cuda", dtype=torch.float32)  # 1 GiB
    y = torch.empty_like(x)
    gbps = 2 * x.numel() * 4 / (median_ms(lambda: y.copy_(x)) * 1e-3) / 1e9
    return tflops, gbps


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return (torch.linalg.vector_norm((a - b).double()) / torch.linalg.vector_norm(b.double())).item()


def plan(args) -> list[Case]:
    return [
        Case(layer, dtype, args.B, T, args.H, args.D, args.chunk_size, varlen)
        for layer in args.layers
        for dtype in args.dtypes
        for T in args.T
        for varlen in ((False, True) if args.varlen else (False,))
    ]


HEADER = (
    f"{'layer':<17} {'dtype':<5} {'T':>6} {'var':>3} | "
    f"{'ours ms':>8} {'TFLOP/s':>8} {'(ceil)':>7} {'GB/s':>7} {'(ceil)':>7} | "
    f"{'ref ms':>8} {'x ref':>6} | {'fla ms':>7} {'fla/ours':>8} | {'rel err':>8}"
)


def run(cases: list[Case]) -> None:
    ceilings = {name: device_ceilings(DTYPES[name]) for name in sorted({c.dtype for c in cases})}
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}")
    for name, (tflops, gbps) in ceilings.items():
        print(f"measured ceilings {name}: matmul {tflops:.1f} TFLOP/s, copy {gbps:.0f} GB/s")
    print(HEADER)
    print("-" * len(HEADER))
    speedups, fla_ratios = [], []
    for case in cases:
        inputs = make_inputs(case, "cuda")
        opts = options(case)
        kernel, ref, fla = ours(case.layer), reference(case.layer), fla_fn(case.layer, opts.get("cu_seqlens"))
        o, _ = kernel(*inputs, **opts)
        o_ref, _ = ref(*inputs, **opts)
        error = rel_err(o, o_ref)
        t_ours = median_ms(lambda inputs=inputs, opts=opts: kernel(*inputs, **opts))
        t_ref = median_ms(lambda inputs=inputs, opts=opts: ref(*inputs, **opts))
        fla_text = f"{'-':>7} {'-':>8}"
        if fla is not None:
            try:
                t_fla = median_ms(lambda inputs=inputs: fla(*inputs))
                fla_ratios.append(t_fla / t_ours)
                fla_text = f"{t_fla:>7.3f} {t_fla / t_ours:>8.2f}"
            except Exception as error_fla:  # fla rejects some dtypes (fp32) outright; say so and go on
                fla_text = f"{'n/a':>7} {type(error_fla).__name__[:8]:>8}"
        speedups.append(t_ref / t_ours)
        tflops, gbps = ceilings[case.dtype]
        print(
            f"{case.layer:<17} {case.dtype:<5} {case.T:>6} {'yes' if case.varlen else 'no':>3} | {t_ours:>8.3f} "
            f"{case.flops() / (t_ours * 1e-3) / 1e12:>8.2f} {tflops:>7.1f} "
            f"{case.bytes() / (t_ours * 1e-3) / 1e9:>7.0f} {gbps:>7.0f} | "
            f"{t_ref:>8.3f} {t_ref / t_ours:>6.1f} | {fla_text} | {error:>8.1e}",
            flush=True,
        )
        del inputs, o, o_ref
        torch.cuda.empty_cache()
    print(
        f"speedup against the reference chunk form: min {min(speedups):.1f}x, median "
        f"{statistics.median(speedups):.1f}x (target >= 5x)"
    )
    if fla_ratios:
        print(f"fla time / ours: min {min(fla_ratios):.2f}, median {statistics.median(fla_ratios):.2f} (target >= 0.5)")
    else:
        print("flash-linear-attention not installed (or rejected every case): no fla column")


def dry_run(cases: list[Case]) -> None:
    """Without a GPU: print what would run, and the FLOP / byte model each row is divided by."""
    print(f"dry run: {len(cases)} cases, nothing timed")
    print(f"{'layer':<17} {'dtype':<5} {'T':>6} {'var':>3} {'GFLOP':>9} {'MB moved':>9} {'FLOP/byte':>9}")
    for case in cases:
        print(
            f"{case.layer:<17} {case.dtype:<5} {case.T:>6} {'yes' if case.varlen else 'no':>3} "
            f"{case.flops() / 1e9:>9.1f} {case.bytes() / 1e6:>9.1f} {case.flops() / case.bytes():>9.1f}"
        )
        if case.varlen:
            print(f"  cu_seqlens: {cu_seqlens_of(case, 'cpu').tolist()}")
    print(f"fla installed: {fla_fn('delta_rule') is not None}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--T", type=int, nargs="+", default=[1024, 4096, 16384], help="sequence lengths")
    parser.add_argument("--B", type=int, default=8)
    parser.add_argument("--H", type=int, default=16)
    parser.add_argument("--D", type=int, default=128, help="D_k = D_v")
    parser.add_argument("--chunk-size", type=int, default=64)
    parser.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=list(DTYPES))
    parser.add_argument("--layers", nargs="+", choices=LAYERS, default=list(LAYERS))
    parser.add_argument("--varlen", action="store_true", help="also run packed variable-length batches (cu_seqlens)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and the FLOP/byte model; no GPU")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cases = plan(args)
    if args.dry_run:
        dry_run(cases)
        return 0
    if not torch.cuda.is_available():
        print("kernels_gpu.py needs a CUDA GPU (use --dry-run to check the plan without one)", file=sys.stderr)
        return 2
    run(cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())

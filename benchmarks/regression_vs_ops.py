"""The framework's generic path against the specialised op of the same layer, side by side.

``ttr_edu.regression`` computes each layer from the regression objective (weights × function class × optimiser);
``ttr_edu.ops`` holds the hand-derived forms. This prints the time of each and their ratio (target: generic ≤ 3×).

    python benchmarks/regression_vs_ops.py            # T = 1024, D = 64, B = 1, H = 2
    python benchmarks/regression_vs_ops.py --T 256 --repeats 5 --threads 2
    python benchmarks/regression_vs_ops.py --train --B 16 --T 96 --H 1 --D 16 --only RLS Mesa   # MQAR's training

A layer calls the op (CONTRIBUTING.md, "Which implementation a layer calls"): a ratio well below 1 means the
generic path has found a faster algorithm, which then moves into the op.
"""

from __future__ import annotations

import argparse
import time

import torch

from ttr_edu import ops
from ttr_edu.regression import ExactSolve, Linear, TestTimeRegression, Uniform, named_layer


def best_times(fns, repeats: int) -> list[float]:
    """The fastest of ``repeats`` runs of each function, in seconds, the runs interleaved.

    On a shared machine the minimum is the run least disturbed by other processes, and interleaving exposes both
    functions to the same background load.
    """
    for fn in fns:
        fn()  # warm-up
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - start)
    return best


def trained(fn):
    """``fn`` followed by the backward pass of the sum of its output (the inputs that require grad collect it)."""

    def run():
        fn()[0].sum().backward()

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--T", type=int, default=1024)
    parser.add_argument("--D", type=int, default=64)
    parser.add_argument("--B", type=int, default=1)
    parser.add_argument("--H", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: least sensitive to other load)")
    parser.add_argument("--train", action="store_true", help="time forward and backward (as training does)")
    parser.add_argument("--only", nargs="+", default=None, help="the layers whose name starts with one of these")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    B, T, H, D = args.B, args.T, args.H, args.D

    gen = torch.Generator().manual_seed(0)
    q = torch.randn(B, T, H, D, generator=gen)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, D, generator=gen), dim=-1)
    v = torch.randn(B, T, H, D, generator=gen)
    beta = torch.rand(B, T, H, generator=gen)
    g = -0.1 * torch.rand(B, T, H, generator=gen)
    # DeltaProduct: two pairs per token; the MLP memories: D_h = D; Titans: per-token momentum and forgetting
    k2 = torch.nn.functional.normalize(torch.randn(B, 2 * T, H, D, generator=gen), dim=-1)
    v2, beta2 = torch.randn(B, 2 * T, H, D, generator=gen), torch.rand(B, 2 * T, H, generator=gen)
    W = (torch.randn(B, H, D, D, generator=gen) / D**0.5, torch.randn(B, H, D, D, generator=gen) / D**0.5)
    eta, alpha = 0.9 * torch.rand(B, T, H, generator=gen), 0.1 * torch.rand(B, T, H, generator=gen)
    # the MLP memories' inner learning rate: TTT's b = 16 gradients taken at one state add up to a step of about
    # b·β, which diverges (and is refused as an overflow of o) for β near 1
    if args.train:  # the gradients reach every tensor input
        for x in (q, k, v, beta, g, k2, v2, beta2, *W, eta, alpha):
            x.requires_grad_()
    beta_mlp = 0.1 * beta

    cases = [  # (layer, generic call, specialised op, the op's name)
        (
            "linear attention",
            lambda: named_layer("linear_attention")(q, k, v),
            lambda: ops.linear_attention_chunk(q, k, v),
            "linear_attention_chunk",
        ),
        (
            "gated linear attention",
            lambda: named_layer("gated_linear_attention")(q, k, v, g=g),
            lambda: ops.gated_linear_attention_chunk(q, k, v, g),
            "gated_linear_attention_chunk",
        ),
        (
            "DeltaNet",
            lambda: named_layer("deltanet")(q, k, v, beta=beta),
            lambda: ops.delta_rule_chunk(q, k, v, beta),
            "delta_rule_chunk",
        ),
        (
            "DeltaNet",
            lambda: named_layer("deltanet")(q, k, v, beta=beta),
            lambda: ops.delta_rule_recurrent(q, k, v, beta),
            "delta_rule_recurrent",
        ),
        (
            "gated DeltaNet",
            lambda: named_layer("gated_deltanet")(q, k, v, beta=beta, g=g),
            lambda: ops.gated_delta_rule_chunk(q, k, v, g, beta),
            "gated_delta_rule_chunk",
        ),
        (
            "RLS",
            lambda: named_layer("rls")(q, k, v),
            lambda: ops.rls_recurrent(q, k, v, ridge=1.0),
            "rls_recurrent",
        ),
        (
            "RLS (exact)",
            lambda: TestTimeRegression(Uniform(), Linear(), ExactSolve(ridge=1.0))(q, k, v),
            lambda: ops.rls_exact(q, k, v, ridge=1.0),
            "rls_exact",
        ),
        (
            "Mesa (gated RLS)",
            lambda: named_layer("mesa")(q, k, v, g=g),
            lambda: ops.rls_exact(q, k, v, ridge=1.0, g=g),
            "rls_exact",
        ),
        (
            "softmax attention",
            lambda: named_layer("softmax_attention")(q, k, v),
            lambda: ops.softmax_attention(q, k, v),
            "softmax_attention",
        ),
        (
            "local linear attention",
            lambda: named_layer("local_linear_attention", ridge=1e-2)(q, k, v),
            lambda: ops.local_linear_attention(q, k, v, ridge=1e-2),
            "local_linear_attention",
        ),
        (
            "Longhorn",
            lambda: named_layer("longhorn")(q, k, v, beta=beta),
            lambda: ops.longhorn_chunk(q, k, v, beta),
            "longhorn_chunk",
        ),
        (
            "DeltaProduct (n_h = 2)",
            lambda: named_layer("deltaproduct", num_householder=2)(q, k2, v2, beta=beta2),
            lambda: ops.delta_product_chunk(q, k2, v2, beta2, 2),
            "delta_product_chunk",
        ),
        (
            "TTT-Linear (b = 16)",
            lambda: named_layer("ttt_linear")(q, k, v, beta=beta),
            lambda: ops.ttt_linear_chunk(q, k, v, beta),
            "ttt_linear_chunk",
        ),
        (
            "TTT-MLP (b = 16)",
            lambda: named_layer("ttt_mlp")(q, k, v, beta=beta_mlp, initial_state=W),
            lambda: ops.ttt_mlp_chunk(q, k, v, beta_mlp, initial_state=W),
            "ttt_mlp_chunk",
        ),
        (
            "Titans (MLP)",
            lambda: named_layer("titans")(q, k, v, beta=beta_mlp, eta=eta, alpha=alpha, initial_state=W),
            lambda: ops.titans_recurrent(q, k, v, beta_mlp, eta, alpha, initial_state=W),
            "titans_recurrent",
        ),
    ]
    if args.only:
        cases = [case for case in cases if case[0].startswith(tuple(args.only))]
    mode = "forward + backward" if args.train else "forward"
    print(f"B={B} T={T} H={H} D_k=D_v={D}, fp32, {torch.get_num_threads()} threads, {mode}, best of {args.repeats}")
    print(f"{'layer':<24}{'specialised op':<30}{'op ms':>9}{'generic ms':>12}{'generic/op':>12}")
    with torch.set_grad_enabled(args.train):
        for layer, generic, specialised, name in cases:
            fns = [trained(specialised), trained(generic)] if args.train else [specialised, generic]
            t_op, t_gen = best_times(fns, args.repeats)
            print(f"{layer:<24}{name:<30}{1e3 * t_op:>9.1f}{1e3 * t_gen:>12.1f}{t_gen / t_op:>11.2f}x")


if __name__ == "__main__":
    main()

"""What a point of the design space costs: the state it keeps, the FLOPs of one token, and its chunkwise form.

Counts are per head and per token, to leading order, a multiply-add counted as 2 FLOPs (``D_k × D_v`` matrix times
vector: ``2 D_k D_v``). They follow the recurrent form of each rule as :mod:`.update_rule` writes it (the state
carried from token to token), not the generic path of :class:`~ttr_edu.regression.TestTimeRegression`, which
computes the same outputs another way. With ``P = D_k D_v`` floats in a linear memory:

* one gradient step writes ``k vᵀ`` and reads ``Sᵀq``: ``4P``; online SGD also predicts ``Sᵀk`` first: ``6P``;
  each extra step per token ``4P``; momentum keeps a second ``P`` and updates both: ``10P``;
* the exact solve keeps the moments ``A`` (``D_k²``) and ``M`` (``P``) and factors ``A + λI`` every token
  (``D_k³/3``); CG replaces the factorisation by ``k`` products ``2 D_k²``; RLS keeps ``P_t`` (``D_k²``) and updates
  it by Sherman–Morrison (``4 D_k²``);
* a decay multiplies what is carried (``+P``, ``+D_k²`` for the moments); a window subtracts the pair that leaves
  (moments) or re-runs its ``w`` pairs (stepped optimisers, which have no downdate), and keeps those pairs;
* an MLP of ``Q = D_k D_h + D_h D_v`` weights costs ``2Q`` per pass (forward, each half of the backward pass,
  update, readout: ``10Q`` for online SGD); a kernel method keeps every pair it weighs and reads them all.

The chunkwise forms are those of chapter chunkwise_algorithms (linear attention, the WY/UT delta rule, its gated
form) and of the named layers' papers (TTT's mini-batch is its chunk; MesaNet accumulates the moments chunkwise and
solves per token); a form that is not known is said to be so.
"""

from __future__ import annotations

from dataclasses import dataclass

from ttr_edu._internal.validation import check_positive_int

from .design_space import Point

__all__ = ["Cost", "cost", "matched_hidden"]


@dataclass(frozen=True)
class Cost:
    """The cost of one point, per head: ``state`` floats kept to answer the next token (``grows``: with ``t``),
    ``flops`` of one token's update and readout, and the chunkwise form (``chunkwise``: what it is, ``None`` if no
    chunkwise form is known; ``chunk_flops``: its FLOPs per token at the chunk size ``C``, ``None`` if none)."""

    state: int
    flops: int
    grows: bool
    chunkwise: str | None
    chunk_flops: int | None

    def summary(self) -> str:
        """One line: the state, the FLOPs per token and the chunkwise form, in words."""
        state = f"{self.state:,} floats{' (grows with t)' if self.grows else ''}"
        chunk = (
            f"chunkwise: {self.chunkwise}, ≈{self.chunk_flops:,} FLOPs/token"
            if self.chunk_flops is not None
            else f"chunkwise: {self.chunkwise or 'none known'}"
        )
        return f"state {state}; recurrent ≈{self.flops:,} FLOPs/token; {chunk}"


def matched_hidden(d_k: int, d_v: int) -> int:
    """The hidden width of a two-layer MLP memory with (about) the floats of a linear one:
    ``D_h (D_k + D_v) ≈ D_k D_v``, at least 1."""
    return max(1, (d_k * d_v) // (d_k + d_v))


def _wdel_wy(C: int, d_k: int, d_v: int) -> int:
    """FLOPs per token of the WY/UT chunk form of one delta-rule step per token (chapter chunkwise_algorithms):
    ``KKᵀ``, the ``C × C`` triangular inverse, ``W``, ``U``, the intra-chunk attention and the state's terms."""
    P = d_k * d_v
    return 6 * C * d_k + 4 * C * d_v + C * C // 3 + 6 * P


def cost(point: Point, d_k: int, d_v: int, t: int = 64, chunk_size: int = 64) -> Cost:
    """The state, FLOPs per token and chunkwise form of ``point`` for one head of ``D_k × D_v``.

    Args:
        point: a valid :class:`~ttr_edu.regression.design_space.Point`.
        d_k, d_v: key and value dimensions; an MLP memory gets :func:`matched_hidden` hidden units.
        t: the position, for the state of a kernel method (every pair so far) and a window's fill.
        chunk_size: ``C``, the chunk size of the chunkwise forms.

    Raises:
        TypeError: ``point`` not a Point, a size not an int.
        ValueError: a size < 1, or a point whose choices make no layer (the framework's reason).
    """
    if not isinstance(point, Point):
        raise TypeError(f"point: expected a design_space.Point, got {type(point).__name__}")
    for name, value in (("d_k", d_k), ("d_v", d_v), ("t", t), ("chunk_size", chunk_size)):
        check_positive_int(name, value)
    problem = point.problem()
    if problem is not None:
        raise ValueError(f"point: {problem}")
    w, f, o = point.weights, point.function_class, point.optimizer
    window = point.param("window") if w == "window" else None
    n = min(t, window) if window else t  # the pairs a kernel method or a window holds
    cache = n * (d_k + d_v)
    C = chunk_size
    if f in ("kernel_smoother", "local_linear", "kernel_ridge"):
        flops = {
            "kernel_smoother": 2 * n * (d_k + d_v) + 3 * n,
            "local_linear": 2 * n * d_k * d_k + 6 * n * (d_k + d_v) + d_k**3 // 3,
            "kernel_ridge": n**3 // 3 + 2 * n * (d_k + d_v),
        }[f]
        return Cost(cache, flops, not window, "none: every pair is reread (the parallel, attention-like form)", None)
    if f == "mlp":
        d_h = matched_hidden(d_k, d_v)
        Q = d_k * d_h + d_h * d_v
        per_pair = {"online_sgd": 8 * Q, "mini_batch_gd": 8 * Q, "momentum": 12 * Q}[o]
        state = {"online_sgd": Q, "mini_batch_gd": Q, "momentum": 2 * Q}[o]
        extra = 0
        if o == "mini_batch_gd":
            b = point.param("mini_batch_size")
            state += b * (d_k + d_v)
            extra = (b + 1) * (d_k + 2 * d_h + d_v)
        if window:
            return Cost(cache, window * per_pair + 2 * Q, False, None, None)
        chunk = "the mini-batch is the chunk (TTT's dual form)" if o == "mini_batch_gd" else None
        chunk_flops = per_pair + 2 * Q + extra if o == "mini_batch_gd" else None
        return Cost(state, per_pair + 2 * Q + extra, False, chunk, chunk_flops)
    P = d_k * d_v
    K2 = d_k * d_k
    shrink = w in ("decay", "gates")
    if o in ("online_sgd", "implicit_step", "steps_per_token", "mini_batch_gd", "momentum", "rls"):
        k = point.param("steps") if o == "steps_per_token" else 1
        per_pair = {
            "online_sgd": 4 * P,
            "implicit_step": 4 * P + 2 * d_k,
            "steps_per_token": 4 * P,
            "mini_batch_gd": 4 * P,
            "momentum": 8 * P,
            "rls": 4 * K2 + 4 * P,
        }[o]
        state = {"momentum": 2 * P, "rls": P + K2}.get(o, P)
        if window:  # no downdate: each token re-runs its window's w pairs (k rows each) and keeps them
            return Cost(cache, window * k * per_pair + 2 * P, False, None, None)
        flops = k * per_pair + 2 * P + (P if shrink else 0) + (K2 if shrink and o == "rls" else 0)
        if o == "mini_batch_gd":
            b = point.param("mini_batch_size")
            state += b * (d_k + d_v)  # the mini-batch in progress: its keys and errors
            flops += (b + 1) * (d_k + d_v)
            return Cost(state, flops, False, "the mini-batch is the chunk (TTT's dual form)", flops)
        if o == "momentum":
            return Cost(
                state,
                flops,
                False,
                "none implemented: (S, U) evolve by a linear recurrence, so one exists in principle; Titans trains "
                "with gradients taken at each chunk's start (mini-batch GD) instead",
                None,
            )
        if o == "rls":
            return Cost(
                state, flops, False, "none: use the exact solve's form (moments chunkwise, a solve per token)", None
            )
        return Cost(
            state, flops, False, "WY/UT form of the delta rule", k * _wdel_wy(C, d_k, d_v) + (P if shrink else 0)
        )
    # gradient step, exact solve, CG: running moments (a window subtracts the pair that leaves)
    down = 2 * P if window else 0
    if o == "gradient_step":
        flops = 4 * P + (P if shrink else 0) + down
        state = P + (cache if window else 0)
        return Cost(state, flops, False, "as linear attention", 2 * C * (d_k + d_v) + 4 * P + (P if shrink else 0))
    down += 2 * K2 if window else 0
    moments = 2 * K2 + 2 * P + (K2 + P if shrink else 0) + down
    state = K2 + P + (cache if window else 0)
    if o == "exact_solve":
        solve = d_k**3 // 3 + 2 * K2
        chunk = "moments as linear attention, one solve per token"
    else:
        solve = point.param("cg_steps") * (2 * K2 + 10 * d_k)
        chunk = "moments as linear attention, CG per token (MesaNet)"
    flops = moments + solve + 2 * P
    return Cost(state, flops, False, chunk, solve + 2 * K2 + 2 * C * (d_k + d_v) + 4 * P)

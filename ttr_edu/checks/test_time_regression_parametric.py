"""Checks for chapter 06, test-time regression (parametric). Each compares with :mod:`ttr_edu.regression`.

The exercises use one sequence and one head: ``k, q`` are ``(T, D_k)``, ``v`` is ``(T, D_v)``, a log decay ``g`` is
``(T,)`` and a memory ``S`` is ``(D_k, D_v)`` (read out as ``Sᵀ q``). The references run the package's framework on
the same data in the fla layout ``(1, T, 1, D)``, except the sweep operator's, which is the product it defines, and
RLS's, which is one solve. Every exercise is declared once (:func:`ttr_edu.checks._rules.exercise`), with cases in
float64 and float32, keys of several lengths and correlated keys; the package's regression layers, delta-rule and RLS
ops are ruled out as answers, and RLS's "no solve and no inverse" is enforced at torch's dispatcher, whatever the
spelling (:mod:`ttr_edu.checks._guard`), by comparing the memory after every pair, and by the work of the answer's
torch operations (:class:`~ttr_edu.checks._rules.WorkCount`: linear in ``T``, at most ``D_k²`` per pair, so no step
re-sums the prefix or inverts by hand). No exercise may change its inputs in place (the default rule).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from ttr_edu._internal.contract import decay_matrix
from ttr_edu.checks._core import _is_plain_tensor
from ttr_edu.checks._rules import Rules, WorkCount, exercise
from ttr_edu.checks.delta_rule import DELTA_RULE
from ttr_edu.ops import rls_chunk, rls_exact, rls_recurrent
from ttr_edu.regression import ExactSolve, Linear, TestTimeRegression, Uniform, regression_weights
from ttr_edu.regression import linear as _regression

__all__ = [
    "check_decay_weights",
    "check_sweep_operator",
    "check_ridge_readout",
    "check_rls_memory",
    "reference_rls_memory",
    "reference_sweep_operator",
    "reference_decay_weights",
]

# D_k ≠ D_v in most cases, so a transposed memory cannot pass by accident; T = 1 and T < D_k are included.
SHAPES = [(1, 1, 1), (3, 5, 2), (8, 4, 3), (17, 6, 5)]  # (T, D_k, D_v)

#: the package's exact regression memories: none of them is the student's answer to 6.1 or 6.4
EXACT_REGRESSION = (rls_recurrent, rls_chunk, rls_exact, _regression._exact_solve, _regression._recursive_least_squares)


def _fla(x: torch.Tensor) -> torch.Tensor:
    return x[None, :, None]  # (T, D) -> (1, T, 1, D); (T,) -> (1, T, 1)


def reference_decay_weights(g: torch.Tensor) -> torch.Tensor:
    """``Γ[t, i] = exp(Σ_{j=i+1..t} g_j)`` for ``i ≤ t``, else 0: ``(T,) -> (T, T)``."""
    return regression_weights(_fla(g))[0, 0]


def reference_sweep_operator(k: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """What one SGD pass over the pairs does to the error of a consistent fit: ``(T, D_k), (T,) -> (D_k, D_k)``.

    With targets ``v_t = S*ᵀ k_t``, one step gives ``S_t − S* = (I − β_t k_t k_tᵀ)(S_{t−1} − S*)``, so a pass over the
    pairs in order multiplies the error by ``M = (I − β_T k_T k_Tᵀ) ⋯ (I − β_1 k_1 k_1ᵀ)``, the first pair's factor
    rightmost (Kaczmarz's method when ``β_t ‖k_t‖² = 1``).
    """
    eye = torch.eye(k.shape[1], dtype=k.dtype)
    M = eye.clone()
    for t in range(k.shape[0]):
        M = (eye - beta[t] * torch.outer(k[t], k[t])) @ M
    return M


def reference_ridge_readout(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ridge: float) -> torch.Tensor:
    """``o_t = S_tᵀ q_t`` with ``S_t = (Σ_{i≤t} k_i k_iᵀ + λI)⁻¹ Σ_{i≤t} k_i v_iᵀ``: ``(T, D_v)``."""
    exact = TestTimeRegression(Uniform(), Linear(), ExactSolve(ridge=ridge))
    return exact(_fla(q), _fla(k), _fla(v), scale=1.0)[0][0, :, 0]


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _decay_cases() -> Iterator[dict]:
    for i, (T, _, _) in enumerate(SHAPES):
        yield {"g": -torch.rand(T, generator=_g(600 + i), dtype=torch.float64)}
    yield {"g": torch.zeros(5, dtype=torch.float64)}  # no decay: the causal mask of ones
    yield {"g": -2 * torch.rand(9, generator=_g(605))}  # float32
    yield _strong_decay_case()


def _sweep_cases() -> Iterator[dict]:
    # (T, D_k): one pair, fewer pairs than dimensions, more; keys of any length and steps that differ per pair, so that
    # the order of the factors matters (the reversed product is the transpose) and no step is 1 by accident
    for i, (T, d_k) in enumerate([(1, 3), (4, 6), (9, 5), (12, 16)]):
        gen = _g(610 + i)
        yield {
            "k": torch.randn(T, d_k, generator=gen, dtype=torch.float64),
            "beta": 0.1 + 0.4 * torch.rand(T, generator=gen, dtype=torch.float64),
        }
    # correlated keys, then float32
    yield {"k": _regression_case(615, 8, 5, 1, shared=1.5, scale=0.6)["k"], "beta": torch.full((8,), 0.7).double()}
    yield {"k": _regression_case(616, 6, 4, 1, dtype=torch.float32)["k"], "beta": torch.full((6,), 0.3)}


def _regression_case(seed: int, T: int, d_k: int, d_v: int, *, scale=1.0, shared=0.0, dtype=torch.float64) -> dict:
    """Keys of length about ``scale``·√D_k, sharing a direction when ``shared`` > 0 (correlated keys)."""
    gen = _g(seed)
    k = scale * (
        torch.randn(T, d_k, generator=gen, dtype=torch.float64)
        + shared * torch.randn(d_k, generator=gen, dtype=torch.float64)
    )
    return {"k": k.to(dtype), "v": torch.randn(T, d_v, generator=gen, dtype=torch.float64).to(dtype)}


def _ridge_cases() -> Iterator[dict]:
    for i, (T, d_k, d_v) in enumerate(SHAPES):
        case = _regression_case(620 + i, T, d_k, d_v)
        yield {"q": torch.randn(T, d_k, generator=_g(630 + i), dtype=torch.float64), **case,
               "ridge": [1.0, 0.1, 0.01, 0.5][i]}  # fmt: skip
    yield {"q": torch.randn(10, 4, generator=_g(634), dtype=torch.float64),
           **_regression_case(624, 10, 4, 3, scale=2.0, shared=1.5), "ridge": 0.3}  # fmt: skip
    yield {"q": torch.randn(9, 5, generator=_g(635)), **_regression_case(625, 9, 5, 4, dtype=torch.float32),
           "ridge": 1.0}  # fmt: skip


def _strong_decay_case() -> dict:
    # g = −50 over T = 30: above the diagonal G_t − G_i reaches +1450, so exp(…) overflows to inf, and an answer that
    # masks *after* the exponential computes inf · 0 = NaN there. The reference masks before, as the hint says.
    return {"g": torch.full((30,), -50.0, dtype=torch.float64)}


def _nan_note(message: str, case: dict, result: Any) -> str:
    """Why a strong decay gives an answer NaN or inf, from where they sit: above the diagonal (masked after the
    exponential) or on and below it (a ratio of cumulative products, 0/0)."""
    if not (_is_plain_tensor(result) and result.is_floating_point() and result.dim() == 2):
        return ""
    bad = ~torch.isfinite(result)
    if bad.triu(1).any():
        return (
            "\n  your answer holds NaN or inf above the diagonal: with a strong decay (g = −50 over T = 30) G_t − G_i "
            "is large and positive there, exp overflows to inf and inf · 0 = NaN. Mask with −inf *before* the "
            "exponential (masked_fill), not by multiplying after it."
        )
    if bad.any():
        return (
            "\n  your answer holds NaN or inf on or below the diagonal, where every weight is a product of decays in "
            "(0, 1]: with a strong decay a ratio of cumulative products underflows to 0 / 0. Exponentiate a difference "
            "of summed log decays (G_t − G_i, with G = cumsum(g)) instead of dividing products."
        )
    return ""


@exercise(
    reference=reference_decay_weights,
    cases=_decay_cases,
    rules=Rules(answers=(regression_weights, decay_matrix)),
    explain=_nan_note,
)
def check_decay_weights(decay_weights: Callable) -> bool:
    """Check ``decay_weights(g) -> Γ``, ``Γ[t, i] = exp(g_{i+1} + … + g_t)`` below and on the diagonal, else 0.

    The last case has a strong decay (g = −50, T = 30), where masking after the exponential gives NaN above the
    diagonal; the failure message says so.
    """


def _transposed_note(message: str, case: dict, result: Any) -> str:
    """When the answer is the pass's product in the reverse order (its transpose), say so; only where the case can
    tell: ``M`` not symmetric to the comparison's tolerance (with one pair, ``M = I − β k kᵀ`` is its own transpose,
    and an answer off by rounding there is no reversed product), and the answer nearer ``Mᵀ`` than ``M``."""
    if not (_is_plain_tensor(result) and result.is_floating_point()):
        return ""
    want = reference_sweep_operator(**case).double()
    if result.shape != want.shape:
        return ""
    got = result.double()
    if torch.allclose(want, want.T, rtol=1e-6, atol=1e-9):  # symmetric: its transpose is no evidence of an order
        return ""
    if torch.allclose(got, want.T, rtol=1e-6, atol=1e-9) and (got - want.T).norm() < (got - want).norm():
        return (
            "\n  your product is the transpose of the pass's: the factors are in reverse order. The first pair acts on "
            "the error first, so its factor I − β_1 k_1 k_1ᵀ must stand rightmost."
        )
    return ""


@exercise(
    reference=reference_sweep_operator,
    cases=_sweep_cases,
    rules=Rules(answers=(*DELTA_RULE, _regression._online_sgd, _regression._multi_pass_sgd)),
    rtol=1e-9,
    atol=1e-10,
    explain=_transposed_note,
)
def check_sweep_operator(sweep_operator: Callable) -> bool:
    """Check ``sweep_operator(k, beta) -> M``: the product of ``I − β_t k_t k_tᵀ`` over one pass, the first pair's
    factor rightmost; a product in the reverse order (the transpose) is named in the failure. The package's delta-rule
    ops and SGD layers, which apply the same pass to a memory, are ruled out as answers."""


@exercise(
    reference=reference_ridge_readout,
    cases=_ridge_cases,
    rules=Rules(answers=EXACT_REGRESSION),
    rtol=1e-6,
    atol=1e-9,
)
def check_ridge_readout(ridge_readout: Callable) -> bool:
    """Check ``ridge_readout(q, k, v, ridge) -> o``, the exact ridge-regression memory read out at every step."""


def reference_rls_memory(
    k: torch.Tensor, v: torch.Tensor, ridge: float, initial_state: tuple[torch.Tensor, torch.Tensor] | None = None
) -> torch.Tensor:
    """The memory after every pair, ``S_t = (K_tᵀ K_t + λ I)⁻¹ K_tᵀ V_t`` for ``t = 1..T`` (``K_t``: the first ``t``
    keys): ``(T, D_k), (T, D_v) -> (T, D_k, D_v)``, row ``t − 1`` the memory after pair ``t``.

    From ``initial_state = (S_0, P_0)`` (a memory that has seen earlier pairs, ``P_0 = (A_0 + λI)⁻¹``, which then
    holds the ridge), ``S_t = (P_0⁻¹ + K_tᵀK_t)⁻¹ (P_0⁻¹ S_0 + K_tᵀV_t)``: the recursion keeps ``P_t⁻¹ S_t`` growing
    by ``k_t v_tᵀ`` each step. Computed by one solve per prefix (the reference may; the exercise's recursion may not).
    """
    if initial_state is None:
        A0 = ridge * torch.eye(k.shape[1], dtype=k.dtype)
        B0 = torch.zeros(k.shape[1], v.shape[1], dtype=k.dtype)
    else:
        S0, P0 = initial_state
        A0 = torch.linalg.inv(P0)
        B0 = A0 @ S0
    return torch.stack(
        [torch.linalg.solve(A0 + k[:t].T @ k[:t], B0 + k[:t].T @ v[:t]) for t in range(1, k.shape[0] + 1)]
    )


def _rls_cases() -> Iterator[dict]:
    # (T, D_k, D_v, ridge): T = 1, T < D_k (the ridge matters), T > D_k, a ridge far from 1 both ways (so that
    # P_0 = λI cannot pass for I/λ), keys of any length (not unit) and correlated keys, D_k ≠ D_v; then float32.
    for i, (T, d_k, d_v, ridge) in enumerate(
        [(1, 3, 2, 1.0), (4, 6, 3, 0.1), (12, 5, 4, 0.5), (30, 8, 6, 1e-2), (20, 4, 7, 3.0)]
    ):
        yield {**_regression_case(640 + i, T, d_k, d_v, scale=1.5), "ridge": ridge}
    yield {**_regression_case(646, 15, 5, 3, scale=0.7, shared=2.0), "ridge": 0.2}
    yield {**_regression_case(647, 12, 4, 3, dtype=torch.float32), "ridge": 1.0}
    # Online: the memory continues from the state (S_0, P_0) that earlier pairs left, so an answer that solves the
    # regression from its own pairs (P_t K_tᵀ V_t) misses what S_0 holds.
    for i, (T, earlier, d_k, d_v, ridge) in enumerate([(1, 3, 4, 2, 0.5), (9, 6, 5, 3, 0.1), (14, 20, 4, 4, 1.0)]):
        yield {**_regression_case(650 + i, T, d_k, d_v), "ridge": ridge,
               "initial_state": _earlier_state(660 + i, earlier, d_k, d_v, ridge)}  # fmt: skip


def _earlier_state(seed: int, T: int, d_k: int, d_v: int, ridge: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(S_0, P_0)`` after ``T`` earlier pairs: ``P_0 = (K₀ᵀK₀ + λI)⁻¹`` and a memory ``S_0`` that also holds a part
    no pair explains (any ``S_0`` is a valid start). ``P_0`` is built by Sherman–Morrison updates, not an inverse: the
    cases are built where the answer runs too, and there solvers are ruled out."""
    earlier = _regression_case(seed, T, d_k, d_v)
    P0 = torch.eye(d_k, dtype=torch.float64) / ridge
    for k in earlier["k"]:
        Pk = P0 @ k
        P0 = P0 - torch.outer(Pk, Pk) / (1 + k @ Pk)
    S0 = P0 @ earlier["k"].T @ earlier["v"] + 0.3 * torch.randn(d_k, d_v, generator=_g(seed + 1), dtype=torch.float64)
    return S0, P0


def _state_note(message: str, case: dict, result: Any) -> str:
    """What a wrong memory says: only the last pair's memory (an answer that computes the end state once), or a
    memory that forgets the state it was given."""
    want = reference_rls_memory(**case)
    if _is_plain_tensor(result) and result.shape == want.shape[1:]:
        return (
            "\n  the exercise asks for the memory after every pair, (T, D_k, D_v): S_1, …, S_T, each from the one "
            "before by the two updates"
        )
    if _is_plain_tensor(result) and result.shape == want.shape and result.shape[0] > 1:
        same_end = torch.allclose(result[-1].double(), want[-1].double(), rtol=1e-6, atol=1e-9)
        if same_end:
            return (
                "\n  your last memory is right but an earlier one is not: each S_t must be the memory after pair t, "
                "updated pair by pair"
            )
    if "initial_state" not in case:
        return ""
    return (
        "\n  this case continues a memory: initial_state = (S_0, P_0) is the state that earlier pairs left. Start the "
        "recursion from it (not from S_0 = 0, P_0 = I/λ)"
    )


def _rls_at_length(t: int) -> dict:
    """``T`` pairs of width 4 and 3, for the cost rule: at ``T = 64`` and ``256`` a step that re-sums the whole prefix
    (``K_tᵀ V_t`` or ``K_tᵀ K_t``, ``t D²`` each) outweighs the recursion's own ``D²`` per pair."""
    return {**_regression_case(700 + t, t, 4, 3), "ridge": 0.5}


#: the most work an answer to 6.4 may do at D_k = 32, in multiples of :func:`_two_rank_one_updates`' own: right
#: recursions measure 0.67 (the Kalman gain first) to 1.36 (rows and matrix products throughout), a careful one
#: (Joseph's form, symmetrised, validated, in float64, each state cloned) 4.6; warm-started conjugate gradients per
#: pair need 15 steps to reach the check's tolerance here (relative error 1e-6 at 14), which measure 11.5 (12.9 at
#: 17, 29 at 40); the running-sums information form 2.7 (tests/checks/test_test_time_regression_parametric.py)
MAX_WORK_OVER_THE_UPDATES = 8.0


def _two_rank_one_updates(
    k: torch.Tensor, v: torch.Tensor, ridge: float, initial_state: tuple[torch.Tensor, torch.Tensor] | None = None
) -> torch.Tensor:
    """The yardstick of 6.4's cost in ``D_k``: the recursion written plainly (Sherman–Morrison for ``P``, then the
    gain), whose work the answer's is measured against; never shown to an answer."""
    d_k = k.shape[1]
    S = torch.zeros(d_k, v.shape[1], dtype=k.dtype) if initial_state is None else initial_state[0]
    P = torch.eye(d_k, dtype=k.dtype) / ridge if initial_state is None else initial_state[1]
    out = []
    for t in range(k.shape[0]):
        Pk = P @ k[t]
        P = P - torch.outer(Pk, Pk) / (1 + k[t] @ Pk)
        S = S + torch.outer(P @ k[t], v[t] - S.T @ k[t])
        out.append(S)
    return torch.stack(out)


def _rls_at_width(d_k: int) -> dict:
    """16 pairs with keys of width ``d_k`` (values of width 3), for the cost rule of one step: at ``D_k = 8`` and
    ``32`` a ``D_k × D_k`` inverse or matrix product per pair (``D_k³``) outweighs the rank-one updates (``D_k²``)."""
    return {**_regression_case(800 + d_k, 16, d_k, 3), "ridge": 0.5}


@exercise(
    reference=reference_rls_memory,
    cases=_rls_cases,
    explain=_state_note,
    rules=Rules(
        answers=EXACT_REGRESSION,
        no_solvers=True,
        # a rank-one step costs the same at every t, and D_k² per pair: the recursions of the tests measure 1.00 in T
        # and 1.67–1.77 in D_k; a step that re-sums the prefix 1.60–1.9 in T, a hand-written inverse per pair 2.7–2.8
        # and (I − g kᵀ) P 2.5 in D_k (tests/checks/test_test_time_regression_parametric.py)
        work=(
            WorkCount(
                _rls_at_length,
                sizes=(64, 256),
                high=1.4,
                expect="Each pair's two rank-one updates cost the same whatever t: the work grows like T. A step that "
                "re-sums the prefix (K_tᵀ V_t or K_tᵀ K_t) costs t D² at step t, T² D² in all.",
            ),
            WorkCount(
                _rls_at_width,
                sizes=(8, 32),
                high=2.2,
                size_name="D_k",
                yardstick=_two_rank_one_updates,
                at_most=MAX_WORK_OVER_THE_UPDATES,
                expect="Each pair's two updates are rank one, P − (P k)(P k)ᵀ / (1 + kᵀ P k) and S + g (v − Sᵀ k)ᵀ: "
                "O(D_k²) per pair. An inverse written by hand at every pair (Gauss–Jordan, Newton–Schulz, conjugate "
                "gradients), or a product of two D_k × D_k matrices such as (I − g kᵀ) P (write P − g (kᵀ P) "
                "instead), costs D_k³.",
            ),
        ),
        why="keep P_t = (A_t + λI)⁻¹ up to date with the Sherman–Morrison update instead of solving or inverting",
    ),
    rtol=1e-6,
    atol=1e-9,
)
def check_rls_memory(rls_memory: Callable) -> bool:
    """Check ``rls_memory(k, v, ridge, initial_state=None) -> S``, ``(T, D_k, D_v)``: the exact ridge memory after
    every pair, computed online by the Sherman–Morrison recursion, from ``S_0 = 0, P_0 = I/λ`` or from a given
    ``initial_state = (S_0, P_0)``, which is left unchanged. An inverse, solve, factorisation or eigensolver of
    torch, numpy or scipy, however spelled, is refused; comparing every ``S_t`` refuses an answer that computes only
    the end state (by Sherman–Morrison on ``P`` and a closed form for ``S``, or a hand-written iterative inverse). The
    work of its torch operations (:class:`~ttr_edu.checks._rules.WorkCount`) must grow linearly from ``T = 64`` to
    ``256`` (a step that re-sums the prefix, ``K_tᵀ V_t`` or ``K_tᵀ K_t``, grows like ``T²``) and at most like
    ``D_k²`` from ``D_k = 8`` to ``32``, the cost of two rank-one updates (an inverse written by hand at every pair
    on running sums, or a product of two ``D_k × D_k`` matrices per pair, grows like ``D_k³``)."""

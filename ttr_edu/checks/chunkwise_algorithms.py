"""Checks for the chunkwise algorithms chapter (11_chunkwise_algorithms). One head, no batch: the shapes a student
writes first.

* ``chunk_linear_attention(q, k, v, S, chunk_size) -> (o, S_T)`` is compared with
  :func:`ttr_edu.ops.linear_attention_chunk` (``scale=1``) and held to a chunk form by chapter 02's rules of the same
  form without an initial state (Exercise 2.3: operations at two chunk sizes, work exactly affine in ``T``, no tensor
  larger than twice the chunks' own), on chapter 02's cases with a random initial state added;
* ``ut_transform(k, beta) -> 𝒯`` with the spec :func:`ut_transform_spec`: the **UT matrix**
  ``𝒯 = (I + tril(diag(β) K Kᵀ, −1))⁻¹ diag(β)`` (the UT transform of Joffrain et al. 2006, as used for the delta rule
  by Yang et al. 2024; fla's convention). It is written 𝒯 (code: ``ut``), never ``T``, which is the sequence length;
* ``delta_rule_chunk_step(q, k, v, beta, S) -> (o, S')`` (one chunk) with :func:`ttr_edu.ops.delta_rule_chunk`.
  It calls the student's ``ut_transform`` (a step that never calls it fails: the calls are counted; one whose outputs
  do not change when ``ut_transform`` returns a changed 𝒯 fails too: it threw the result away); while that is
  still a stub, the check lends the package's :func:`ut_transform_spec` in its place and says so, so the step can be
  checked on its own;
* ``ut_transform_backward(k, v, beta, dW, dU) -> (dk, dv, dbeta)``, the backward pass of ``W = 𝒯K, U = 𝒯V``, with
  **autograd** through :func:`ut_transform_spec` (an independent reference); :func:`ut_transform_backward_spec` is the
  same gradient written out, as the chapter derives it. The answer derives it: autograd inside it is refused, and so
  are numerical gradients, by what they do (:class:`_WrittenOutGradient`: writes per input entry, complex numbers);
* ``solve_tril(A, block) -> (I + A)⁻¹`` for a strictly lower triangular ``A``, by blocks as fla's ``solve_tril``:
  compared with the inverse, and held to what the exercise rules out by :class:`_BlockedInverseRules`, which watches
  the answer's torch operations: an inverse, factorisation or solve of a matrix wider than ``block``, more work in
  products than two products of the whole matrix (a series over it, such as the Neumann series), a substitution
  across the whole matrix (row by row, a few rows at a time, column by column, entry by entry, in torch or with Python
  numbers, whatever operation combines a row), and NumPy or Python lists for anything beyond the diagonal blocks.

Each exercise is declared once (:func:`ttr_edu.checks._rules.exercise`); the package's own implementations are refused
as answers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ttr_edu import ops
from ttr_edu.checks._core import (
    CONVERSIONS,
    CheckFailed,
    PythonNumbers,
    conversion_watch,
    pop_watch,
    push_watch,
    random_case,
)
from ttr_edu.checks._guard import ForbiddenCall
from ttr_edu.checks._rules import Rules, exercise
from ttr_edu.checks.linear_attention_is_fwp import _chunk_at_length, _chunk_with_short_tail
from ttr_edu.checks.linear_attention_is_fwp import check_chunk_linear_attention as _check_chunk_without_state
from ttr_edu.ops.delta_rule import ut_solve

__all__ = [
    "check_chunk_linear_attention",
    "check_ut_transform",
    "check_delta_rule_chunk_step",
    "chunk_linear_attention_spec",
    "ut_transform_spec",
    "delta_rule_chunk_step_spec",
    "check_ut_transform_backward",
    "ut_transform_backward_spec",
    "check_solve_tril",
    "solve_tril_spec",
]


def _one_head(x: torch.Tensor) -> torch.Tensor:
    """``(T, D)`` -> ``(1, T, 1, D)`` and ``(T,)`` -> ``(1, T, 1)``: the package's (B, T, H, ·) layout."""
    return x.unsqueeze(0).unsqueeze(2)


def chunk_linear_attention_spec(q, k, v, S, chunk_size):
    """The package's chunked linear attention on one head: ``q, k`` ``(T, D_k)``, ``v`` ``(T, D_v)``,
    ``S`` ``(D_k, D_v)``; returns ``o`` ``(T, D_v)`` and the final state ``(D_k, D_v)``."""
    o, S_T = ops.linear_attention_chunk(
        _one_head(q),
        _one_head(k),
        _one_head(v),
        scale=1.0,
        initial_state=S[None, None],
        output_final_state=True,
        chunk_size=chunk_size,
    )
    return o[0, :, 0], S_T[0, 0]


def ut_transform_spec(k, beta):
    """The UT matrix ``𝒯 = (I + tril(diag(β) K Kᵀ, −1))⁻¹ diag(β)`` for one chunk: ``k`` ``(C, D_k)``, ``beta``
    ``(C,)``; returns ``(C, C)``. Source: Yang et al. 2024, eq. for the UT transform (Joffrain et al. 2006)."""
    C = k.shape[0]
    A = torch.tril(beta[:, None] * (k @ k.T), diagonal=-1)
    eye = torch.eye(C, dtype=k.dtype)
    return torch.linalg.solve_triangular(eye + A, torch.diag(beta), upper=False, unitriangular=True)


def delta_rule_chunk_step_spec(q, k, v, beta, S):
    """The package's chunked delta rule on one chunk of one head (``scale=1``): returns ``(o, S')``."""
    o, S_new = ops.delta_rule_chunk(
        _one_head(q),
        _one_head(k),
        _one_head(v),
        _one_head(beta),
        scale=1.0,
        initial_state=S[None, None],
        output_final_state=True,
        chunk_size=q.shape[0],
        check_stability="ignore",
    )
    return o[0, :, 0], S_new[0, 0]


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _unit_rows(n: int, d: int, g: torch.Generator) -> torch.Tensor:
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    return x / x.norm(dim=-1, keepdim=True)


def _correlated_rows(n: int, d: int, g: torch.Generator, spread: float = 0.3) -> torch.Tensor:
    """Unit keys around one common direction (mean cosine about 0.9 at ``spread = 0.3``): the Gram matrix is far
    from diagonal, as in a real chunk, and ``(I + A)⁻¹`` has entries of order one."""
    centre = torch.randn(d, generator=g, dtype=torch.float64)
    x = centre + spread * centre.norm() / math.sqrt(d) * torch.randn(n, d, generator=g, dtype=torch.float64)
    return x / x.norm(dim=-1, keepdim=True)


def _linear_attention_cases() -> Iterator[dict]:
    # (T, D_k, D_v, chunk_size): T not a multiple of C, C = 1, one chunk longer than T, D_k ≠ D_v
    for i, (T, d_k, d_v, C) in enumerate([(8, 4, 3, 4), (11, 5, 6, 4), (7, 3, 3, 1), (5, 4, 2, 8), (20, 6, 4, 6)]):
        yield {**random_case(900 + i, q=(T, d_k), k=(T, d_k), v=(T, d_v), S=(d_k, d_v)), "chunk_size": C}


def _ut_cases() -> Iterator[dict]:
    for i, (C, d_k) in enumerate([(1, 3), (4, 4), (6, 3), (8, 16)]):
        g = _generator(910 + i)
        yield {"k": _unit_rows(C, d_k, g), "beta": torch.rand(C, generator=g, dtype=torch.float64)}
    g = _generator(915)  # keys of several lengths (the text does not ask for unit keys), and correlated keys at β = 1
    yield {
        "k": 1.5 * torch.randn(6, 5, generator=g, dtype=torch.float64),
        "beta": torch.rand(6, generator=g, dtype=torch.float64),
    }
    yield {"k": _correlated_rows(8, 6, g), "beta": torch.ones(8, dtype=torch.float64)}


def _step_cases() -> Iterator[dict]:
    for i, (C, d_k, d_v) in enumerate([(1, 3, 2), (4, 4, 4), (6, 5, 3), (8, 8, 5)]):
        g = _generator(920 + i)
        yield {
            "q": torch.randn(C, d_k, generator=g, dtype=torch.float64),
            "k": _unit_rows(C, d_k, g) if i < 3 else _correlated_rows(C, d_k, g),
            "v": torch.randn(C, d_v, generator=g, dtype=torch.float64),
            "beta": torch.rand(C, generator=g, dtype=torch.float64),
            "S": torch.randn(d_k, d_v, generator=g, dtype=torch.float64),  # a nonzero state: U − W S matters
        }


def _with_state(case: dict, seed: int) -> dict:
    """Chapter 02's chunk case (``q, k, v, chunk_size``) with a random nonzero initial state ``S`` ``(D_k, D_v)`` in
    the case's dtype, drawn from a generator seeded with ``seed`` (the grader reseeds it as it reseeds the case)."""
    d_k, d_v = case["k"].shape[1], case["v"].shape[1]
    g = torch.Generator().manual_seed(seed)
    S = torch.randn(d_k, d_v, generator=g, dtype=torch.float64).to(case["q"].dtype)
    return {"q": case["q"], "k": case["k"], "v": case["v"], "S": S, "chunk_size": case["chunk_size"]}


def _chunk_with_state_at_size(chunk_size: int) -> dict:
    """One full chunk and a short last one of ``C − 1`` tokens (``T = 2C − 1``), as chapter 02's operation count, with
    an initial state."""
    return _with_state(_chunk_with_short_tail(chunk_size), 960 + chunk_size)


def _chunk_with_state_at_length(t: int) -> dict:
    """``T`` tokens of width 16 in chunks of 8, as chapter 02's work count, with an initial state."""
    return _with_state(_chunk_at_length(t), 970 + t)


#: chapter 02's rules of the chunk form (Exercise 2.3: operations at two chunk sizes, work affine in T, no tensor larger
#: than the chunks' own), each on the same sizes and with the same bounds, on its cases with an initial state
_CHUNK_RULES = _check_chunk_without_state.__exercise__.rules


@exercise(
    reference=chunk_linear_attention_spec,
    cases=_linear_attention_cases,
    rules=dataclasses.replace(
        _CHUNK_RULES,
        answers=(ops.linear_attention_chunk, ops.linear_attention_recurrent, ops.linear_attention_parallel),
        inputs_unchanged=True,  # `S += K.T @ V` would overwrite the caller's initial state
        op_count=dataclasses.replace(_CHUNK_RULES.op_count, case=_chunk_with_state_at_size),
        work=tuple(dataclasses.replace(rule, case=_chunk_with_state_at_length) for rule in _CHUNK_RULES.work),
    ),
    rtol=1e-8,
    atol=1e-10,
)
def check_chunk_linear_attention(chunk_linear_attention: Callable) -> bool:
    """Check ``chunk_linear_attention(q, k, v, S, chunk_size) -> (o, S_T)`` on one head, ``scale = 1``, leaving ``S``
    as it was (a short last chunk, ``C = 1``, ``C ≥ T``, ``D_k ≠ D_v``).

    Beyond the values, the answer is held to what a chunk form does by chapter 02's rules of Exercise 2.3
    (:func:`ttr_edu.checks.linear_attention_is_fwp.check_chunk_linear_attention`), on its cases with a random
    nonzero initial state added, however it is written (a loop over the chunks, or all chunks at once with a
    cumulative sum of their states):

    * its operations, counted on one full chunk and a short last one of ``C − 1`` tokens at ``C = 2`` and ``C = 16``:
      as many at both for a chunk form, more at the larger ``C`` for a loop over single tokens (one that ignores
      ``chunk_size``, or takes the short last chunk token by token);
    * its intermediate tensors (:class:`~ttr_edu.checks.linear_attention_is_fwp._ChunkSizes`): none larger than twice
      the chunk form's own largest array (the scores, states or rows of all chunks), so no ``T × T`` matrix, sliced
      per chunk or not, and no state per token;
    * the work of its torch operations at ``T = 128``, ``256`` and ``512`` in chunks of 8: exactly affine in ``T``.

    Such answers are refused with a message that says which rule they break.
    """


@exercise(reference=ut_transform_spec, cases=_ut_cases, rules=Rules(answers=(ut_solve,)), rtol=1e-8, atol=1e-10)
def check_ut_transform(ut_transform: Callable) -> bool:
    """Check ``ut_transform(k, beta) -> 𝒯 = (I + tril(diag(β) K Kᵀ, −1))⁻¹ diag(β)`` (unit keys, keys of several
    lengths, and correlated keys at β = 1)."""


def _helper_state(helper: Callable) -> str | None:
    """Why ``helper(k, beta)`` (the notebook's ``ut_transform``) cannot be trusted by the next check: ``"is still a
    stub"`` (it raises ``NotImplementedError``), ``"does not pass its check"`` (it raises, or it disagrees with
    :func:`ut_transform_spec` on the first case), or ``None`` when it agrees."""
    case = next(_ut_cases())
    try:
        got = helper(**case)
    except NotImplementedError:
        return "is still a stub"
    except Exception:  # a written but broken helper: its own check names the error
        return "does not pass its check"
    want = ut_transform_spec(**case)
    agrees = (
        type(got) is torch.Tensor and got.shape == want.shape and bool(torch.allclose(got, want, rtol=1e-8, atol=1e-10))
    )
    return None if agrees else "does not pass its check"


def _raised_in(error: BaseException, fn: Callable) -> str:
    """The name of the function whose body raised ``error`` (the innermost frame of its traceback)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_name if tb is not None else getattr(fn, "__name__", "?")


#: the tolerances of 11.3's check (its values, and whether they agree before the step is probed for its use of 𝒯)
_STEP_RTOL, _STEP_ATOL = 1e-8, 1e-10

#: the case of 11.3's check on which its note is printed: the first (a chunk of one token)
_FIRST_STEP_CASE_LENGTH = 1


def _step_with_ut_transform(delta_rule_chunk_step: Callable, case: dict):
    """Call the answer on ``case``. The step calls ``ut_transform`` from the notebook (Exercise 11.2): while that is a
    stub, or written but wrong, :func:`ut_transform_spec` stands in for it during the call (and the first case says
    so), so that a written step is checked on its own: not reported as "not attempted", nor failed for 11.2's
    mistake. A ``NotImplementedError`` from any other helper is reported by name. The exercise says "use your
    ut_transform", so a step that never calls it (a token loop, an inverse of its own) fails, by the calls counted
    while it runs, and so does one that calls it and throws the result away: its outputs do not change when
    ``ut_transform`` returns a changed 𝒯 (:func:`_uses_what_ut_transform_returns`). With no ``ut_transform`` in the
    answer's namespace, the package's is lent under that name for the call (and removed after it)."""
    namespace = getattr(delta_rule_chunk_step, "__globals__", {})
    absent = object()
    helper = namespace.get("ut_transform", absent)
    if not callable(helper):
        why: str | None = "is not defined"
    else:
        why = _helper_state(helper) if helper is not ut_transform_spec else None
    lent = ut_transform_spec if why is not None else helper
    calls = 0

    def counted(*args, **kwargs):
        nonlocal calls
        calls += 1
        return lent(*args, **kwargs)

    namespace["ut_transform"] = counted
    probe_case = {key: value.clone() if isinstance(value, torch.Tensor) else value for key, value in case.items()}
    try:
        result = delta_rule_chunk_step(**case)
    except NotImplementedError as error:
        where = _raised_in(error, delta_rule_chunk_step)
        if where == getattr(delta_rule_chunk_step, "__name__", where):
            raise  # the step itself is the stub
        raise CheckFailed(
            f"delta_rule_chunk_step calls `{where}`, which is not written yet (it raised NotImplementedError): "
            "solve its exercise first, or compute that part inside the step"
        ) from error
    finally:
        if helper is absent:
            namespace.pop("ut_transform", None)
        else:
            namespace["ut_transform"] = helper
    if calls == 0:
        raise CheckFailed(
            "delta_rule_chunk_step never called ut_transform: the exercise builds the chunk from the UT matrix of "
            "your Exercise 11.2 (𝒯, then W = 𝒯K and U = 𝒯V, then the pseudo-values against S), not token by token "
            "or with an inverse of its own; call ut_transform(k, beta) once"
        )
    if _agrees_with_spec(result, probe_case) and not _uses_what_ut_transform_returns(
        delta_rule_chunk_step, namespace, helper, absent, lent, probe_case, result
    ):
        raise CheckFailed(
            "delta_rule_chunk_step called ut_transform but does not build both outputs from what it returns: called "
            "once more with a changed 𝒯 from ut_transform, it gave the same o or the same S', or refused the changed "
            "𝒯 (a token loop, say, for one output or both); build the chunk from 𝒯: W = 𝒯K and U = 𝒯V, then the "
            "pseudo-values U − W S, from which come both o and S'"
        )
    if why is not None and case["q"].shape[0] == _FIRST_STEP_CASE_LENGTH:  # said once, when the step is written
        print(
            f"note: ut_transform (Exercise 11.2) {why}, so this check lends your "
            "delta_rule_chunk_step the package's checks.ut_transform_spec in its place."
        )
    return result


def _agrees_with_spec(result, case: dict) -> bool:
    """Whether ``result`` has the values of :func:`delta_rule_chunk_step_spec` on ``case`` (at the check's tolerance).
    Only then is the step probed for what it builds from 𝒯: a wrong answer fails on its values, and the message says
    so, even where the probe would also see an output that does not move with 𝒯 (a strict causal mask, at C = 1, makes
    o = qS, independent of 𝒯)."""
    q, k, v, beta, S = (case[name] for name in ("q", "k", "v", "beta", "S"))
    # delta_rule_chunk_step_spec's values, written out from 𝒯: calling the reference here, under the guard that the
    # answer runs in, would read as the answer calling the package's implementation
    ut = ut_transform_spec(k, beta)
    pseudo = ut @ v - (ut @ k) @ S
    want = (q @ S + torch.tril(q @ k.T) @ pseudo, S + k.T @ pseudo)
    if not (isinstance(result, (tuple, list)) and len(result) == len(want)):
        return False
    return all(
        isinstance(r, torch.Tensor)
        and r.shape == w.shape
        and r.dtype == w.dtype
        and bool(torch.allclose(r, w, rtol=_STEP_RTOL, atol=_STEP_ATOL))
        for r, w in zip(result, want)
    )


def _uses_what_ut_transform_returns(step, namespace, helper, absent, lent, case: dict, result) -> bool:
    """Whether ``step``'s outputs are built from the 𝒯 that ``ut_transform`` returns, judged by what it does: the step
    runs once more on ``case`` (a copy of its inputs) with ``ut_transform`` returning 𝒯 plus a fixed lower triangular
    change; a step that builds ``W = 𝒯K, U = 𝒯V`` from it gives another o and another S′ (both are built from the
    pseudo-values U − W S), one that throws the result away (or multiplies it by zero), or builds only one output from
    it, keeps an output the same; a step that refuses the changed 𝒯 (raises) does not build from it either. A result
    that is no pair of tensors is left to the values' check (True)."""
    if not (
        isinstance(result, (tuple, list)) and len(result) == 2 and all(isinstance(r, torch.Tensor) for r in result)
    ):
        return True

    def changed(*args, **kwargs):
        ut = lent(*args, **kwargs)
        if not (isinstance(ut, torch.Tensor) and ut.dim() == 2 and ut.is_floating_point()):
            return ut
        gen = torch.Generator().manual_seed(950)
        return ut + 0.5 * torch.tril(torch.randn(ut.shape, generator=gen, dtype=torch.float64)).to(ut.dtype)

    namespace["ut_transform"] = changed
    try:
        probe = step(**case)
    except Exception:  # a check of its own that 𝒯 is the inverse: the step recomputes what it was given
        return False
    finally:
        if helper is absent:
            namespace.pop("ut_transform", None)
        else:
            namespace["ut_transform"] = helper
    if not (isinstance(probe, (tuple, list)) and len(probe) == 2):
        return True
    same = [
        isinstance(p, torch.Tensor) and p.shape == r.shape and bool(torch.allclose(p, r, rtol=1e-10, atol=1e-12))
        for p, r in zip(probe, result)
    ]
    return not any(same)


@exercise(
    reference=delta_rule_chunk_step_spec,
    cases=_step_cases,
    rules=Rules(
        answers=(ops.delta_rule_chunk, ops.delta_rule_recurrent, ops.delta_rule_parallel, ops.delta_rule_pseudo_values)
    ),
    call=_step_with_ut_transform,
    rtol=_STEP_RTOL,
    atol=_STEP_ATOL,
)
def check_delta_rule_chunk_step(delta_rule_chunk_step: Callable) -> bool:
    """Check ``delta_rule_chunk_step(q, k, v, beta, S) -> (o, S')`` for one chunk, ``scale = 1`` (near-orthogonal and
    correlated keys). While ``ut_transform`` (Exercise 11.2) is a stub or wrong, the package's stands in for it."""


# ---------------------------------------------------------------------------------------------------------------
# The backward pass through the UT transform (Exercise 11.4).


def _ut_outputs_autograd(k, v, beta, dW, dU):
    """Autograd's gradients of ``⟨dW, 𝒯K⟩ + ⟨dU, 𝒯V⟩`` with respect to ``k, v, beta`` (the check's reference)."""
    k, v, beta = (x.detach().clone().requires_grad_() for x in (k, v, beta))
    ut = ut_transform_spec(k, beta)
    loss = (dW * (ut @ k)).sum() + (dU * (ut @ v)).sum()
    return tuple(torch.autograd.grad(loss, (k, v, beta)))


def ut_transform_backward_spec(k, v, beta, dW, dU):
    """The backward pass of ``W = 𝒯K, U = 𝒯V`` with ``𝒯 = (I + A)⁻¹ diag(β)``, ``A = tril(diag(β) K Kᵀ, −1)``,
    written out (Yang et al. 2024, the chunkwise backward of the delta rule): returns ``(dk, dv, dbeta)``.

    ``d𝒯 = dW Kᵀ + dU Vᵀ``; with ``X = (I + A)⁻¹``: ``dA = −Xᵀ (d𝒯 diag(β)) Xᵀ`` on the strict lower triangle (the
    second triangular solve, with the transposed factor); then ``A``'s dependence on ``β`` and ``K``.
    Shapes: ``k`` ``(C, D_k)``, ``v`` and ``dU`` ``(C, D_v)``, ``beta`` ``(C,)``, ``dW`` ``(C, D_k)``.
    """
    C = k.shape[0]
    eye = torch.eye(C, dtype=k.dtype)
    gram = k @ k.T  # (C, C)
    A = torch.tril(beta[:, None] * gram, diagonal=-1)
    X = torch.linalg.solve_triangular(eye + A, eye, upper=False, unitriangular=True)  # (I + A)⁻¹
    ut = X * beta[None, :]  # 𝒯 = X diag(β)
    d_ut = dW @ k.T + dU @ v.T  # (C, C)
    dk = ut.T @ dW  # W = 𝒯K, through K
    dv = ut.T @ dU  # U = 𝒯V
    dbeta = torch.diagonal(X.T @ d_ut).clone()  # 𝒯 = X diag(β), through diag(β)
    dA = torch.tril(-X.T @ (d_ut * beta[None, :]) @ X.T, diagonal=-1)  # through X = (I + A)⁻¹
    dbeta = dbeta + (dA * gram).sum(1)  # A = tril(diag(β) K Kᵀ, −1), through β ...
    dk = dk + (beta[:, None] * dA + dA.T * beta[None, :]) @ k  # ... and through both K's
    return dk, dv, dbeta


def _ut_backward_cases() -> Iterator[dict]:
    for i, (C, d_k, d_v) in enumerate([(1, 3, 2), (4, 4, 3), (6, 5, 4), (8, 8, 5), (12, 6, 7)]):
        g = _generator(930 + i)
        yield {
            "k": _unit_rows(C, d_k, g) if i < 4 else _correlated_rows(C, d_k, g),
            "v": torch.randn(C, d_v, generator=g, dtype=torch.float64),
            "beta": torch.rand(C, generator=g, dtype=torch.float64),
            "dW": torch.randn(C, d_k, generator=g, dtype=torch.float64),
            "dU": torch.randn(C, d_v, generator=g, dtype=torch.float64),
        }


#: the most numbers an answer to 11.4 may write per entry of its inputs (``k``, ``v``, ``beta``): the derivation
#: writes 6 to 19 (:func:`ut_transform_backward_spec` on the check's cases, the most at C = 12); a numerical gradient
#: evaluates the forward pass once or more per input entry, each evaluation writing several C × C matrices: a
#: five-point stencil writes 105 to 5603 per entry, the complex step 29 to 1404 (over 150 from C = 4)
MAX_WRITES_PER_INPUT = 150
#: the most distinct matrices an answer to 11.4 may invert, factorise or solve with (:data:`_FACTOR`) in one call, a
#: matrix and its transpose counted as one: the derivation needs only ``I + A`` (however many solves it spells, with it
#: or its transpose, by columns, or after an LU factorisation, whose packed factor makes a second); a numerical dβ
#: solves with ``I + A(β ± h e_j)``, a new matrix for each move (C + 1 or more, batched into one call or not), and
#: with its forward pass cut down to what depends on β it writes too little for the writes bound to see
MAX_MATRICES_SOLVED = 3
#: bound at import: the check's own reading of a matrix it keys, not the answer's conversion
_DISABLE_TORCH_FUNCTION = torch._C.DisableTorchFunction
_WHY_BACKWARD = "write the gradients out from the derivation above (d𝒯, then dA through the inverse, then dk and dβ)"


class _WrittenOutGradient:
    """What Exercise 11.4 rules out besides autograd, judged by what the answer runs: a numerical gradient (finite
    differences of any stencil, the complex step). Watched on the torch operations (a dispatch mode) and the tensor
    methods (a function mode) of one call:

    * **writes**: more than :data:`MAX_WRITES_PER_INPUT` numbers written per entry of ``k``, ``v`` and ``beta``
      (views write nothing): a numerical gradient evaluates the forward pass at least once per entry;
    * **matrices solved with**: more than :data:`MAX_MATRICES_SOLVED` distinct matrices inverted, factorised or solved
      with (a matrix and its transpose are one; each matrix of a batch counts): a numerical dβ solves with a new
      matrix for each entry of β it moves, however little else it computes;
    * **complex numbers**: any complex tensor (the complex step evaluates at ``x + ih``; nothing in this real exercise
      needs one);
    * **Python numbers**: as many numbers handed to Python or NumPy (``.item()``, ``.tolist()``, ``.numpy()``, a
      printed tensor...) as the inputs have entries: a difference quotient in Python floats reads them all.

    ``hit`` is set on leaving: the first sign's message."""

    def __init__(self, case: dict) -> None:
        self.size = sum(case[name].numel() for name in ("k", "v", "beta"))
        self.written = self.to_python = 0
        self.solved: set[bytes] = set()  # the matrices inverted, factorised or solved with (:meth:`_note_solved`)
        self.complex: str | None = None
        self.hit: str | None = None
        # the numbers handed to Python: conversions and printings (converted below), and single numbers, counted by
        # the dispatch mode with python.read_at_dispatch; python.printing: inside a printing, where torch's formatter
        # runs with the modes on and its reads and writes are not the answer's
        self.python = conversion_watch(self)
        watch = self

        class Operations(TorchDispatchMode):
            @classmethod
            def _should_skip_dynamo(cls) -> bool:
                return False

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if watch.python.printing:  # torch's formatter reading what it prints: counted once, by the printing
                    return out
                watch.to_python += watch.python.read_at_dispatch(func, args)
                name = func.__name__.split(".")[0]
                if name in _FACTOR and len(args) > _FACTOR[name] and isinstance(args[_FACTOR[name]], torch.Tensor):
                    watch._note_solved(args[_FACTOR[name]])
                if not func.is_view:
                    outs = out if isinstance(out, (tuple, list)) else (out,)
                    for o in outs:
                        if isinstance(o, torch.Tensor):
                            watch.written += o.numel()
                            if o.is_complex() and watch.complex is None:
                                watch.complex = f"{func.__name__.split('.')[0]} made a {o.dtype} tensor"
                return out

        self._modes = (Operations(), self.python)

    def converted(self, numbers: int, spelled: str) -> None:
        """``numbers`` handed to NumPy or Python by a conversion or a printing
        (:func:`~ttr_edu.checks._core.conversion_watch`)."""
        self.to_python += numbers

    def _note_solved(self, matrix: torch.Tensor) -> None:
        """Remember each matrix of ``matrix`` (a batch of them, or one) by its values, a matrix and its transpose
        alike (the smaller of the two keys)."""
        if matrix.dim() < 2 or matrix.is_meta:
            return
        with _DISABLE_TORCH_FUNCTION():
            for m in matrix.detach().reshape(-1, *matrix.shape[-2:]):
                keys = [
                    repr((x.dtype, tuple(x.shape))).encode() + x.contiguous().cpu().numpy().tobytes() for x in (m, m.T)
                ]
                self.solved.add(min(keys))

    def __enter__(self) -> _WrittenOutGradient:
        push_watch(*self._modes)
        return self

    def __exit__(self, *exc) -> None:
        if not pop_watch(*self._modes):
            self.hit = "your function switched off the check's watch of its torch operations; remove that code"
        elif self.complex is not None:
            self.hit = (
                f"your function computes with complex numbers ({self.complex}): the complex step evaluates the forward "
                f"pass at x + ih, a numerical gradient, which this exercise rules out, as it rules out finite "
                f"differences: {_WHY_BACKWARD}"
            )
        elif self.written > MAX_WRITES_PER_INPUT * self.size:
            self.hit = (
                f"your function's torch operations wrote {self.written} numbers for inputs of {self.size} entries, "
                f"{self.written / self.size:.0f} per entry (the derivation writes about 20, at most "
                f"{MAX_WRITES_PER_INPUT} are allowed): a numerical gradient (finite differences of any stencil, the "
                f"complex step) evaluates the forward pass once or more per entry, which this exercise rules out: "
                f"{_WHY_BACKWARD}"
            )
        elif len(self.solved) > MAX_MATRICES_SOLVED:
            self.hit = (
                f"your function inverted, factorised or solved with {len(self.solved)} different matrices in one call "
                f"(the derivation needs I + A alone, or its transpose; at most {MAX_MATRICES_SOLVED} are allowed): a "
                f"numerical gradient solves with a new matrix for each entry of β it moves, which this exercise rules "
                f"out: {_WHY_BACKWARD}"
            )
        elif self.to_python >= self.size:
            self.hit = (
                f"your function handed {self.to_python} numbers to Python or NumPy, as many as its inputs have "
                f"entries ({self.size}): a numerical gradient in Python floats reads them all, which this exercise "
                f"rules out; work in torch: {_WHY_BACKWARD}"
            )


@exercise(
    reference=_ut_outputs_autograd,
    cases=_ut_backward_cases,
    rules=Rules(
        answers=(ut_transform_backward_spec,),
        no_autograd=True,
        inputs_unchanged=True,
        watch=_WrittenOutGradient,
        why=_WHY_BACKWARD,
    ),
    rtol=1e-8,
    atol=1e-10,
)
def check_ut_transform_backward(ut_transform_backward: Callable) -> bool:
    """Check ``ut_transform_backward(k, v, beta, dW, dU) -> (dk, dv, dbeta)`` against autograd through
    :func:`ut_transform_spec`: the gradients of ``⟨dW, 𝒯K⟩ + ⟨dU, 𝒯V⟩``, written out (autograd inside the answer is
    refused, however it is reached, and so is a numerical gradient: :class:`_WrittenOutGradient`), the inputs left as
    they were."""


# ---------------------------------------------------------------------------------------------------------------
# The blocked triangular inverse (Exercise 11.5).

#: aten operators that invert, factorise or solve with a matrix -> the position of that matrix among their arguments
#: (the right-hand side of a solve may be as wide as it likes: a block row of the identity, say)
_FACTOR = {
    "linalg_inv_ex": 0,
    "linalg_solve_triangular": 0,
    "triangular_solve": 1,
    "_linalg_solve_ex": 0,
    "linalg_solve": 0,
    "linalg_lstsq": 0,
    "linalg_pinv": 0,
    "linalg_lu": 0,
    "linalg_lu_factor_ex": 0,
    "linalg_lu_solve": 0,
    "linalg_cholesky_ex": 0,
    "cholesky_solve": 1,
    "cholesky_inverse": 0,
    "linalg_ldl_factor_ex": 0,
    "linalg_qr": 0,
    "geqrf": 0,
    "_linalg_eigh": 0,
    "linalg_eig": 0,
    "linalg_eigvals": 0,
    "_linalg_svd": 0,
}
#: aten operators that combine rows or columns: a matrix product or a sum along an axis (what each step of a
#: substitution, or of a blocked product, runs)
_PRODUCTS = {"mm", "addmm", "bmm", "baddbmm", "mv", "addmv", "dot", "vdot", "linalg_vecdot", "sum", "addr"}
#: aten operators of elementwise arithmetic: on single entries (0-d results), the steps of an entry-by-entry loop
_ELEMENTWISE = {"mul", "add", "sub", "rsub", "div", "neg", "addcmul", "addcdiv"}
#: tensor methods that hand a tensor's data to NumPy or Python -> how the course spells them
_CONVERSIONS = CONVERSIONS
#: torch functions that build a tensor from Python data
_FROM_PYTHON = {"tensor", "as_tensor", "asarray"}


def _multiply_adds(name: str, args: tuple) -> int:
    """The multiply-adds of one operator of :data:`_PRODUCTS` on ``args``: ``m k n`` for a matrix product (times the
    batch for ``bmm``), otherwise the size of its largest tensor argument (a sum, a matrix-vector product)."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if name in ("mm", "bmm") and len(tensors) >= 2:
        left, right = tensors[0], tensors[1]
    elif name in ("addmm", "baddbmm") and len(tensors) >= 3:
        left, right = tensors[1], tensors[2]
    else:
        return max((t.numel() for t in tensors), default=0)
    return left.numel() * right.shape[-1]


def _size(tensor: torch.Tensor) -> str:
    return "×".join(map(str, tensor.shape)) if tensor.dim() else "0-d"


class _BlockedInverseRules:
    """What Exercise 11.5 rules out, for a ``size × size`` matrix and ``block × block`` diagonal blocks, judged by the
    torch operations the answer runs (a dispatch mode) and the conversions it makes (a function mode). A blocked
    inverse inverts each diagonal block, then builds each other block, or block row, with a product of blocks; so:

    * **solves**: an inverse, factorisation or solve of a matrix (not its right-hand side) wider than ``block``;
    * **work in products**: more than ``2 size³`` multiply-adds, the work of two products of the whole matrix, in
      products and sums that touch a row or column wider than ``block``. A blocked inverse needs well under that (at
      ``size = 64``, ``block = 16``: the block rows of :func:`solve_tril_spec` 0.11 ``size³``, recursive halving
      0.25 ``size³``, a block row times the whole of ``X`` 1.25 ``size³``); a series over the whole matrix needs
      more: the Neumann series ``Σ(−A)ⁿ`` by doubling, ``(I − A)(I + A²)(I + A⁴)…``, 11 whole products at
      ``size = 64`` (and in fp32 it fails on correlated keys), by Horner's rule ``X ← I − A X`` ``size`` of them
      (accurate, but ``size`` times the work);
    * **steps**: more than ``n²`` products or reductions (``n`` blocks along the side) that touch a row or column
      wider than ``block``: a blocked inverse needs at most one per pair of blocks, a substitution across the whole
      matrix one per row (or per pair of rows, per column, per entry). A reduction is judged by what it does, not by
      its name: any operation whose result has fewer entries than a wide operand (``sum``, ``nansum``, ``mean``...);
    * **products of any width**: more than ``size + 2 n²`` products or reductions, however narrow their operands:
      a blocked inverse needs one per row of a diagonal block's substitution and two per pair of blocks, a
      substitution across the whole matrix cut into pieces no wider than a block one per row and tile (310 at
      ``size = 64``, against 4 to 66 for the right answers the tests hold);
    * **operations**: more than ``4 n (n + 1)`` other operations that touch a row or column wider than ``block``
      (elementwise steps, scans such as ``cumsum``, copies): a blocked inverse runs a few per pair of blocks, a
      substitution across the whole matrix at least two per row;
    * **entries**: single entries read as Python numbers beyond the ``Σ bᵢ²`` entries of the diagonal blocks, or
      operations with a single-entry result (0-d or shape ``(1,)``: elementwise steps count one, products and sums of
      a row's entries their length) beyond the ``Σ bᵢ³`` an entry-by-entry inverse of the diagonal blocks needs: a
      substitution entry by entry, or column by column in tiles, across the whole matrix;
    * **conversions**: a tensor wider than ``block`` handed to NumPy or Python (``.numpy()``, ``.tolist()``,
      ``np.asarray``, its storage or data pointer), more numbers handed over in all than the ``Σ bᵢ²`` entries of the
      diagonal blocks (the off-diagonal blocks converted one by one: the whole matrix), or a tensor wider than
      ``block`` built from Python numbers.

    Entered around each call of the answer (:attr:`ttr_edu.checks._rules.Rules.watch`); ``hit`` is the first broken
    rule's message (also raised as :class:`ForbiddenCall`, so that the answer stops there).
    """

    def __init__(self, block: int, size: int) -> None:
        self.block, self.size = block, size
        blocks = [min(block, size - a) for a in range(0, size, block)]
        self.max_steps = len(blocks) ** 2
        self.max_reads = sum(b * b for b in blocks)
        self.max_element_ops = sum(b**3 for b in blocks)
        self.max_multiply_adds = 2 * size**3
        self.max_converted = self.max_reads
        self.max_wide_ops = 4 * len(blocks) * (len(blocks) + 1)
        self.max_products = size + 2 * len(blocks) ** 2
        self.steps = self.reads = self.element_ops = self.multiply_adds = self.converted = self.wide_ops = 0
        self.products = 0
        self.hit: str | None = None
        rules = self

        class Operations(TorchDispatchMode):
            @classmethod
            def _should_skip_dynamo(cls) -> bool:
                # torch wraps a mode's __torch_dispatch__ in a Dynamo guard that imports torch._dynamo on its first
                # use (seconds); nothing compiles inside an answer, so the guard is left out
                return False

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                name = func.__name__.split(".")[0]
                if name in _FACTOR and len(args) > _FACTOR[name] and isinstance(args[_FACTOR[name]], torch.Tensor):
                    rules._solve(name, args[_FACTOR[name]])
                out = func(*args, **(kwargs or {}))
                if not func.is_view and not rules.python.printing:  # a view computes nothing; printing reads only
                    rules._operation(name, args, out)
                return out

        class Conversions(PythonNumbers):
            """The conversions, counted by this exercise's rule (:meth:`_conversion`: every entry, booleans too, the
            whole matrix refused); what torch's formatter reads inside a printing is skipped (``printing``)."""

            def called(self, name: str, tensor: torch.Tensor) -> None:
                if name in _CONVERSIONS:
                    rules._conversion(tensor, _CONVERSIONS[name])

            def __torch_function__(self, func, types, args=(), kwargs=None):
                out = super().__torch_function__(func, types, args, kwargs)
                if getattr(func, "__name__", "") in _FROM_PYTHON and isinstance(out, torch.Tensor) and rules._wide(out):
                    rules._refuse(f"built a {_size(out)} tensor from Python numbers")
                return out

        self.python = Conversions()
        self._modes = (Operations(), self.python)

    # -- the rules ---------------------------------------------------------------------------------------------------

    def _wide(self, tensor: torch.Tensor) -> bool:
        return tensor.dim() > 0 and max(tensor.shape) > self.block

    def _refuse(self, what: str) -> None:
        message = (
            f"your function {what}; the exercise inverts only the {self.block}×{self.block} diagonal blocks and builds "
            "every other block with matrix products of whole blocks"
        )
        if self.hit is None:
            self.hit = message
        raise ForbiddenCall(message)

    def _solve(self, name: str, matrix: torch.Tensor) -> None:
        if matrix.dim() >= 2 and max(matrix.shape[-2:]) > self.block:
            self._refuse(f"called {name} on a {_size(matrix)} matrix")

    def _conversion(self, tensor: torch.Tensor, spelled: str) -> None:
        if self._wide(tensor):
            self._refuse(
                f"converted a {_size(tensor)} tensor with {spelled} (NumPy or Python may handle a diagonal block of "
                f"at most {self.block}×{self.block}, not the whole matrix)"
            )
        self.converted += tensor.numel()
        if self.converted > self.max_converted:  # block by block, the off-diagonal blocks too: the whole matrix
            self._refuse(
                f"handed {self.converted} numbers to NumPy or Python (the last with {spelled}), more than the "
                f"{self.max_converted} entries of the diagonal blocks: NumPy or Python may invert the diagonal "
                "blocks, but every other block is built in torch, with matrix products of whole blocks"
            )

    def _operation(self, name: str, args: tuple, out) -> None:
        if name == "_local_scalar_dense":
            self.reads += 1
            if self.reads > self.max_reads:
                self._refuse(
                    f"works entry by entry with Python numbers: it read {self.reads} single entries, more than the "
                    f"{self.max_reads} the diagonal blocks hold: a substitution across the whole matrix"
                )
            return
        if not isinstance(out, torch.Tensor):
            return
        wide_inputs = [a.numel() for a in args if isinstance(a, torch.Tensor) and self._wide(a)]
        largest = max((a.numel() for a in args if isinstance(a, torch.Tensor)), default=0)
        combines = name in _PRODUCTS or out.numel() < largest  # a product, or a reduction whatever its name
        if out.numel() == 1 and not wide_inputs:
            # a single entry, 0-d or shape (1,): one elementwise step, or a product or reduction of its length
            if name in _ELEMENTWISE or combines:
                self.element_ops += _multiply_adds(name, args) if combines else 1
            if self.element_ops > self.max_element_ops:
                self._refuse(
                    f"works entry by entry: {self.element_ops} operations on single entries, products and sums of "
                    f"a row's entries counted by their length (an entry-by-entry inverse of the diagonal blocks "
                    f"needs at most {self.max_element_ops}), a substitution across the whole matrix"
                )
            return
        if combines:
            self.products += 1
            if self.products > self.max_products:
                n = len(range(0, self.size, self.block))
                self._refuse(
                    f"took {self.products} products or reductions (of any width), where a blocked inverse of "
                    f"{self.size}×{self.size} needs at most {self.max_products}: one per row of a diagonal block's "
                    f"substitution ({self.size}) and two per pair of its {n}×{n} blocks; more is a substitution "
                    "across the whole matrix cut into pieces no wider than a block (a row, a tile or a column at a "
                    "time)"
                )
        if not (wide_inputs or self._wide(out)):
            return
        if not combines:
            # not a product nor a reduction (whatever its name): an elementwise step, a scan, a copy, a new tensor
            self.wide_ops += 1
            if self.wide_ops > self.max_wide_ops:
                self._refuse(
                    f"ran {self.wide_ops} operations on rows or columns wider than a block, where a blocked inverse "
                    f"of {self.size}×{self.size} needs a few per pair of blocks, at most {self.max_wide_ops}: a "
                    "substitution across the whole matrix, one row (or column) per step"
                )
            return
        # a product, or any reduction of a wide operand (sum, nansum, mean...: judged by what it does to shapes)
        self.multiply_adds += _multiply_adds(name, args)
        if self.multiply_adds > self.max_multiply_adds:
            n = self.size
            self._refuse(
                f"spent {self.multiply_adds} multiply-adds in products on rows or columns wider than a block, "
                f"more than the work of two products of the whole {n}×{n} matrix ({self.max_multiply_adds}), "
                "where a blocked inverse needs well under that (the block rows of the exercise about a tenth of "
                "one whole product): that much work is a series over the whole matrix, such as the Neumann series "
                "by doubling, (I − A)(I + A²)(I + A⁴)…, which in fp32 fails on correlated keys, or by Horner's "
                f"rule, accurate but {n} products of the whole matrix"
            )
        self.steps += 1
        if self.steps > self.max_steps:
            self._refuse(
                f"took {self.steps} steps (products, sums or other reductions) on rows or columns wider than a "
                f"block, where a blocked inverse of {self.size}×{self.size} needs at most {self.max_steps}, one per "
                "pair of blocks: a substitution across the whole matrix (row by row, a few rows at a time, or "
                "column by column)"
            )

    # -- the context -------------------------------------------------------------------------------------------------

    def __enter__(self) -> _BlockedInverseRules:
        push_watch(*self._modes)
        return self

    def __exit__(self, *exc) -> None:
        if not pop_watch(*self._modes) and self.hit is None:
            self.hit = "your function switched off the check's watch of its torch operations; remove that code"


def solve_tril_spec(A: torch.Tensor, block: int = 16) -> torch.Tensor:
    """``(I + A)⁻¹`` for a strictly lower triangular ``A`` ``(C, C)``, by blocks of ``block`` rows, as fla's
    ``solve_tril`` does for its UT transform: invert the diagonal blocks ``L_ii`` (forward substitution, here a
    triangular solve of ``block`` rows), then, block row by block row, ``X_ij = −L_ii⁻¹ Σ_{j≤m<i} L_im X_mj``.
    ``C`` need not be a multiple of ``block`` (the last block is shorter)."""
    C = A.shape[0]
    L = torch.eye(C, dtype=A.dtype) + A
    X = torch.zeros_like(L)
    starts = list(range(0, C, block))
    for i, a in enumerate(starts):
        b = min(a + block, C)
        eye = torch.eye(b - a, dtype=A.dtype)
        X[a:b, a:b] = torch.linalg.solve_triangular(L[a:b, a:b], eye, upper=False, unitriangular=True)
        for c in starts[:i]:  # the blocks left of the diagonal, from the ones already known
            d = min(c + block, C)
            X[a:b, c:d] = -X[a:b, a:b] @ (L[a:b, c:a] @ X[c:a, c:d])
    return X


def _inverse(A: torch.Tensor, block: int = 16) -> torch.Tensor:
    return torch.linalg.inv(torch.eye(A.shape[0], dtype=A.dtype) + A)


def _solve_tril_cases() -> Iterator[dict]:
    # C = 64 as in fla (four blocks), one block, two, a ragged last block, smaller blocks, and a chunk of correlated
    # keys at β = 1 (X's entries of order one, the powers of A far larger)
    for i, (C, block) in enumerate([(64, 16), (16, 16), (32, 16), (40, 16), (24, 8)]):
        g = _generator(940 + i)
        k = _unit_rows(C, 16, g)
        beta = torch.rand(C, generator=g, dtype=torch.float64)
        yield {"A": torch.tril(beta[:, None] * (k @ k.T), diagonal=-1), "block": block}
    k = _correlated_rows(64, 16, _generator(946))
    yield {"A": torch.tril(k @ k.T, diagonal=-1), "block": 16}


def _blocked_inverse_rules(case: dict) -> _BlockedInverseRules:
    return _BlockedInverseRules(case["block"], case["A"].shape[0])


@exercise(
    reference=_inverse,
    cases=_solve_tril_cases,
    rules=Rules(answers=(solve_tril_spec,), inputs_unchanged=True, watch=_blocked_inverse_rules),
    rtol=1e-8,
    atol=1e-10,
)
def check_solve_tril(solve_tril: Callable) -> bool:
    """Check ``solve_tril(A, block) -> (I + A)⁻¹`` for ``A = tril(diag(β) K Kᵀ, −1)``, by blocks: no inverse or solve
    of a matrix wider than ``block``, no more work in products than two whole products, no substitution across it, no
    work outside torch on more than a block (see :class:`_BlockedInverseRules`)."""

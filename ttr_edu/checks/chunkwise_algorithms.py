"""Checks for the chunkwise algorithms chapter (11_chunkwise_algorithms). One head, no batch: the shapes a student
writes first.

* ``chunk_linear_attention(q, k, v, S, chunk_size) -> (o, S_T)`` is compared with
  :func:`ttr_edu.ops.linear_attention_chunk` (``scale=1``);
* ``ut_transform(k, beta) -> 𝒯`` with the spec :func:`ut_transform_spec`: the **UT matrix**
  ``𝒯 = (I + tril(diag(β) K Kᵀ, −1))⁻¹ diag(β)`` (the UT transform of Joffrain et al. 2006, as used for the delta rule
  by Yang et al. 2024; fla's convention). It is written 𝒯 (code: ``ut``), never ``T``, which is the sequence length;
* ``delta_rule_chunk_step(q, k, v, beta, S) -> (o, S')`` (one chunk) with :func:`ttr_edu.ops.delta_rule_chunk`.
  It calls the student's ``ut_transform``; while that is still a stub, the check lends the package's
  :func:`ut_transform_spec` in its place and says so, so the step can be checked on its own;
* ``ut_transform_backward(k, v, beta, dW, dU) -> (dk, dv, dbeta)``, the backward pass of ``W = 𝒯K, U = 𝒯V``, with
  **autograd** through :func:`ut_transform_spec` (an independent reference); :func:`ut_transform_backward_spec` is the
  same gradient written out, as the chapter derives it;
* ``solve_tril(A, block) -> (I + A)⁻¹`` for a strictly lower triangular ``A``, by blocks as fla's ``solve_tril``:
  compared with the inverse, and run under :class:`_LargeSolveGuard`, which refuses an inverse or a triangular solve
  of any matrix wider than ``block`` (the exercise inverts only the diagonal blocks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ttr_edu import ops
from ttr_edu.checks._core import CheckFailed, random_case, run_check

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


def _linear_attention_cases() -> Iterator[dict]:
    # (T, D_k, D_v, chunk_size): T not a multiple of C, C = 1, one chunk longer than T, D_k ≠ D_v
    for i, (T, d_k, d_v, C) in enumerate([(8, 4, 3, 4), (11, 5, 6, 4), (7, 3, 3, 1), (5, 4, 2, 8), (20, 6, 4, 6)]):
        yield {**random_case(900 + i, q=(T, d_k), k=(T, d_k), v=(T, d_v), S=(d_k, d_v)), "chunk_size": C}


def _ut_cases() -> Iterator[dict]:
    for i, (C, d_k) in enumerate([(1, 3), (4, 4), (6, 3), (8, 16)]):
        g = _generator(910 + i)
        yield {"k": _unit_rows(C, d_k, g), "beta": torch.rand(C, generator=g, dtype=torch.float64)}


def _step_cases() -> Iterator[dict]:
    for i, (C, d_k, d_v) in enumerate([(1, 3, 2), (4, 4, 4), (6, 5, 3), (8, 8, 5)]):
        g = _generator(920 + i)
        yield {
            "q": torch.randn(C, d_k, generator=g, dtype=torch.float64),
            "k": _unit_rows(C, d_k, g),
            "v": torch.randn(C, d_v, generator=g, dtype=torch.float64),
            "beta": torch.rand(C, generator=g, dtype=torch.float64),
            "S": torch.randn(d_k, d_v, generator=g, dtype=torch.float64),  # a nonzero state: U − W S matters
        }


def check_chunk_linear_attention(chunk_linear_attention: Callable) -> bool:
    """Check ``chunk_linear_attention(q, k, v, S, chunk_size) -> (o, S_T)`` on one head, ``scale = 1``."""
    return run_check(
        "chunk_linear_attention",
        chunk_linear_attention,
        chunk_linear_attention_spec,
        _linear_attention_cases(),
        rtol=1e-8,
        atol=1e-10,
        inputs_unchanged=True,  # `S += K.T @ V` would overwrite the caller's initial state
    )


def check_ut_transform(ut_transform: Callable) -> bool:
    """Check ``ut_transform(k, beta) -> 𝒯 = (I + tril(diag(β) K Kᵀ, −1))⁻¹ diag(β)``."""
    return run_check("ut_transform", ut_transform, ut_transform_spec, _ut_cases(), rtol=1e-8, atol=1e-10)


def _is_stub(helper: Callable) -> bool:
    """Whether ``helper(k, beta)`` still raises ``NotImplementedError`` (an unsolved exercise)."""
    case = next(_ut_cases())
    try:
        helper(**case)
    except NotImplementedError:
        return True
    except Exception:  # a written but wrong helper: its own check reports it, and this one will see the result
        return False
    return False


def _raised_in(error: BaseException, fn: Callable) -> str:
    """The name of the function whose body raised ``error`` (the innermost frame of its traceback)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_name if tb is not None else getattr(fn, "__name__", "?")


def check_delta_rule_chunk_step(delta_rule_chunk_step: Callable) -> bool:
    """Check ``delta_rule_chunk_step(q, k, v, beta, S) -> (o, S')`` for one chunk, ``scale = 1``.

    The step calls ``ut_transform`` from the notebook (Exercise 11.2). If that is still a stub, the check puts
    :func:`ut_transform_spec` in its place for the duration of the check (and says so), so that a written step is
    checked, not reported as "not attempted". A ``NotImplementedError`` from any other helper is reported by name.
    """
    namespace = getattr(delta_rule_chunk_step, "__globals__", {})
    helper = namespace.get("ut_transform")
    lend = callable(helper) and helper is not ut_transform_spec and _is_stub(helper)

    noted = []

    def step(**case):
        try:
            result = delta_rule_chunk_step(**case)
            if lend and not noted:  # said once, and only when the step itself is written
                noted.append(True)
                print(
                    "note: ut_transform (Exercise 11.2) is still a stub, so this check lends your "
                    "delta_rule_chunk_step the package's checks.ut_transform_spec in its place."
                )
            return result
        except NotImplementedError as error:
            where = _raised_in(error, delta_rule_chunk_step)
            if where == getattr(delta_rule_chunk_step, "__name__", where):
                raise  # the step itself is the stub
            raise CheckFailed(
                f"delta_rule_chunk_step calls `{where}`, which is not written yet (it raised NotImplementedError): "
                "solve its exercise first, or compute that part inside the step"
            ) from error

    step.__name__ = getattr(delta_rule_chunk_step, "__name__", "delta_rule_chunk_step")
    if lend:
        namespace["ut_transform"] = ut_transform_spec
    try:
        return run_check(
            "delta_rule_chunk_step", step, delta_rule_chunk_step_spec, _step_cases(), rtol=1e-8, atol=1e-10
        )
    finally:
        if lend:
            namespace["ut_transform"] = helper


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
            "k": _unit_rows(C, d_k, g),
            "v": torch.randn(C, d_v, generator=g, dtype=torch.float64),
            "beta": torch.rand(C, generator=g, dtype=torch.float64),
            "dW": torch.randn(C, d_k, generator=g, dtype=torch.float64),
            "dU": torch.randn(C, d_v, generator=g, dtype=torch.float64),
        }


def check_ut_transform_backward(ut_transform_backward: Callable) -> bool:
    """Check ``ut_transform_backward(k, v, beta, dW, dU) -> (dk, dv, dbeta)`` against autograd through
    :func:`ut_transform_spec`: the gradients of ``⟨dW, 𝒯K⟩ + ⟨dU, 𝒯V⟩``."""
    return run_check(
        "ut_transform_backward",
        ut_transform_backward,
        _ut_outputs_autograd,
        _ut_backward_cases(),
        rtol=1e-8,
        atol=1e-10,
        inputs_unchanged=True,
    )


# ---------------------------------------------------------------------------------------------------------------
# The blocked triangular inverse (Exercise 11.5).

#: aten operations that invert, factorise or solve with a matrix (what "invert only the diagonal blocks" forbids for
#: wider matrices).
_SOLVES = (
    "linalg_inv",
    "linalg_solve",
    "_linalg_solve",
    "linalg_solve_triangular",
    "triangular_solve",
    "linalg_lu",
    "lu_",
    "linalg_cholesky",
    "cholesky",
    "linalg_pinv",
    "linalg_lstsq",
    "_linalg_svd",
    "linalg_eig",
    "_linalg_eigh",
    "linalg_qr",
)


class _LargeSolveGuard(TorchDispatchMode):
    """Refuse any inverse, factorisation or solve of a matrix wider than ``block`` while active."""

    def __init__(self, block: int) -> None:
        super().__init__()
        self.block = block

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if name.startswith(_SOLVES):
            widest = max((max(a.shape[-2:]) for a in args if isinstance(a, torch.Tensor) and a.dim() >= 2), default=0)
            if widest > self.block:
                raise CheckFailed(
                    f"solve_tril: your function called {name} on a {widest}-wide matrix; the exercise inverts only the "
                    f"{self.block}×{self.block} diagonal blocks and builds the rest with matrix products"
                )
        return func(*args, **(kwargs or {}))


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
    # C = 64 as in fla (four blocks), one block, two, a ragged last block, and smaller blocks
    for i, (C, block) in enumerate([(64, 16), (16, 16), (32, 16), (40, 16), (24, 8)]):
        g = _generator(940 + i)
        k = _unit_rows(C, 16, g)
        beta = torch.rand(C, generator=g, dtype=torch.float64)
        yield {"A": torch.tril(beta[:, None] * (k @ k.T), diagonal=-1), "block": block}


def check_solve_tril(solve_tril: Callable) -> bool:
    """Check ``solve_tril(A, block) -> (I + A)⁻¹`` for ``A = tril(diag(β) K Kᵀ, −1)``, with no inverse or solve of
    a matrix wider than ``block`` (see :class:`_LargeSolveGuard`)."""

    def guarded_call(A, block):
        with _LargeSolveGuard(block):
            return solve_tril(A=A, block=block)

    guarded_call.__name__ = getattr(solve_tril, "__name__", "solve_tril")
    guarded_call.__wrapped__ = solve_tril
    return run_check(
        "solve_tril", guarded_call, _inverse, _solve_tril_cases(), rtol=1e-8, atol=1e-10, inputs_unchanged=True
    )

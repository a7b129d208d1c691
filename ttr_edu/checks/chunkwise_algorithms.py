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
  compared with the inverse, and run under :class:`_LargeSolveGuard`, which refuses what the exercise rules out: an
  inverse, factorisation or solve of any matrix wider than ``block``, a substitution that runs row by row (or column
  by column) across more than ``block`` columns, and work done outside torch on anything wider than a block (NumPy,
  Python lists, or Python numbers read from the off-diagonal blocks).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ttr_edu import ops
from ttr_edu.checks._core import CheckFailed, random_case
from ttr_edu.checks._rules import Rules, exercise, run_check

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


def check_delta_rule_chunk_step(delta_rule_chunk_step: Callable) -> bool:
    """Check ``delta_rule_chunk_step(q, k, v, beta, S) -> (o, S')`` for one chunk, ``scale = 1``.

    The step calls ``ut_transform`` from the notebook (Exercise 11.2). If that is still a stub, or written but wrong,
    the check puts :func:`ut_transform_spec` in its place for the duration of the check (and says so), so that a
    written step is checked on its own: not reported as "not attempted", nor failed for 11.2's mistake. A
    ``NotImplementedError`` from any other helper is reported by name.
    """
    namespace = getattr(delta_rule_chunk_step, "__globals__", {})
    helper = namespace.get("ut_transform")
    why = _helper_state(helper) if callable(helper) and helper is not ut_transform_spec else None
    lend = why is not None

    noted = []

    def step(**case):
        try:
            result = delta_rule_chunk_step(**case)
            if lend and not noted:  # said once, and only when the step itself is written
                noted.append(True)
                print(
                    f"note: ut_transform (Exercise 11.2) {why}, so this check lends your "
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


@exercise(
    reference=_ut_outputs_autograd,
    cases=_ut_backward_cases,
    rules=Rules(
        no_autograd=True,
        inputs_unchanged=True,
        why="write the gradients out from the derivation above (d𝒯, then dA through the inverse, then dk and dβ)",
    ),
    rtol=1e-8,
    atol=1e-10,
)
def check_ut_transform_backward(ut_transform_backward: Callable) -> bool:
    """Check ``ut_transform_backward(k, v, beta, dW, dU) -> (dk, dv, dbeta)`` against autograd through
    :func:`ut_transform_spec`: the gradients of ``⟨dW, 𝒯K⟩ + ⟨dU, 𝒯V⟩``, written out (autograd in any form is ruled
    out by what the answer calls)."""


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


#: aten operations that compute (not views, not factories): a vector result of one of these wider than ``block`` is a
#: "row step" of a substitution across the whole matrix.
_ARITHMETIC = (
    "mm", "mv", "addmm", "addmv", "bmm", "baddbmm", "dot", "vdot", "matmul", "mul", "div", "add", "sub", "rsub",
    "neg", "sum", "addcmul", "addcdiv", "copy_", "index_put", "index_put_", "where", "linalg_vecdot", "fill_",
)  # fmt: skip


class _LargeSolveGuard(TorchDispatchMode):
    """What Exercise 11.5 rules out, refused while active (``C`` is the matrix's size, ``block`` the diagonal blocks'):

    * an inverse, factorisation or solve (:data:`_SOLVES`) with a matrix wider than ``block`` (the right-hand side of
      a solve may be wider: a diagonal block solved against its block row is blocked forward substitution);
    * a forward (or backward) substitution across the whole matrix: more than ``C // 2`` **row steps**, arithmetic
      whose result is a single row or column wider than ``block`` (a blocked inverse computes whole blocks, so it makes
      none; a substitution across the matrix makes one or more per row);
    * element by element outside the diagonal blocks: more than ``C`` single entries written there by torch
      (``X[i, j] = ...``) or read from there as Python numbers (``float(L[i, j])``, ``.item()``) is a substitution
      entry by entry. Positions are read from the tensor's storage, so this covers ``C × C`` tensors (the input,
      ``I + A``, ``X``) and their views.

    Conversions to NumPy or Python lists of a tensor wider than ``block`` are refused by :func:`_torch_only`.
    """

    def __init__(self, block: int, size: int) -> None:
        super().__init__()
        self.block, self.size = block, size
        self.row_steps = 0
        self.element_steps = 0

    def _refuse(self, what: str) -> None:
        raise CheckFailed(
            f"your function {what}; the exercise inverts only the {self.block}×{self.block} diagonal blocks and "
            "builds the rest with matrix products of whole blocks"
        )

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if name.startswith(_SOLVES):
            # the matrix that is inverted, factorised or solved with, not a right-hand side: solving a diagonal block
            # against a whole block row is blocked forward substitution (triangular_solve(B, A) takes it second)
            factor = args[1] if name == "triangular_solve" and len(args) > 1 else args[0] if args else None
            width = max(factor.shape[-2:]) if isinstance(factor, torch.Tensor) and factor.dim() >= 2 else 0
            if width > self.block:
                self._refuse(f"called {name} on a {width}-wide matrix")
        if name == "_local_scalar_dense" and args and isinstance(args[0], torch.Tensor):
            self._count_element(args[0], "read")
        out = func(*args, **(kwargs or {}))
        if name in _ARITHMETIC and isinstance(out, torch.Tensor) and out.dim() == 0:
            self._count_element(out, "written")
        if (
            name in _ARITHMETIC
            and isinstance(out, torch.Tensor)
            and out.dim() in (1, 2)
            and (out.dim() == 1 or 1 in out.shape)
            and out.numel() > self.block
        ):
            self.row_steps += 1
            if self.row_steps > self.size // 2:
                self._refuse(
                    f"works one row (or column) of {out.numel()} entries at a time: {self.row_steps} vector steps "
                    f"wider than a block, a substitution across the whole matrix"
                )
        return out

    def _count_element(self, element: torch.Tensor, how: str) -> None:
        C = self.size
        if element.untyped_storage().nbytes() != C * C * element.element_size():
            return  # not an entry of a C × C matrix (a fresh scalar)
        row, column = divmod(element.storage_offset(), C)
        if row // self.block != column // self.block:
            self.element_steps += 1
            if self.element_steps > C:
                self._refuse(
                    f"works entry by entry outside the diagonal blocks ({self.element_steps} single entries "
                    f"{how} there, e.g. row {row}, column {column}), a substitution across the whole matrix"
                )


@contextlib.contextmanager
def _torch_only(block: int):
    """Refuse ``.numpy()``, ``np.asarray(...)`` and ``.tolist()`` of a tensor wider than ``block`` while active: the
    exercise is done with torch tensors (a diagonal block may still go to NumPy)."""
    originals = {name: getattr(torch.Tensor, name) for name in ("numpy", "tolist", "__array__")}
    spelled = {"numpy": ".numpy()", "tolist": ".tolist()", "__array__": "np.asarray or np.array"}

    def refusing(name):
        original = originals[name]

        def method(self, *args, **kwargs):
            if self.dim() and max(self.shape) > block:
                raise CheckFailed(
                    f"your function converted a {'×'.join(map(str, self.shape))} tensor with {spelled[name]}; the "
                    f"exercise works on torch tensors (NumPy or Python may handle a diagonal block of at most "
                    f"{block}×{block}, not the whole matrix)"
                )
            return original(self, *args, **kwargs)

        return method

    for name in originals:
        setattr(torch.Tensor, name, refusing(name))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


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
    """Check ``solve_tril(A, block) -> (I + A)⁻¹`` for ``A = tril(diag(β) K Kᵀ, −1)``, by blocks: no inverse or solve
    of a matrix wider than ``block``, no substitution across the whole matrix, no work outside torch on more than a
    block (see :class:`_LargeSolveGuard` and :func:`_torch_only`)."""

    def guarded_call(A, block):
        with _torch_only(block), _LargeSolveGuard(block, A.shape[0]):
            return solve_tril(A=A, block=block)

    guarded_call.__name__ = getattr(solve_tril, "__name__", "solve_tril")
    guarded_call.__wrapped__ = solve_tril
    return run_check(
        "solve_tril", guarded_call, _inverse, _solve_tril_cases(), rtol=1e-8, atol=1e-10, inputs_unchanged=True
    )

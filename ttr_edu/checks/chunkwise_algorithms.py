"""Checks for the chunkwise algorithms chapter (11_chunkwise_algorithms). One head, no batch: the shapes a student
writes first.

* ``chunk_linear_attention(q, k, v, S, chunk_size) -> (o, S_T)`` is compared with
  :func:`ttr_edu.ops.linear_attention_chunk` (``scale=1``);
* ``ut_transform(k, beta) -> 𝒯`` with the spec :func:`ut_transform_spec`: the **UT matrix**
  ``𝒯 = (I + tril(diag(β) K Kᵀ, −1))⁻¹ diag(β)`` (the UT transform of Joffrain et al. 2006, as used for the delta rule
  by Yang et al. 2024; fla's convention). It is written 𝒯 (code: ``ut``), never ``T``, which is the sequence length;
* ``delta_rule_chunk_step(q, k, v, beta, S) -> (o, S')`` (one chunk) with :func:`ttr_edu.ops.delta_rule_chunk`.
  It calls the student's ``ut_transform``; while that is still a stub, the check lends the package's
  :func:`ut_transform_spec` in its place and says so, so the step can be checked on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from ttr_edu import ops
from ttr_edu.checks._core import CheckFailed, random_case, run_check

__all__ = [
    "check_chunk_linear_attention",
    "check_ut_transform",
    "check_delta_rule_chunk_step",
    "chunk_linear_attention_spec",
    "ut_transform_spec",
    "delta_rule_chunk_step_spec",
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

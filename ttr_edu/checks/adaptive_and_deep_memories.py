"""Checks for chapter 08, adaptive steps and deep memories. Each compares with :mod:`ttr_edu.ops`.

* ``longhorn_step``, ``momentum_step``, ``mlp_gradient_step``: one token of one head against the package's ops;
* ``rotation_keys(theta) -> (k1, k2)``: two unit keys whose reflections (β = 2, first ``k1``) compose the rotation
  ``R(θ)``; the check compares the product of the two steps with ``R(θ)``, so every right pair of keys passes.

One head, one token: a linear memory ``S`` is ``(D_k, D_v)``, a key ``k`` is ``(D_k,)``, a value ``v`` is ``(D_v,)``;
the MLP memory is ``(W1, W2)`` of shapes ``(D_k, D_h)`` and ``(D_h, D_v)``. The references run the package's ops in
the fla layout ``(1, 1, 1, D)`` (one batch, one token, one head). Each exercise is declared once
(:func:`ttr_edu.checks._rules.exercise`): the package's own implementations are refused as answers, and the two
gradients the text asks to derive (8.3's and 8.4's) are refused when autograd computes them, however it is reached,
when one of autograd's derivative kernels does (``gelu_backward``), and when finite differences do (they write far
more numbers per weight than a derived step; :class:`_Writes`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ttr_edu._internal.mlp_memory import gelu_derivative
from ttr_edu.checks._core import CheckFailed
from ttr_edu.checks._rules import Rules, exercise
from ttr_edu.ops import (
    TitansState,
    longhorn_chunk,
    longhorn_recurrent,
    longhorn_step_size,
    titans_recurrent,
    ttt_mlp_chunk,
    ttt_mlp_recurrent,
)
from ttr_edu.ops.ttt import _mlp_deltas
from ttr_edu.regression.deep import linear_map_gradients, momentum_sgd
from ttr_edu.regression.linear import _implicit_step

__all__ = [
    "check_longhorn_step",
    "check_rotation_keys",
    "check_momentum_step",
    "check_mlp_gradient_step",
    "rotation_keys_spec",
    "householder_product",
]


def _token(x: torch.Tensor) -> torch.Tensor:
    return x[None, None, None]  # (D,) -> (1, 1, 1, D)


def _gate(x: float) -> torch.Tensor:
    return torch.full((1, 1, 1), float(x), dtype=torch.float64)


def reference_longhorn_step(S, k, v, beta) -> torch.Tensor:
    """``argmin_S' ‖S' − S‖² + β ‖S'ᵀk − v‖²``: ``S + ε k (v − Sᵀk)ᵀ``, ``ε = β/(1 + β‖k‖²)``."""
    _, S_new = longhorn_recurrent(
        _token(k), _token(k), _token(v), _gate(beta), scale=1.0, initial_state=S[None, None], output_final_state=True
    )
    return S_new[0, 0]


def reference_momentum_step(S, U, k, v, beta, eta, alpha) -> tuple[torch.Tensor, torch.Tensor]:
    """Titans, linear memory: ``U' = η U − β k (Sᵀk − v)ᵀ``, ``S' = (1 − α) S + U'``; returns ``(S', U')``."""
    _, state = titans_recurrent(
        _token(k),
        _token(k),
        _token(v),
        _gate(beta),
        _gate(eta),
        _gate(alpha),
        scale=1.0,
        initial_state=TitansState(S[None, None], U[None, None]),
        output_final_state=True,
    )
    return state.memory[0, 0], state.momentum[0, 0]


def reference_mlp_gradient_step(W1, W2, k, v, lr) -> tuple[torch.Tensor, torch.Tensor]:
    """One SGD step on ``½ ‖W2ᵀ GELU(W1ᵀk) − v‖²`` (exact GELU): returns ``(W1', W2')``."""
    _, (W1_new, W2_new) = ttt_mlp_recurrent(
        _token(k),
        _token(k),
        _token(v),
        _gate(lr),
        1,
        scale=1.0,
        initial_state=(W1[None, None], W2[None, None]),
        output_final_state=True,
    )
    return W1_new[0, 0], W2_new[0, 0]


def _cases(seed: int, n: int = 4) -> Iterator[dict]:
    for i in range(n):
        gen = torch.Generator().manual_seed(seed + i)
        d_k, d_v = 2 + i, 3 + (i % 2)
        yield {
            "d_k": d_k,
            "d_v": d_v,
            "gen": gen,
            "k": (0.5 + 1.5 * torch.rand(1, generator=gen, dtype=torch.float64))  # keys of different lengths
            * torch.randn(d_k, generator=gen, dtype=torch.float64),
            "v": torch.randn(d_v, generator=gen, dtype=torch.float64),
        }


def _longhorn_cases() -> Iterator[dict]:
    # the states are small (entries ~0.1), so a wrong step shows as a large relative error of the result rather than
    # hiding behind the part of S that every step keeps; the keys have set lengths, none near zero, and the first case
    # has β‖k‖² = 4.5, far from the explicit step's range: a wrong step fails there, by a wide margin, first
    for c, beta, norm in zip(_cases(800), (2.0, 0.3, 10.0, 0.7), (1.5, 0.6, 2.0, 1.2)):
        S = 0.1 * torch.randn(c["d_k"], c["d_v"], generator=c["gen"], dtype=torch.float64)
        k = norm * c["k"] / torch.linalg.vector_norm(c["k"])  # ‖k‖ = norm: keys are not unit vectors here
        yield {"S": S, "k": k, "v": c["v"], "beta": beta}


def _momentum_cases() -> Iterator[dict]:
    for c, (beta, eta, alpha) in zip(_cases(810), ((0.5, 0.9, 0.1), (0.2, 0.5, 0.3), (1.0, 0.0, 0.0), (0.3, 0.7, 0.6))):
        S = torch.randn(c["d_k"], c["d_v"], generator=c["gen"], dtype=torch.float64)
        U = torch.randn(c["d_k"], c["d_v"], generator=c["gen"], dtype=torch.float64)
        yield {"S": S, "U": U, "k": c["k"], "v": c["v"], "beta": beta, "eta": eta, "alpha": alpha}
    yield _momentum_at(10)  # a larger memory: finite differences write over 100 numbers per weight there


def _mlp_cases() -> Iterator[dict]:
    for c, lr in zip(_cases(820), (0.1, 0.5, 0.05, 1.0)):
        d_h = c["d_k"] + 2
        W1 = torch.randn(c["d_k"], d_h, generator=c["gen"], dtype=torch.float64)
        W2 = torch.randn(d_h, c["d_v"], generator=c["gen"], dtype=torch.float64) / d_h**0.5
        yield {"W1": W1, "W2": W2, "k": c["k"], "v": c["v"], "lr": lr}
    yield _mlp_at(10)  # a larger memory: finite differences write over 100 numbers per weight there


def _momentum_at(n: int) -> dict:
    """A momentum-step case with ``D_k = D_v = n``; a key of unit length on average."""
    gen = torch.Generator().manual_seed(830 + n)
    S, U = (torch.randn(n, n, generator=gen, dtype=torch.float64) for _ in range(2))
    k, v = (
        torch.randn(n, generator=gen, dtype=torch.float64) / n**0.5,
        torch.randn(n, generator=gen, dtype=torch.float64),
    )
    return {"S": S, "U": U, "k": k, "v": v, "beta": 0.5, "eta": 0.9, "alpha": 0.1}


def _mlp_at(n: int) -> dict:
    """An MLP-step case with ``D_k = D_h = D_v = n``; a key of unit length on average (the gradient's size then does
    not grow with ``n``, so a float32 answer stays within the tolerance as on the small cases)."""
    gen = torch.Generator().manual_seed(840 + n)
    W1 = torch.randn(n, n, generator=gen, dtype=torch.float64)
    W2 = torch.randn(n, n, generator=gen, dtype=torch.float64) / n**0.5
    k, v = (
        torch.randn(n, generator=gen, dtype=torch.float64) / n**0.5,
        torch.randn(n, generator=gen, dtype=torch.float64),
    )
    return {"W1": W1, "W2": W2, "k": k, "v": v, "lr": 0.1}


#: the most numbers an answer's torch operations may write per weight of the memory. A derived step writes a few per
#: weight (4 to 9 for the package's tests' answers, an entry-by-entry loop included); central finite differences
#: evaluate the loss twice per weight, each evaluation writing at least a perturbed copy of the weights, so 50 or more
#: per weight on the smallest case and over 500 on a 12 × 12 memory, looped or batched alike.
MAX_WRITES_PER_WEIGHT = 30


class _Writes(TorchDispatchMode):
    """Counts the numbers written by the torch operations run inside it (views write nothing); on exit, ``hit`` says
    so when they exceed :data:`MAX_WRITES_PER_WEIGHT` per weight of the case's memory (``weights``: its input
    names)."""

    def __init__(self, case: dict, weights: tuple[str, ...], why: str) -> None:
        super().__init__()
        self.size = sum(case[name].numel() for name in weights)
        self.why, self.written, self.hit = why, 0, None

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # nothing here is compiled: no need to import torch._dynamo on the first operation

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not func.is_view:
            self.written += sum(
                o.numel() for o in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(o, torch.Tensor)
            )
        return out

    def __exit__(self, *exc):
        if self.written > MAX_WRITES_PER_WEIGHT * self.size:
            self.hit = (
                f"your function's torch operations wrote {self.written} numbers for one step of a memory of "
                f"{self.size} weights, {self.written / self.size:.0f} per weight (a derived gradient writes about 10, "
                f"at most {MAX_WRITES_PER_WEIGHT} are allowed): finite differences evaluate the loss twice per weight, "
                f"which this exercise rules out: {self.why}"
            )
        return super().__exit__(*exc)


_WHY_MOMENTUM = "derive ∇_S ℓ for ℓ = ½‖Sᵀk − v‖² (an outer product of two vectors you have) and write it out"
_WHY_MLP = "write both gradients out by the chain rule (δ = W2ᵀh − v, then back through W2 and GELU′)"


@exercise(
    reference=reference_longhorn_step,
    cases=_longhorn_cases,
    rules=Rules(
        answers=(longhorn_recurrent, longhorn_chunk, longhorn_step_size, _implicit_step),
        inputs_unchanged=True,
    ),
)
def check_longhorn_step(longhorn_step: Callable) -> bool:
    """Check ``longhorn_step(S, k, v, beta)``: the implicit (proximal) step, returns the new ``S`` and leaves ``S`` as
    it was; keys of several lengths (not unit vectors), and ``β‖k‖²`` from 0.1 to 40."""


@exercise(
    reference=reference_momentum_step,
    cases=_momentum_cases,
    rules=Rules(
        answers=(titans_recurrent, momentum_sgd),
        no_autograd=True,
        inputs_unchanged=True,
        watch=lambda case: _Writes(case, ("S",), _WHY_MOMENTUM),
        why=_WHY_MOMENTUM,
    ),
)
def check_momentum_step(momentum_step: Callable) -> bool:
    """Check ``momentum_step(S, U, k, v, beta, eta, alpha)``: Titans' step on a linear memory, returns ``(S, U)``,
    the gradient derived: no autograd, none of its derivative kernels (``torch.ops.aten.*_backward``), and no finite
    differences (at most :data:`MAX_WRITES_PER_WEIGHT` numbers written per weight of ``S``)."""


@exercise(
    reference=reference_mlp_gradient_step,
    cases=_mlp_cases,
    rules=Rules(
        answers=(
            ttt_mlp_recurrent,
            ttt_mlp_chunk,
            _mlp_deltas,
            titans_recurrent,
            linear_map_gradients,
            gelu_derivative,
        ),
        no_autograd=True,
        inputs_unchanged=True,
        watch=lambda case: _Writes(case, ("W1", "W2"), _WHY_MLP),
        why=_WHY_MLP,
    ),
)
def check_mlp_gradient_step(mlp_gradient_step: Callable) -> bool:
    """Check ``mlp_gradient_step(W1, W2, k, v, lr)``: one SGD step of a two-layer GELU MLP memory, with both
    gradients written out: autograd (``backward``, ``torch.autograd``, ``torch.func``'s transforms, forward AD, the
    derivative kernels ``torch.ops.aten.*_backward`` such as ``gelu_backward``) is refused however it is reached, and
    so are finite differences (at most :data:`MAX_WRITES_PER_WEIGHT` numbers written per weight)."""


def householder_product(k1: torch.Tensor, k2: torch.Tensor, beta: float = 2.0) -> torch.Tensor:
    """The transition of one DeltaProduct token with two steps on keys ``k1`` then ``k2``:
    ``(I − β k2 k2ᵀ)(I − β k1 k1ᵀ)`` (Siems et al. 2025, eq. 4), ``(D, D)`` in the keys' (promoted) dtype."""
    dtype = torch.promote_types(k1.dtype, k2.dtype)
    k1, k2 = k1.to(dtype), k2.to(dtype)
    eye = torch.eye(k1.shape[0], dtype=dtype)
    return (eye - beta * torch.outer(k2, k2)) @ (eye - beta * torch.outer(k1, k1))


def rotation_keys_spec(theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Two unit keys of ``R²`` whose reflections compose the rotation by ``theta``: ``k1 = e1`` and ``k2`` at the
    angle ``θ/2`` (a product of two reflections rotates by twice the angle between their keys)."""
    k1 = torch.tensor([1.0, 0.0], dtype=torch.float64)
    k2 = torch.tensor([math.cos(theta / 2), math.sin(theta / 2)], dtype=torch.float64)
    return k1, k2


def _rotation(theta: float) -> torch.Tensor:
    c, s = math.cos(theta), math.sin(theta)
    return torch.tensor([[c, -s], [s, c]], dtype=torch.float64)


def _transition(rotation_keys: Callable, case: dict) -> torch.Tensor:
    """The ``(2, 2)`` transition of the keys the answer returns for ``case``, built in their dtype."""
    keys = rotation_keys(**case)
    if not (
        isinstance(keys, (tuple, list))
        and len(keys) == 2
        and all(isinstance(k, torch.Tensor) and k.shape == (2,) and k.is_floating_point() for k in keys)
    ):
        raise CheckFailed(f"rotation_keys: expected two tensors of shape (2,), (k1, k2), floating, got {keys!r}")
    return householder_product(*keys)


def _keys_dtype_note(message: str, case: dict, result: Any) -> str:
    if "only the dtype differs" not in message:
        return ""
    return (
        "\n  the result compared is the transition (I − 2k₂k₂ᵀ)(I − 2k₁k₁ᵀ), built in your keys' dtype: the "
        "exercise asks for float64 keys, e.g. torch.tensor([1.0, 0.0], dtype=torch.float64)"
    )


def _angles() -> Iterator[dict]:
    for theta in (2 * math.pi / 3, math.pi / 2, 2 * math.pi / 5, -math.pi / 3, math.pi, 0.0):
        yield {"theta": theta}


@exercise(
    reference=_rotation,
    cases=_angles,
    rules=Rules(answers=(rotation_keys_spec,)),
    call=_transition,
    explain=_keys_dtype_note,
    rtol=1e-6,
    atol=1e-8,
)
def check_rotation_keys(rotation_keys: Callable) -> bool:
    """Check ``rotation_keys(theta) -> (k1, k2)``: ``(I − 2 k2 k2ᵀ)(I − 2 k1 k1ᵀ) = R(θ)`` for several angles.

    Compared: the ``(2, 2)`` transition the two keys give (in their dtype), so any correct pair passes (the keys are
    not unique); keys that are not two floating tensors of shape ``(2,)`` are refused with what was received.
    """

"""Titans' neural memory: a memory trained online with momentum ("surprise") and weight decay ("forgetting").

Behrouz, Zhong, Mirrokni 2024 ("Titans: Learning to Memorize at Test Time", §3.1, eqs. 13–14), per token with the
per-token gates ``β_t`` (the inner learning rate, the paper's ``θ_t``; ``beta`` as in every op here), ``η_t``
(momentum, the decay of past surprise) and ``α_t`` (forgetting):

    U_t = η_t U_{t−1} − β_t ∇ℓ(M_{t−1}; k_t, v_t)        (the surprise: momentum of the gradient)
    M_t = (1 − α_t) M_{t−1} + U_t                        (weight decay, then the step)
    o_t = f_{M_t}(q_t)                                   (q scaled by ``scale``)

with ``ℓ = ½ ‖f_M(k) − v‖²`` (the paper's ``‖·‖²`` without ½: its ``θ`` is half our ``β``). The memory ``M`` is
linear (``f(x) = Sᵀx``) or the two-layer GELU MLP of :mod:`ttr_edu._internal.mlp_memory`. Here the output reads the
memory after the token's update, as every op of this package does; Titans' retrieval reads the memory "without weight
update", a choice of the outer layer (see the titans-pytorch issues on the retrieve/update order).

Limits: with a linear memory, ``η = 0`` and ``α = 0`` this is the delta rule with the same ``β``; with ``η = 0`` it is
SGD with decoupled weight decay. The paper trains with chunked gradients (all taken at the chunk's start, as in TTT);
that is a different rule, not a faster form of this one, so only the per-token recurrent form is given.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from ttr_edu._internal.contract import (
    STATE,
    State,
    check_inputs,
    check_nonnegative,
    check_state,
    check_state_parts,
    compute_dtype,
    fla_output,
    resolve_scale,
    state_dtypes,
    zero_state,
)
from ttr_edu._internal.deprecation import renamed_arguments
from ttr_edu._internal.mlp_memory import MLP_STATE, check_mlp_state, gelu_derivative, mlp_hidden
from ttr_edu._internal.validation import guarded

from .ttt import _naive_gradients, _naive_memory

__all__ = ["titans_recurrent", "TitansState"]


class TitansState(NamedTuple):
    """The memory and its momentum: ``memory`` is ``S`` ``(B, H, D_k, D_v)`` or ``(W1, W2)``; ``momentum`` alike."""

    memory: torch.Tensor | tuple
    momentum: torch.Tensor | tuple


@renamed_arguments(theta="beta")
@guarded
def titans_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    eta: torch.Tensor,
    alpha: torch.Tensor,
    scale: float | None = None,
    initial_state: State | None = None,
    output_final_state: bool = False,
) -> tuple[torch.Tensor, Any]:
    """Titans' memory update token by token, the gradient written out (Behrouz et al. 2024, eqs. 13–14).

    Args:
        q: queries ``(B, T, H, D_k)``, floating (fp16/bf16/fp32 compute in fp32, fp64 in fp64).
        k: keys ``(B, T, H, D_k)``, same dtype as ``q``.
        v: values ``(B, T, H, D_v)``, same dtype as ``q``.
        beta: the inner learning rate ``β ≥ 0`` ``(B, T, H)`` (the paper's ``θ``; ``theta`` until release 0.2, the
            old name still works with a ``DeprecationWarning``), any floating dtype.
        eta: momentum ``η ∈ [0, 1]`` ``(B, T, H)``.
        alpha: forgetting ``α ∈ [0, 1]`` ``(B, T, H)`` (``1 − α`` multiplies the memory).
        scale: multiplies ``q``; default ``D_k ** -0.5`` (fla).
        initial_state: ``None`` (a zero linear memory), ``S_0`` ``(B, H, D_k, D_v)`` (linear), ``(W1, W2)`` of shapes
            ``(B, H, D_k, D_h)``, ``(B, H, D_h, D_v)`` (MLP; momentum starts at zero), or a :class:`TitansState`.
        output_final_state: also return the final :class:`TitansState` (fp32, or fp64 for fp64 inputs).

    Returns:
        ``(o, state)`` (``None`` unless ``output_final_state``); ``o`` is ``(B, T, H, D_v)`` in the dtype of ``q``.

    Raises:
        TypeError: a non-tensor, an integer dtype, mixed dtypes of q, k, v, a malformed state, a tensor of
            ``(W1, W2)`` or of a :class:`TitansState` in another dtype than q's or the compute dtype (a lone ``S_0``
            is cast).
        ValueError: mismatched shapes (the message names the dims), T = 0, different devices, a bad ``scale``,
            ``beta < 0``, ``eta`` or ``alpha`` outside ``[0, 1]``, any of them not finite.
    """
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    dims = check_inputs(q, k, v, beta=beta, eta=eta, alpha=alpha)
    check_nonnegative("beta", beta, "a learning rate")
    check_nonnegative("eta", eta, "a momentum", high=1.0)
    check_nonnegative("alpha", alpha, "a forgetting rate", high=1.0)
    scale = resolve_scale(scale, dims["D_k"])
    dtype = compute_dtype(q.dtype)
    memory, momentum = initial_state if isinstance(initial_state, TitansState) else (initial_state, None)
    if isinstance(initial_state, TitansState) and memory is None:
        raise TypeError(
            "initial_state.memory: expected S (B, H, D_k, D_v) or the MLP's (W1, W2), got None (pass "
            "initial_state=None for a zero linear memory)"
        )
    where = "initial_state.memory" if isinstance(initial_state, TitansState) else "initial_state"
    if memory is None:
        memory = (zero_state(dims, dtype, q.device),)
    elif isinstance(memory, torch.Tensor):
        # alone, S is cast like any one-tensor state; beside its momentum it is a part of a tuple state
        check_state(where, memory, dims, STATE, q.device, dtypes=state_dtypes(q.dtype) if momentum is not None else ())
        memory = (memory.to(dtype),)
    else:
        memory = tuple(W.to(dtype) for W in check_mlp_state(where, memory, dims, q))
    if momentum is None:
        momentum = tuple(torch.zeros_like(W) for W in memory)
    else:
        momentum = (momentum,) if isinstance(momentum, torch.Tensor) else tuple(momentum)
        if len(momentum) != len(memory):
            raise ValueError(
                f"initial_state.momentum: expected one tensor per tensor of the memory ({len(memory)}), got "
                f"{len(momentum)}"
            )
        parts = (("U", STATE),) if len(memory) == 1 else (("U1", MLP_STATE[0][1]), ("U2", MLP_STATE[1][1]))
        momentum = tuple(U.to(dtype) for U in check_state_parts("initial_state.momentum", momentum, parts, dims, q))
    q, k, v = (x.to(dtype).transpose(1, 2) * s for x, s in ((q, scale), (k, 1.0), (v, 1.0)))
    beta, eta, alpha = (x.to(dtype).transpose(1, 2)[..., None, None] for x in (beta, eta, alpha))  # (B, H, T, 1, 1)

    outputs = []
    for t in range(q.shape[2]):
        k_t, v_t, q_t = k[:, :, t, None], v[:, :, t, None], q[:, :, t, None]  # (B, H, 1, D)
        grads: tuple[torch.Tensor, ...]
        if len(memory) == 1:  # linear: ∇ℓ = k (Sᵀk − v)ᵀ
            grads = (k_t.mT @ (k_t @ memory[0] - v_t),)
        else:  # MLP: ∇_{W2} = h δ2ᵀ, ∇_{W1} = k δ1ᵀ with δ1 = GELU'(a) ⊙ (W2 δ2)
            W1, W2 = memory
            a, h = mlp_hidden(W1, k_t)
            delta2 = h @ W2 - v_t
            grads = (k_t.mT @ (gelu_derivative(a) * (delta2 @ W2.mT)), h.mT @ delta2)
        momentum = tuple(eta[:, :, t] * U - beta[:, :, t] * G for U, G in zip(momentum, grads))
        memory = tuple((1.0 - alpha[:, :, t]) * W + U for W, U in zip(memory, momentum))
        if len(memory) == 1:
            outputs.append(q_t @ memory[0])
        else:
            outputs.append(mlp_hidden(memory[0], q_t)[1] @ memory[1])
    o = fla_output(torch.cat([piece.transpose(1, 2) for piece in outputs], dim=1), out_dtype)
    if not output_final_state:
        return o, None
    unpack = (lambda x: x[0]) if len(memory) == 1 else (lambda x: x)
    return o, TitansState(unpack(memory), unpack(momentum))


# ------------------------------------------------------------------------------------------------------------------
# The naive reference (as fla keeps a naive.py beside each op): the equation of the module docstring, one token at a
# time, in fla's layout and the inputs' dtype, unchecked. Every form above is tested equal to it
# (tests/ops/test_naive.py); read it first.
# ------------------------------------------------------------------------------------------------------------------


def naive(q, k, v, beta, eta, alpha, scale=None, initial_state=None):
    """``U_t = η_t U_{t−1} − β_t ∇ℓ(M_{t−1}; k_t, v_t)``, ``M_t = (1 − α_t) M_{t−1} + U_t``, ``o_t = f_{M_t}(q_t)``,
    the gradient by autograd from ``ℓ = ½ ‖f_M(k) − v‖²``; a linear memory (``initial_state`` ``S`` or ``None``) or
    the MLP (``(W1, W2)``), momentum from zero; ``(o, TitansState(M_T, U_T))`` out."""
    B, T, H, D_k = q.shape
    M = (q.new_zeros(B, H, D_k, v.shape[-1]),) if initial_state is None else initial_state
    M = (M,) if isinstance(M, torch.Tensor) else tuple(M)
    U = tuple(torch.zeros_like(m) for m in M)
    q = q * (D_k**-0.5 if scale is None else scale)
    outputs = []
    for t in range(T):
        grads = _naive_gradients(M, k[:, t], v[:, t])
        U = tuple(eta[:, t, :, None, None] * u - beta[:, t, :, None, None] * grad for u, grad in zip(U, grads))
        M = tuple((1 - alpha[:, t, :, None, None]) * m + u for m, u in zip(M, U))
        outputs.append(_naive_memory(M, q[:, t]))
    unpack = (lambda x: x[0]) if len(M) == 1 else (lambda x: x)
    return torch.stack(outputs, dim=1), TitansState(unpack(M), unpack(U))

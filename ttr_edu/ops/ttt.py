"""TTT-Linear and TTT-MLP: mini-batch gradient descent on a memory, gradients taken at the mini-batch's start.

Sun et al. 2024 ("Learning to (Learn at Test Time): RNNs with Expressive Hidden States", §2.4 mini-batch TTT and
§2.5 the dual form). The memory ``f_W`` learns from ``ℓ(W; k, v) = ½ ‖f_W(k) − v‖²``. Tokens come in mini-batches
of ``b``; inside the mini-batch that starts from ``W_s``, every gradient is taken at ``W_s``:

    W_t = W_s − Σ_{s<i≤t} β_i ∇ℓ(W_s; k_i, v_i),       o_t = f_{W_t}(q_t)          (q scaled by ``scale``)

and the next mini-batch starts from its last ``W_t``. With ``b = 1`` every gradient is taken at ``W_{t−1}``: plain
online SGD, which for the linear memory ``f(x) = Sᵀx`` is the delta rule (DeltaNet) with ``β``.

Memories (see :mod:`ttr_edu._internal.mlp_memory`): linear ``m(x) = Sᵀx`` (TTT-Linear) or the two-layer GELU MLP
``m(x) = W2ᵀ GELU(W1ᵀ x)`` (TTT-MLP), optionally wrapped as ``f(x) = x + LN(m(x))`` as in the paper's layers
(``layer_norm=True, residual=True``; both off by default, so ``f = m``). Deviations from the paper's layer, all
outer-model choices: no inner biases, no learnable LayerNorm scale and shift, and the reconstruction target ``v``
is whatever the caller passes (TTT's ``θ_V x``).

Two forms each, equal up to rounding: ``*_recurrent`` walks token by token with the gradient at ``W_s`` written
out; ``*_chunk`` is TTT's dual form, a mini-batch at a time with matrix products only. For the linear memory,

    E = f(K W_s) − V,  Δ = LN-backward(E),  O = f(Q W_s − tril(Q Kᵀ) diag(β) Δ),  W_next = W_s − Kᵀ diag(β) Δ

and for the MLP the same is done layer by layer (the hidden layer of the queries is read from ``W1_t`` first).
"""

from __future__ import annotations

from typing import Any

import torch

from ttr_edu._internal.contract import (
    STATE,
    State,
    check_inputs,
    check_nonnegative,
    check_state,
    compute_dtype,
    fla_output,
    resolve_scale,
    shares_doc,
    zero_state,
)
from ttr_edu._internal.mlp_memory import (
    check_mlp_state,
    check_wrap_flags,
    gelu_derivative,
    mlp_hidden,
    unwrap_grad,
    wrap,
)
from ttr_edu._internal.validation import check_positive_int, guarded

__all__ = ["ttt_linear_recurrent", "ttt_linear_chunk", "ttt_mlp_recurrent", "ttt_mlp_chunk"]

_SHARED_DOC = """
    Args:
        q: queries ``(B, T, H, D_k)``, floating (fp16/bf16/fp32 compute in fp32, fp64 in fp64).
        k: keys ``(B, T, H, D_k)``, same dtype as ``q``.
        v: targets ``(B, T, H, D_v)``, same dtype as ``q``.
        beta: the inner learning rate η ``(B, T, H)`` per token, any floating dtype.
        mini_batch_size: ``b``, tokens whose gradients share the starting state (a positive int; T need not be a
            multiple; the paper uses 16).
        scale: multiplies ``q``; default ``D_k ** -0.5`` (fla).
        initial_state: linear: ``S_0`` ``(B, H, D_k, D_v)``, ``None`` means zero; MLP (required, since a zero MLP
            has zero gradients): ``(W1, W2)`` of shapes ``(B, H, D_k, D_h)`` and ``(B, H, D_h, D_v)``, each in the
            dtype of ``q`` or the compute dtype (a final state carried over).
        output_final_state: also return the final memory (fp32, or fp64 for fp64 inputs).
        layer_norm: wrap the memory's output in a LayerNorm over ``D_v`` (no affine parameters).
        residual: add the input, ``f(x) = x + …`` (needs ``D_k == D_v``).

    Returns:
        ``(o, final_state)`` (``None`` unless ``output_final_state``); ``o`` is ``(B, T, H, D_v)`` in the dtype of
        ``q``; the final state has the form of ``initial_state``.

    Raises:
        TypeError: a non-tensor, an integer dtype, mixed dtypes of q, k, v, non-bool flags, an MLP state that is
            no pair or has a part in another dtype than q's or the compute dtype.
        ValueError: mismatched shapes (the message names the dims), T = 0, different devices, a bad ``scale`` or
            ``mini_batch_size``, ``residual`` with ``D_k != D_v``.
"""


def _prepare(q, k, v, beta, mini_batch_size, scale, initial_state, layer_norm, residual, mlp):
    check_positive_int("mini_batch_size", mini_batch_size)
    dims = check_inputs(q, k, v, beta=beta)
    check_nonnegative("beta", beta, "a learning rate")
    check_wrap_flags(layer_norm, residual, dims)
    scale = resolve_scale(scale, dims["D_k"])
    dtype = compute_dtype(q.dtype)
    if mlp:
        if initial_state is None:
            raise ValueError(
                "initial_state: the MLP memory needs its starting weights (W1, W2), shapes (B, H, D_k, D_h) and "
                "(B, H, D_h, D_v): at W1 = W2 = 0 every gradient is zero and nothing is learned"
            )
        state = tuple(W.to(dtype) for W in check_mlp_state("initial_state", initial_state, dims, q))
    elif initial_state is None:
        state = zero_state(dims, dtype, q.device)
    else:
        check_state("initial_state", initial_state, dims, STATE, q.device)
        state = initial_state.to(dtype)
    q, k, v = (x.to(dtype).transpose(1, 2) for x in (q, k, v))
    beta = beta.to(dtype).transpose(1, 2)[..., None]  # (B, H, T, 1)
    return q * scale, k, v, beta, state


# ---- the linear memory ---------------------------------------------------------------------------------------


@guarded
@shares_doc(_SHARED_DOC)
def ttt_linear_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    mini_batch_size: int = 16,
    scale: float | None = None,
    initial_state: State | None = None,
    output_final_state: bool = False,
    layer_norm: bool = False,
    residual: bool = False,
) -> tuple[torch.Tensor, Any]:
    """TTT-Linear token by token: ``∇ℓ(S_s; k_t, v_t) = k_t δ_tᵀ`` with ``δ_t = ∂ℓ/∂m = LN'ᵀ(f(k_t) − v_t)``.

    Source: Sun et al. 2024, §2.4 (mini-batch gradient descent; the gradient at the mini-batch's start).
    """
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    q, k, v, beta, S = _prepare(q, k, v, beta, mini_batch_size, scale, initial_state, layer_norm, residual, False)
    start = S
    outputs = []
    for t in range(q.shape[2]):
        if t % mini_batch_size == 0:
            start = S  # the mini-batch's gradients are all taken here
        k_t = k[:, :, t, None]  # (B, H, 1, D_k)
        f_k, cache = wrap(k_t @ start, k_t, layer_norm, residual)
        delta = unwrap_grad(f_k - v[:, :, t, None], cache)  # (B, H, 1, D_v)
        S = S - beta[:, :, t, None] * (k_t.mT @ delta)
        q_t = q[:, :, t, None]
        outputs.append(wrap(q_t @ S, q_t, layer_norm, residual)[0])
    o = fla_output(torch.cat([piece.transpose(1, 2) for piece in outputs], dim=1), out_dtype)
    return o, (S if output_final_state else None)


@guarded
@shares_doc(_SHARED_DOC)
def ttt_linear_chunk(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    mini_batch_size: int = 16,
    scale: float | None = None,
    initial_state: State | None = None,
    output_final_state: bool = False,
    layer_norm: bool = False,
    residual: bool = False,
) -> tuple[torch.Tensor, Any]:
    """TTT-Linear's dual form, one mini-batch of ``b`` tokens at a time (Sun et al. 2024, §2.5)."""
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    q, k, v, beta, S = _prepare(q, k, v, beta, mini_batch_size, scale, initial_state, layer_norm, residual, False)
    outputs = []
    for s in range(0, q.shape[2], mini_batch_size):
        batch = slice(s, s + mini_batch_size)
        q_b, k_b, v_b, beta_b = q[:, :, batch], k[:, :, batch], v[:, :, batch], beta[:, :, batch]
        f_k, cache = wrap(k_b @ S, k_b, layer_norm, residual)
        step = beta_b * unwrap_grad(f_k - v_b, cache)  # β_i δ_i, (B, H, b, D_v)
        raw = q_b @ S - (q_b @ k_b.mT).tril() @ step  # q_t · W_t, with W_t = S − Σ_{i≤t} k_i (β_i δ_i)ᵀ
        outputs.append(wrap(raw, q_b, layer_norm, residual)[0])
        S = S - k_b.mT @ step
    o = fla_output(torch.cat([piece.transpose(1, 2) for piece in outputs], dim=1), out_dtype)
    return o, (S if output_final_state else None)


# ---- the MLP memory ------------------------------------------------------------------------------------------


def _mlp_deltas(W1, W2, k, v, layer_norm, residual):
    """At ``(W1, W2)``, for keys ``(B, H, N, D_k)``: the hidden layer ``h`` and ``δ2 = ∂ℓ/∂m``, ``δ1 = ∂ℓ/∂a``.

    Backpropagation written out: ``∇_{W2} ℓ = h δ2ᵀ`` and ``∇_{W1} ℓ = k δ1ᵀ`` with ``δ1 = GELU'(a) ⊙ (W2 δ2)``.
    """
    a, h = mlp_hidden(W1, k)
    f_k, cache = wrap(h @ W2, k, layer_norm, residual)
    delta2 = unwrap_grad(f_k - v, cache)
    delta1 = gelu_derivative(a) * (delta2 @ W2.mT)
    return h, delta1, delta2


@guarded
@shares_doc(_SHARED_DOC)
def ttt_mlp_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    mini_batch_size: int = 16,
    scale: float | None = None,
    initial_state: State | None = None,
    output_final_state: bool = False,
    layer_norm: bool = False,
    residual: bool = False,
) -> tuple[torch.Tensor, Any]:
    """TTT-MLP token by token, the two-layer gradient at the mini-batch's start written out (Sun et al. 2024, §2.4)."""
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    q, k, v, beta, (W1, W2) = _prepare(q, k, v, beta, mini_batch_size, scale, initial_state, layer_norm, residual, True)
    start = (W1, W2)
    outputs = []
    for t in range(q.shape[2]):
        if t % mini_batch_size == 0:
            start = (W1, W2)
        k_t = k[:, :, t, None]
        h, delta1, delta2 = _mlp_deltas(*start, k_t, v[:, :, t, None], layer_norm, residual)
        W1 = W1 - beta[:, :, t, None] * (k_t.mT @ delta1)
        W2 = W2 - beta[:, :, t, None] * (h.mT @ delta2)
        q_t = q[:, :, t, None]
        outputs.append(wrap(mlp_hidden(W1, q_t)[1] @ W2, q_t, layer_norm, residual)[0])
    o = fla_output(torch.cat([piece.transpose(1, 2) for piece in outputs], dim=1), out_dtype)
    return o, ((W1, W2) if output_final_state else None)


@guarded
@shares_doc(_SHARED_DOC)
def ttt_mlp_chunk(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    mini_batch_size: int = 16,
    scale: float | None = None,
    initial_state: State | None = None,
    output_final_state: bool = False,
    layer_norm: bool = False,
    residual: bool = False,
) -> tuple[torch.Tensor, Any]:
    """TTT-MLP's dual form: layer 1 of the queries from ``W1_t``, then layer 2 from ``W2_t`` (Sun et al. 2024, §2.5).

    ``A_q = Q W1_s − tril(Q Kᵀ) diag(β) Δ1``, ``H_q = GELU(A_q)``, ``O = f(H_q W2_s − tril(H_q H_kᵀ) diag(β) Δ2)``.
    """
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    q, k, v, beta, (W1, W2) = _prepare(q, k, v, beta, mini_batch_size, scale, initial_state, layer_norm, residual, True)
    outputs = []
    for s in range(0, q.shape[2], mini_batch_size):
        batch = slice(s, s + mini_batch_size)
        q_b, k_b, v_b, beta_b = q[:, :, batch], k[:, :, batch], v[:, :, batch], beta[:, :, batch]
        h_k, delta1, delta2 = _mlp_deltas(W1, W2, k_b, v_b, layer_norm, residual)
        step1, step2 = beta_b * delta1, beta_b * delta2
        h_q = torch.nn.functional.gelu(q_b @ W1 - (q_b @ k_b.mT).tril() @ step1)
        raw = h_q @ W2 - (h_q @ h_k.mT).tril() @ step2
        outputs.append(wrap(raw, q_b, layer_norm, residual)[0])
        W1, W2 = W1 - k_b.mT @ step1, W2 - h_k.mT @ step2
    o = fla_output(torch.cat([piece.transpose(1, 2) for piece in outputs], dim=1), out_dtype)
    return o, ((W1, W2) if output_final_state else None)


# ------------------------------------------------------------------------------------------------------------------
# The naive reference (as fla keeps a naive.py beside each op): the equation of the module docstring, one token at a
# time, in fla's layout and the inputs' dtype, unchecked. Every form above is tested equal to it
# (tests/ops/test_naive.py); read it first.
# ------------------------------------------------------------------------------------------------------------------


def naive(q, k, v, beta, mini_batch_size=16, scale=None, initial_state=None, layer_norm=False, residual=False):
    """``W_t = W_s − Σ_{s<i≤t} β_i ∇ℓ(W_s; k_i, v_i)``, ``o_t = f_{W_t}(q_t)``, every gradient at the mini-batch's
    start ``W_s``, taken by autograd from ``ℓ = ½ ‖f_W(k) − v‖²``. The memory is linear (``initial_state`` ``S`` or
    ``None``: TTT-Linear) or the two-layer GELU MLP (``(W1, W2)``: TTT-MLP); ``(o, W_T)`` out."""
    B, T, H, D_k = q.shape
    W = (q.new_zeros(B, H, D_k, v.shape[-1]),) if initial_state is None else initial_state
    W = (W,) if isinstance(W, torch.Tensor) else tuple(W)
    q = q * (D_k**-0.5 if scale is None else scale)
    outputs = []
    for t in range(T):
        if t % mini_batch_size == 0:
            start = W
        grads = _naive_gradients(start, k[:, t], v[:, t], layer_norm, residual)
        W = tuple(w - beta[:, t, :, None, None] * grad for w, grad in zip(W, grads))
        outputs.append(_naive_memory(W, q[:, t], layer_norm, residual))
    return torch.stack(outputs, dim=1), (W[0] if len(W) == 1 else W)


def _naive_memory(W, x, layer_norm=False, residual=False):
    """``f_W(x) = [x +] [LN](m(x))`` with ``m(x) = Sᵀx`` or ``W2ᵀ GELU(W1ᵀx)``, for ``x`` ``(B, H, D)``."""
    if len(W) == 1:
        m = torch.einsum("bhkv,bhk->bhv", W[0], x)
    else:
        m = torch.einsum("bhjv,bhj->bhv", W[1], torch.nn.functional.gelu(torch.einsum("bhkj,bhk->bhj", W[0], x)))
    if layer_norm:
        m = torch.nn.functional.layer_norm(m, m.shape[-1:], eps=1e-6)
    return x + m if residual else m


def _naive_gradients(W, k, v, layer_norm=False, residual=False):
    """``∇_W ½ ‖f_W(k) − v‖²`` for every sequence and head at once, by autograd."""
    with torch.enable_grad():
        W = tuple(w.detach().requires_grad_() for w in W)
        loss = 0.5 * (_naive_memory(W, k, layer_norm, residual) - v).pow(2).sum()
        return torch.autograd.grad(loss, W)

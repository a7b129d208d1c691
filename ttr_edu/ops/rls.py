"""Recursive least squares (the Mesa layer): exact online ridge regression, two forms side by side.

The memory is the exact (optionally exponentially weighted) ridge-regression solution over the tokens so far
(Wang, Shi, Fox 2025, §3.1; von Oswald et al. 2023, the Mesa layer):

    A_t = α_t A_{t-1} + k_t k_tᵀ,   A_0 = λ I          (α_t = exp(g_t), or 1 without ``g``)
    b_t = α_t b_{t-1} + k_t v_tᵀ,   b_0 = 0
    S_t = A_t⁻¹ b_t = argmin_S Σ_{i≤t} γ_i^{(t)} ‖v_i − Sᵀ k_i‖² + γ_0^{(t)} λ ‖S‖²,    o_t = S_tᵀ q_t

with ``γ_i^{(t)} = Π_{j=i+1..t} α_j``. Note that the ridge term decays with the data (it acts as a pseudo-observation
at time 0), which is what keeps the Sherman–Morrison recursion exact. A constant ridge, ``Σ γ k kᵀ + λ I``, would
break the rank-one recursion and need a numerical solve per step (fla's Mesa layer solves with conjugate gradients).
Without decay the two are the same ridge regression.

State carried between calls (``initial_state`` and the returned final state): the pair ``(S, P)`` with
``S = A⁻¹ b`` of shape ``(B, H, D_k, D_v)`` (the current solution; ``o_t = S_tᵀ q_t`` as in every layer here) and
the inverse covariance ``P = A⁻¹`` of shape ``(B, H, D_k, D_k)``. When ``initial_state`` is given, ``P`` already holds
the ridge and ``lam`` is not used.
"""

from __future__ import annotations

import torch

from ttr_edu._validation import check_positive_float

from ._common import STATE, check_inputs, check_log_decay, check_state, compute_dtype, resolve_scale

__all__ = ["rls_recurrent", "rls_exact"]

_SHARED_DOC = """
    Args:
        q: queries ``(B, T, H, D_k)``, floating (fp16/bf16/fp32 compute in fp32, fp64 in fp64).
        k: keys ``(B, T, H, D_k)``, same dtype as ``q``.
        v: values ``(B, T, H, D_v)``, same dtype as ``q``.
        lam: ridge λ > 0 (``A_0 = λ I``); unused when ``initial_state`` is given.
        g: optional log decay ``(B, T, H)`` in ``(−inf, 0]`` (forgetting factor ``α_t = exp(g_t)``), any floating
            dtype. ``−inf`` is refused: the ridge decays with the data, so a full reset would leave ``A_t``
            singular (no unique solution); to restart, split the sequence and pass no ``initial_state``.
        scale: multiplies ``q``; default ``D_k ** -0.5`` (fla convention; pass ``1.0`` for the plain regression).
        initial_state: a tuple ``(S_0, P_0)`` of shapes ``(B, H, D_k, D_v)`` and ``(B, H, D_k, D_k)``, ``P_0``
            symmetric positive definite; ``None`` means ``(0, I / lam)``.
        output_final_state: also return ``(S_T, P_T)`` (fp32, or fp64 for fp64 inputs).

    Returns:
        ``(o, (S_T, P_T))`` (the state is ``None`` unless ``output_final_state``); ``o`` is ``(B, T, H, D_v)`` in
        the dtype of ``q``.

    Raises:
        TypeError: a non-tensor, an integer dtype, mixed dtypes of q, k, v, an ``initial_state`` that is no pair.
        ValueError: a ``g`` that is NaN, ``±inf`` or ``> 0``; mismatched shapes (the message names the dims),
            different devices, ``lam <= 0``, a bad ``scale``.
"""


def _prepare(q, k, v, lam, g, scale, initial_state):
    per_token = {} if g is None else {"g": g}
    dims = check_inputs(q, k, v, **per_token)
    if g is not None:
        check_log_decay(g, allow_reset=False)  # a reset would also erase the ridge: A_t singular
    scale = resolve_scale(scale, dims["D_k"])
    dtype = compute_dtype(q.dtype)
    if initial_state is None:
        lam = check_positive_float("lam", lam)
        B, H, D_k, D_v = dims["B"], dims["H"], dims["D_k"], dims["D_v"]
        S = torch.zeros(B, H, D_k, D_v, dtype=dtype, device=q.device)
        P = torch.eye(D_k, dtype=dtype, device=q.device).expand(B, H, D_k, D_k) / lam
    else:
        if not (isinstance(initial_state, (tuple, list)) and len(initial_state) == 2):
            raise TypeError(
                "initial_state: expected a tuple (S, P) of shapes (B, H, D_k, D_v) and (B, H, D_k, D_k), "
                f"got {type(initial_state).__name__}"
            )
        S, P = initial_state
        check_state("initial_state[0] (S)", S, dims, STATE, q.device)
        check_state("initial_state[1] (P)", P, dims, ("B", "H", "D_k", "D_k"), q.device)
        S, P = S.to(dtype), P.to(dtype)
    q, k, v = (x.to(dtype).transpose(1, 2) for x in (q, k, v))  # (B, H, T, ·)
    log_decay = None if g is None else g.to(dtype).transpose(1, 2)  # (B, H, T)
    return q * scale, k, v, log_decay, S, P


def rls_recurrent(q, k, v, lam=1.0, g=None, scale=None, initial_state=None, output_final_state=False):
    """Recurrent form: Sherman–Morrison updates of ``P = A⁻¹``, then a delta-rule step with learning rate ``P_t``.

        P̃ = P_{t-1} / α_t,       P_t = P̃ − (P̃ k_t)(P̃ k_t)ᵀ / (1 + k_tᵀ P̃ k_t)
        S_t = S_{t-1} + P_t k_t (v_t − S_{t-1}ᵀ k_t)ᵀ,     o_t = S_tᵀ q_t

    (the second line follows from ``b_t = A_t S_{t-1} − k_t k_tᵀ S_{t-1} + k_t v_tᵀ``). It is the delta rule with
    the matrix learning rate ``P_t`` in place of β (Wang, Shi, Fox 2025, §3.1; von Oswald et al. 2023).
    Cost ``O(T D_k (D_k + D_v))``, memory ``O(D_k (D_k + D_v))``.
    """
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    q, k, v, log_decay, S, P = _prepare(q, k, v, lam, g, scale, initial_state)
    outputs = []
    for t in range(q.shape[2]):
        k_t = k[:, :, t]
        if log_decay is not None:
            P = P * torch.exp(-log_decay[:, :, t, None, None])
        Pk = torch.einsum("b h i j, b h j -> b h i", P, k_t)
        gain = Pk / (1.0 + (k_t * Pk).sum(-1, keepdim=True))  # P_t k_t (Sherman–Morrison)
        P = P - torch.einsum("b h i, b h j -> b h i j", gain, Pk)
        error = v[:, :, t] - torch.einsum("b h k v, b h k -> b h v", S, k_t)
        S = S + torch.einsum("b h k, b h v -> b h k v", gain, error)
        outputs.append(torch.einsum("b h k v, b h k -> b h v", S, q[:, :, t]))
    o = torch.stack(outputs, dim=2).transpose(1, 2).to(out_dtype)
    return o, ((S, P) if output_final_state else None)


def rls_exact(q, k, v, lam=1.0, g=None, scale=None, initial_state=None, output_final_state=False):
    """Exact form: accumulate ``A_t`` and ``b_t`` and solve ``A_t x = q_t`` at every step; ``o_t = b_tᵀ x``.

    The definition itself, with no Sherman–Morrison algebra (Wang, Shi, Fox 2025, §3.1, the closed-form linear
    regression ``M_t = (Σ v_i k_iᵀ)(Σ k_i k_iᵀ + λ I)⁻¹``). From a given ``(S_0, P_0)`` it starts at
    ``A_0 = P_0⁻¹``, ``b_0 = A_0 S_0``. Cost ``O(T D_k² (D_k + D_v))``: a reference, not a fast path.
    """
    out_dtype = q.dtype if isinstance(q, torch.Tensor) else None
    q, k, v, log_decay, S, P = _prepare(q, k, v, lam, g, scale, initial_state)
    A = torch.linalg.inv(P)
    b = A @ S
    outputs = []
    for t in range(q.shape[2]):
        if log_decay is not None:
            alpha = torch.exp(log_decay[:, :, t, None, None])
            A, b = alpha * A, alpha * b
        A = A + torch.einsum("b h i, b h j -> b h i j", k[:, :, t], k[:, :, t])
        b = b + torch.einsum("b h k, b h v -> b h k v", k[:, :, t], v[:, :, t])
        x = torch.linalg.solve(A, q[:, :, t].unsqueeze(-1))  # (B, H, D_k, 1)
        outputs.append((b.transpose(-1, -2) @ x).squeeze(-1))
    o = torch.stack(outputs, dim=2).transpose(1, 2).to(out_dtype)
    if not output_final_state:
        return o, None
    return o, (torch.linalg.solve(A, b), torch.linalg.inv(A))


for _fn in (rls_recurrent, rls_exact):
    _fn.__doc__ += _SHARED_DOC
del _fn

"""The Triton kernels themselves: chunked linear attention and the chunked (gated) delta rule.

One program handles one (batch, head) pair, or with ``cu_seqlens`` one (sequence, head) pair, and one block of ``BV``
value columns; the grid is ``(B * H, cdiv(D_v, BV))`` (``(N * H, ·)`` with N sequences), with ``B * H`` on axis 0
because CUDA allows 2**31 - 1 programs there but only 65 535 on axes 1 and 2. It walks the sequence chunk by chunk
(``BT`` tokens each), keeps the state block ``S`` (``BK x BV``, fp32) in registers, and writes each chunk's output once.
Every matrix product is a ``tl.dot`` on a ``BT``-sized tile: this is what makes the chunk form fast on matrix units
(chapter chunkwise_algorithms).

Layout (contiguous, as flash-linear-attention): ``q, k`` are ``(B, T, H, D_k)``, ``v, o`` are ``(B, T, H, D_v)``,
``beta, g`` are ``(B, T, H)``, states are ``(B, H, D_k, D_v)`` fp32. The element ``(b, t, h, d)`` of a
``(B, T, H, D)`` tensor sits at ``((b * T + t) * H + h) * D + d``. Variable-length batches follow fla: ``B = 1``,
sequence n is tokens ``cu_seqlens[n] : cu_seqlens[n + 1]`` (``bos : eos``), so its token t sits at
``((bos + t) * H + h) * D + d`` and its states at index ``n`` of ``(N, H, D_k, D_v)``.

All arithmetic is fp32 whatever the input dtype; ``PRECISION`` is the ``tl.dot`` input precision, chosen by
:func:`ttr_edu.kernels._dispatch.dot_precision` (``"ieee"``, ``"tf32x3"`` or ``"tf32"``).
"""

import triton
import triton.language as tl


@triton.jit
def linear_attention_fwd_kernel(
    q,
    k,
    v,
    o,
    s0,
    s_final,
    cu_seqlens,
    scale,
    T,
    H: tl.constexpr,
    D_K: tl.constexpr,
    D_V: tl.constexpr,
    BT: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    HAS_S0: tl.constexpr,
    STORE_FINAL: tl.constexpr,
    PRECISION: tl.constexpr,
    IS_VARLEN: tl.constexpr,
):
    """Chunked causal linear attention: per chunk ``O = Q S + (Q Kᵀ ⊙ M) V`` then ``S ← S + Kᵀ V``."""
    i_bh, i_v = tl.program_id(0), tl.program_id(1)  # (batch, head) on axis 0: up to 2**31 - 1 programs
    i_b, i_h = (i_bh // H).to(tl.int64), (i_bh % H).to(tl.int64)
    if IS_VARLEN:  # i_b is the sequence: its tokens bos..eos of the single batch row, its own T
        bos = tl.load(cu_seqlens + i_b).to(tl.int64)
        T = (tl.load(cu_seqlens + i_b + 1).to(tl.int64) - bos).to(tl.int32)
    else:
        bos = i_b * T
    offs_t = tl.arange(0, BT)
    offs_k = tl.arange(0, BK)
    offs_v = i_v * BV + tl.arange(0, BV)
    mask_k, mask_v = offs_k < D_K, offs_v < D_V
    causal = offs_t[:, None] >= offs_t[None, :]  # M: lower triangle with the diagonal

    # Pointers to token 0 of this (b, h); token t is t * H * D further on.
    q_bh = q + (bos * H + i_h) * D_K
    k_bh = k + (bos * H + i_h) * D_K
    v_bh = v + (bos * H + i_h) * D_V
    o_bh = o + (bos * H + i_h) * D_V
    s_offs = i_bh.to(tl.int64) * D_K * D_V + offs_k[:, None] * D_V + offs_v[None, :]
    s_mask = mask_k[:, None] & mask_v[None, :]

    S = tl.zeros([BK, BV], dtype=tl.float32)
    if HAS_S0:
        S += tl.load(s0 + s_offs, mask=s_mask, other=0.0)

    for t0 in range(0, T, BT):
        rows = t0 + offs_t
        mask_t = rows < T  # the tail chunk: rows past T load as zeros and are never stored
        qk_mask = mask_t[:, None] & mask_k[None, :]
        v_mask = mask_t[:, None] & mask_v[None, :]
        q_c = tl.load(q_bh + rows[:, None] * H * D_K + offs_k[None, :], mask=qk_mask, other=0.0).to(tl.float32)
        k_c = tl.load(k_bh + rows[:, None] * H * D_K + offs_k[None, :], mask=qk_mask, other=0.0).to(tl.float32)
        v_c = tl.load(v_bh + rows[:, None] * H * D_V + offs_v[None, :], mask=v_mask, other=0.0).to(tl.float32)
        q_c = q_c * scale

        scores = tl.dot(q_c, tl.trans(k_c), input_precision=PRECISION)  # (BT, BT)
        scores = tl.where(causal, scores, 0.0)
        o_c = tl.dot(q_c, S, input_precision=PRECISION) + tl.dot(scores, v_c, input_precision=PRECISION)
        tl.store(o_bh + rows[:, None] * H * D_V + offs_v[None, :], o_c.to(o.dtype.element_ty), mask=v_mask)

        S += tl.dot(tl.trans(k_c), v_c, input_precision=PRECISION)

    if STORE_FINAL:
        tl.store(s_final + s_offs, S, mask=s_mask)


@triton.jit
def delta_rule_fwd_kernel(
    q,
    k,
    v,
    beta,
    g,
    o,
    s0,
    s_final,
    cu_seqlens,
    scale,
    T,
    H: tl.constexpr,
    D_K: tl.constexpr,
    D_V: tl.constexpr,
    BT: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    USE_G: tl.constexpr,
    HAS_S0: tl.constexpr,
    STORE_FINAL: tl.constexpr,
    PRECISION: tl.constexpr,
    IS_VARLEN: tl.constexpr,
):
    """Chunked (gated) delta rule in the WY/UT form (Yang et al. 2024; fla's chunk kernels).

    Per chunk, with ``γ_i = exp(Σ_{s≤i} g_s)`` inside the chunk (``γ = 1`` without a gate) and ``Γ_ij = γ_i / γ_j``:
        A = tril(diag(β) (K Kᵀ ⊙ Γ), −1)          strictly lower
        𝒯 = (I + A)⁻¹ diag(β)                     the UT matrix (`ut`), by forward substitution
        W = 𝒯 diag(γ) K,   U = 𝒯 V − W S          the WY/UT pseudo-values
        O = diag(γ) Q S + (Q Kᵀ ⊙ Γ ⊙ M) U
        S ← γ_last S + (diag(γ_last / γ) K)ᵀ U
    """
    i_bh, i_v = tl.program_id(0), tl.program_id(1)  # (batch, head) on axis 0: up to 2**31 - 1 programs
    i_b, i_h = (i_bh // H).to(tl.int64), (i_bh % H).to(tl.int64)
    if IS_VARLEN:  # i_b is the sequence: its tokens bos..eos of the single batch row, its own T
        bos = tl.load(cu_seqlens + i_b).to(tl.int64)
        T = (tl.load(cu_seqlens + i_b + 1).to(tl.int64) - bos).to(tl.int32)
    else:
        bos = i_b * T
    offs_t = tl.arange(0, BT)
    offs_k = tl.arange(0, BK)
    offs_v = i_v * BV + tl.arange(0, BV)
    mask_k, mask_v = offs_k < D_K, offs_v < D_V
    causal = offs_t[:, None] >= offs_t[None, :]
    strictly_lower = offs_t[:, None] > offs_t[None, :]
    identity = tl.where(offs_t[:, None] == offs_t[None, :], 1.0, 0.0)

    q_bh = q + (bos * H + i_h) * D_K
    k_bh = k + (bos * H + i_h) * D_K
    v_bh = v + (bos * H + i_h) * D_V
    o_bh = o + (bos * H + i_h) * D_V
    beta_bh = beta + bos * H + i_h
    g_bh = g + bos * H + i_h
    s_offs = i_bh.to(tl.int64) * D_K * D_V + offs_k[:, None] * D_V + offs_v[None, :]
    s_mask = mask_k[:, None] & mask_v[None, :]

    S = tl.zeros([BK, BV], dtype=tl.float32)
    if HAS_S0:
        S += tl.load(s0 + s_offs, mask=s_mask, other=0.0)

    for t0 in range(0, T, BT):
        rows = t0 + offs_t
        mask_t = rows < T  # tail rows load k = v = β = g = 0: they add nothing to U, O or S
        qk_mask = mask_t[:, None] & mask_k[None, :]
        v_mask = mask_t[:, None] & mask_v[None, :]
        q_c = tl.load(q_bh + rows[:, None] * H * D_K + offs_k[None, :], mask=qk_mask, other=0.0).to(tl.float32)
        k_c = tl.load(k_bh + rows[:, None] * H * D_K + offs_k[None, :], mask=qk_mask, other=0.0).to(tl.float32)
        v_c = tl.load(v_bh + rows[:, None] * H * D_V + offs_v[None, :], mask=v_mask, other=0.0).to(tl.float32)
        b_c = tl.load(beta_bh + rows * H, mask=mask_t, other=0.0).to(tl.float32)
        q_c = q_c * scale

        kk = tl.dot(k_c, tl.trans(k_c), input_precision=PRECISION)
        qk = tl.dot(q_c, tl.trans(k_c), input_precision=PRECISION)
        if USE_G:
            g_c = tl.load(g_bh + rows * H, mask=mask_t, other=0.0).to(tl.float32)
            G = tl.cumsum(g_c, 0)  # log γ_i
            # log γ_C, the chunk's total decay, read off the same running sum (its last row; tail rows carry
            # g = 0). A separate tl.sum(g) rounds differently from tl.cumsum(g), and under strong decay that
            # mismatch between γ_C and the γ_i it is divided by cost the final state 1e-5 of relative precision.
            G_last = tl.sum(tl.where(offs_t == BT - 1, G, 0.0), 0)
            # Γ_ij = γ_i / γ_j ≤ 1 on and below the diagonal; the where() keeps exp() from overflowing above it.
            decay = tl.exp(tl.where(causal, G[:, None] - G[None, :], 0.0))
            kk = kk * decay
            qk = qk * decay
            k_decayed = k_c * tl.exp(G)[:, None]
            q_c = q_c * tl.exp(G)[:, None]
        else:
            k_decayed = k_c

        # 𝒯 = (I + A)⁻¹ diag(β), the UT matrix. I + A is unit lower triangular: its inverse follows row by row,
        # row i of the inverse is e_i − Σ_{j<i} A_ij (row j of the inverse), and rows j < i are already final.
        A = tl.where(strictly_lower, b_c[:, None] * kk, 0.0)
        inverse = identity
        for i in range(1, BT):
            a_i = tl.sum(tl.where(offs_t[:, None] == i, A, 0.0), 0)  # row i of A, indexed by j
            update = tl.sum(a_i[:, None] * inverse, 0)
            inverse = tl.where(offs_t[:, None] == i, inverse - update[None, :], inverse)
        ut = inverse * b_c[None, :]  # 𝒯 (T is the sequence length)

        W = tl.dot(ut, k_decayed, input_precision=PRECISION)  # (BT, BK)
        U = tl.dot(ut, v_c, input_precision=PRECISION) - tl.dot(W, S, input_precision=PRECISION)  # (BT, BV)

        scores = tl.where(causal, qk, 0.0)
        o_c = tl.dot(q_c, S, input_precision=PRECISION) + tl.dot(scores, U, input_precision=PRECISION)
        tl.store(o_bh + rows[:, None] * H * D_V + offs_v[None, :], o_c.to(o.dtype.element_ty), mask=v_mask)

        if USE_G:
            k_to_end = k_c * tl.exp(G_last - G)[:, None]
            S = S * tl.exp(G_last) + tl.dot(tl.trans(k_to_end), U, input_precision=PRECISION)
        else:
            S += tl.dot(tl.trans(k_c), U, input_precision=PRECISION)

    if STORE_FINAL:
        tl.store(s_final + s_offs, S, mask=s_mask)

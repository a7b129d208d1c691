"""Reference and deliberately wrong kernels for the Triton chapter's puzzle checks, shared by
``test_checks_triton_kernels.py`` (interpreter) and ``test_checks_triton_kernels_cuda.py`` (compiled, on a GPU).

Whether these are interpreted or compiled depends on ``TRITON_INTERPRET`` when this module is imported.
"""

import triton
import triton.language as tl


class Bound:
    """A kernel with some constexpr flags fixed, launched like the kernel itself."""

    def __init__(self, kernel, **flags):
        self.kernel, self.flags = kernel, flags

    def __getitem__(self, grid):
        return lambda *args, **constants: self.kernel[grid](*args, **constants, **self.flags)

    def __call__(self, *args, **kwargs):  # callable, as a kernel object is, and refusing, as Triton does
        raise RuntimeError("a kernel is launched as kernel[grid](...)")


@triton.jit
def scale_tile(x_ptr, out_ptr, T, D, scale, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.arange(0, BLOCK_D)
    offsets = rows[:, None] * D + cols[None, :]
    mask = (rows[:, None] < T) & (cols[None, :] < D)
    tl.store(out_ptr + offsets, scale * tl.load(x_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def scale_tile_store_unmasked(x_ptr, out_ptr, T, D, scale, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.arange(0, BLOCK_D)
    offsets = rows[:, None] * D + cols[None, :]
    mask = (rows[:, None] < T) & (cols[None, :] < D)
    tl.store(out_ptr + offsets, scale * tl.load(x_ptr + offsets, mask=mask, other=0.0))


@triton.jit
def scale_tile_row_stride_block(x_ptr, out_ptr, T, D, scale, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.arange(0, BLOCK_D)
    offsets = rows[:, None] * BLOCK_D + cols[None, :]  # wrong: the row stride is D, not the tile width
    mask = (rows[:, None] < T) & (cols[None, :] < D)
    tl.store(out_ptr + offsets, scale * tl.load(x_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def scale_tile_first_rows_only(x_ptr, out_ptr, T, D, scale, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    rows = tl.program_id(0) + tl.arange(0, BLOCK_T)  # wrong: program i starts at row i, not i * BLOCK_T
    cols = tl.arange(0, BLOCK_D)
    offsets = rows[:, None] * D + cols[None, :]
    mask = (rows[:, None] < T) & (cols[None, :] < D)
    tl.store(out_ptr + offsets, scale * tl.load(x_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def causal_chunk(
    q_ptr,
    k_ptr,
    v_ptr,
    out_ptr,
    C,
    D_k,
    D_v,
    BLOCK_C: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_V: tl.constexpr,
    STRICT: tl.constexpr = False,
    NO_OTHER: tl.constexpr = False,
    OPERANDS: tl.constexpr = "fp32",
    PRECISION: tl.constexpr = "ieee",
    NEUMANN: tl.constexpr = False,
):
    t = tl.arange(0, BLOCK_C)
    dk = tl.arange(0, BLOCK_K)
    dv = tl.arange(0, BLOCK_V)
    qk_mask = (t[:, None] < C) & (dk[None, :] < D_k)
    v_mask = (t[:, None] < C) & (dv[None, :] < D_v)
    if NO_OTHER:  # wrong on a GPU: the padded lanes are undefined, and they enter the products
        q = tl.load(q_ptr + t[:, None] * D_k + dk[None, :], mask=qk_mask)
        k = tl.load(k_ptr + t[:, None] * D_k + dk[None, :], mask=qk_mask)
        v = tl.load(v_ptr + t[:, None] * D_v + dv[None, :], mask=v_mask)
    else:
        q = tl.load(q_ptr + t[:, None] * D_k + dk[None, :], mask=qk_mask, other=0.0)
        k = tl.load(k_ptr + t[:, None] * D_k + dk[None, :], mask=qk_mask, other=0.0)
        v = tl.load(v_ptr + t[:, None] * D_v + dv[None, :], mask=v_mask, other=0.0)
    if OPERANDS == "fp16":  # wrong: half-precision operands lose fp32's accuracy (their products are exact)
        q, k, v = q.to(tl.float16), k.to(tl.float16), v.to(tl.float16)
    if OPERANDS == "bf16":
        q, k, v = q.to(tl.bfloat16), k.to(tl.bfloat16), v.to(tl.bfloat16)
    scores = tl.dot(q, tl.trans(k), input_precision=PRECISION)
    if STRICT:
        scores = tl.where(t[:, None] > t[None, :], scores, 0.0)
    else:
        scores = tl.where(t[:, None] >= t[None, :], scores, 0.0)
    out = tl.dot(scores.to(v.dtype), v, input_precision=PRECISION)
    tl.store(out_ptr + t[:, None] * D_v + dv[None, :], out, mask=v_mask)


@triton.jit
def causal_chunk_default_precision(
    q_ptr, k_ptr, v_ptr, out_ptr, C, D_k, D_v, BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr
):
    # wrong on a GPU: tl.dot without input_precision multiplies fp32 tiles in tf32
    t = tl.arange(0, BLOCK_C)
    dk = tl.arange(0, BLOCK_K)
    dv = tl.arange(0, BLOCK_V)
    qk_mask = (t[:, None] < C) & (dk[None, :] < D_k)
    v_mask = (t[:, None] < C) & (dv[None, :] < D_v)
    q = tl.load(q_ptr + t[:, None] * D_k + dk[None, :], mask=qk_mask, other=0.0)
    k = tl.load(k_ptr + t[:, None] * D_k + dk[None, :], mask=qk_mask, other=0.0)
    v = tl.load(v_ptr + t[:, None] * D_v + dv[None, :], mask=v_mask, other=0.0)
    scores = tl.where(t[:, None] >= t[None, :], tl.dot(q, tl.trans(k)), 0.0)
    tl.store(out_ptr + t[:, None] * D_v + dv[None, :], tl.dot(scores, v), mask=v_mask)


@triton.jit
def chunk_linear_attention(
    q_ptr,
    k_ptr,
    v_ptr,
    o_ptr,
    s_ptr,
    T,
    D_k,
    D_v,
    BLOCK_T: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_V: tl.constexpr,
    STATE_FIRST: tl.constexpr = False,
):
    t = tl.arange(0, BLOCK_T)
    dk = tl.arange(0, BLOCK_K)
    dv = tl.arange(0, BLOCK_V)
    S = tl.zeros([BLOCK_K, BLOCK_V], dtype=tl.float32)
    for start in range(0, T, BLOCK_T):
        rows = start + t
        qk_mask = (rows[:, None] < T) & (dk[None, :] < D_k)
        v_mask = (rows[:, None] < T) & (dv[None, :] < D_v)
        q = tl.load(q_ptr + rows[:, None] * D_k + dk[None, :], mask=qk_mask, other=0.0)
        k = tl.load(k_ptr + rows[:, None] * D_k + dk[None, :], mask=qk_mask, other=0.0)
        v = tl.load(v_ptr + rows[:, None] * D_v + dv[None, :], mask=v_mask, other=0.0)
        if STATE_FIRST:  # wrong: the chunk's outputs then read its own writes twice
            S += tl.dot(tl.trans(k), v, input_precision="ieee")
        scores = tl.where(t[:, None] >= t[None, :], tl.dot(q, tl.trans(k), input_precision="ieee"), 0.0)
        o = tl.dot(q, S, input_precision="ieee") + tl.dot(scores, v, input_precision="ieee")
        tl.store(o_ptr + rows[:, None] * D_v + dv[None, :], o, mask=v_mask)
        if not STATE_FIRST:
            S += tl.dot(tl.trans(k), v, input_precision="ieee")
    s_mask = (dk[:, None] < D_k) & (dv[None, :] < D_v)
    tl.store(s_ptr + dk[:, None] * D_v + dv[None, :], S, mask=s_mask)


@triton.jit
def ut_transform(
    k_ptr,
    beta_ptr,
    out_ptr,
    C,
    D_k,
    BLOCK_C: tl.constexpr,
    BLOCK_K: tl.constexpr,
    FORGET_BETA: tl.constexpr = False,
    PRECISION: tl.constexpr = "ieee",
):
    t = tl.arange(0, BLOCK_C)
    dk = tl.arange(0, BLOCK_K)
    k = tl.load(k_ptr + t[:, None] * D_k + dk[None, :], mask=(t[:, None] < C) & (dk[None, :] < D_k), other=0.0)
    beta = tl.load(beta_ptr + t, mask=t < C, other=0.0)
    A = tl.where(t[:, None] > t[None, :], beta[:, None] * tl.dot(k, tl.trans(k), input_precision=PRECISION), 0.0)
    inverse = tl.where(t[:, None] == t[None, :], 1.0, 0.0)
    for i in range(1, BLOCK_C):
        a_i = tl.sum(tl.where(t[:, None] == i, A, 0.0), 0)
        inverse = tl.where(t[:, None] == i, inverse - tl.sum(a_i[:, None] * inverse, 0)[None, :], inverse)
    if not FORGET_BETA:
        inverse = inverse * beta[None, :]
    tl.store(out_ptr + t[:, None] * C + t[None, :], inverse, mask=(t[:, None] < C) & (t[None, :] < C))


@triton.jit
def running_sum(
    x_ptr,
    out_ptr,
    T,
    H,
    D,
    BLOCK_T: tl.constexpr,
    BLOCK_D: tl.constexpr,
    TIME_STRIDE_D: tl.constexpr = False,
    NO_CARRY: tl.constexpr = False,
    WILD: tl.constexpr = False,
):
    i_bh, i_d = tl.program_id(0), tl.program_id(1)
    i_b, i_h = (i_bh // H).to(tl.int64), (i_bh % H).to(tl.int64)
    cols = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    t = tl.arange(0, BLOCK_T)
    base = (i_b * T * H + i_h) * D
    if WILD:  # wrong: the batch stride counted in bytes-like units, thousands of elements too far
        base = (i_b * T * H * 4096 + i_h) * D
    row_stride = H * D
    if TIME_STRIDE_D:  # wrong: rows of one head are H * D apart, not D
        row_stride = D
    carry = tl.zeros([BLOCK_D], dtype=tl.float32)
    for start in range(0, T, BLOCK_T):
        rows = start + t
        mask = (rows[:, None] < T) & (cols[None, :] < D)
        offsets = base + rows[:, None] * row_stride + cols[None, :]
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
        total = tl.cumsum(x, 0) + carry[None, :]
        tl.store(out_ptr + offsets, total, mask=mask)
        if not NO_CARRY:
            carry += tl.sum(x, 0)


@triton.jit
def delta_rule_chunk(
    q_ptr,
    k_ptr,
    v_ptr,
    beta_ptr,
    o_ptr,
    s0_ptr,
    s_ptr,
    T,
    H,
    D_k,
    D_v,
    BLOCK_T: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_V: tl.constexpr,
    NO_WS: tl.constexpr = False,
    NO_S0: tl.constexpr = False,
    FIRST_BLOCK: tl.constexpr = False,
    PRECISION: tl.constexpr = "ieee",
    NEUMANN: tl.constexpr = False,
):
    i_bh, i_v = tl.program_id(0), tl.program_id(1)
    if FIRST_BLOCK:  # wrong: every program takes the first block of value columns
        i_v = 0
    i_b, i_h = (i_bh // H).to(tl.int64), (i_bh % H).to(tl.int64)
    t = tl.arange(0, BLOCK_T)
    dk = tl.arange(0, BLOCK_K)
    dv = i_v * BLOCK_V + tl.arange(0, BLOCK_V)
    s_offsets = i_bh.to(tl.int64) * D_k * D_v + dk[:, None] * D_v + dv[None, :]
    s_mask = (dk[:, None] < D_k) & (dv[None, :] < D_v)
    S = tl.zeros([BLOCK_K, BLOCK_V], dtype=tl.float32)
    if not NO_S0:
        S += tl.load(s0_ptr + s_offsets, mask=s_mask, other=0.0)
    for start in range(0, T, BLOCK_T):
        rows = start + t
        qk_mask = (rows[:, None] < T) & (dk[None, :] < D_k)
        v_mask = (rows[:, None] < T) & (dv[None, :] < D_v)
        qk_offsets = ((i_b * T + rows[:, None]) * H + i_h) * D_k + dk[None, :]
        v_offsets = ((i_b * T + rows[:, None]) * H + i_h) * D_v + dv[None, :]
        q = tl.load(q_ptr + qk_offsets, mask=qk_mask, other=0.0)
        k = tl.load(k_ptr + qk_offsets, mask=qk_mask, other=0.0)
        v = tl.load(v_ptr + v_offsets, mask=v_mask, other=0.0)
        beta = tl.load(beta_ptr + (i_b * T + rows) * H + i_h, mask=rows < T, other=0.0)
        A = tl.where(t[:, None] > t[None, :], beta[:, None] * tl.dot(k, tl.trans(k), input_precision=PRECISION), 0.0)
        inverse = tl.where(t[:, None] == t[None, :], 1.0, 0.0)
        if NEUMANN:  # wrong on correlated keys: (I − A)(I + A²)(I + A⁴)(I + A⁸), the Neumann series by doubling
            eye = inverse
            inverse = eye - A
            power = tl.dot(A, A, input_precision="ieee")
            for _ in range(3):
                inverse = tl.dot(inverse, eye + power, input_precision="ieee")
                power = tl.dot(power, power, input_precision="ieee")
        else:
            for i in range(1, BLOCK_T):
                a_i = tl.sum(tl.where(t[:, None] == i, A, 0.0), 0)
                inverse = tl.where(t[:, None] == i, inverse - tl.sum(a_i[:, None] * inverse, 0)[None, :], inverse)
        ut = inverse * beta[None, :]
        U = tl.dot(ut, v, input_precision=PRECISION)
        if not NO_WS:  # wrong without it: the pseudo-values ignore what the state already predicts
            U -= tl.dot(tl.dot(ut, k, input_precision=PRECISION), S, input_precision=PRECISION)
        scores = tl.where(t[:, None] >= t[None, :], tl.dot(q, tl.trans(k), input_precision=PRECISION), 0.0)
        o = tl.dot(q, S, input_precision=PRECISION) + tl.dot(scores, U, input_precision=PRECISION)
        tl.store(o_ptr + v_offsets, o, mask=v_mask)
        S += tl.dot(tl.trans(k), U, input_precision=PRECISION)
    tl.store(s_ptr + s_offsets, S, mask=s_mask)


@triton.jit
def scale_tile_row_loop(x_ptr, out_ptr, T, D, scale, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    cols = tl.arange(0, BLOCK_D)
    for r in range(BLOCK_T):
        row = tl.program_id(0) * BLOCK_T + r
        mask = (cols < D) & (row < T)  # a block mask and a scalar one: valid Triton
        x = tl.load(x_ptr + row * D + cols, mask=mask, other=0.0)
        tl.store(out_ptr + row * D + cols, scale * x, mask=mask)


@triton.jit
def scale_tile_not_power_of_two(x_ptr, out_ptr, T, D, scale, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    cols = tl.arange(0, 3)  # wrong: tl.arange needs a power-of-two length
    tl.store(out_ptr + cols, tl.load(x_ptr + cols))


@triton.jit
def running_sum_int32(x_ptr, out_ptr, T, H, D, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    # right at every size a check can run, wrong past 2**31 elements: the offsets stay int32
    i_bh, i_d = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    cols = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    t = tl.arange(0, BLOCK_T)
    base = (i_b * T * H + i_h) * D
    carry = tl.zeros([BLOCK_D], dtype=tl.float32)
    for start in range(0, T, BLOCK_T):
        rows = start + t
        mask = (rows[:, None] < T) & (cols[None, :] < D)
        offsets = base + rows[:, None] * H * D + cols[None, :]
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
        tl.store(out_ptr + offsets, tl.cumsum(x, 0) + carry[None, :], mask=mask)
        carry += tl.sum(x, 0)


@triton.jit
def gated_delta_rule_chunk(
    q_ptr,
    k_ptr,
    v_ptr,
    beta_ptr,
    g_ptr,
    o_ptr,
    s0_ptr,
    s_ptr,
    T,
    H,
    D_k,
    D_v,
    BLOCK_T: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_V: tl.constexpr,
    NO_STATE_DECAY: tl.constexpr = False,
    NO_DECAY_IN_A: tl.constexpr = False,
    NO_QUERY_DECAY: tl.constexpr = False,
    SUM_NOT_CUMSUM: tl.constexpr = False,
    NO_SCORE_DECAY: tl.constexpr = False,
    W_UNDECAYED: tl.constexpr = False,
    NO_KEY_DECAY: tl.constexpr = False,
    NEUMANN: tl.constexpr = False,
    MASK_BY_PRODUCT: tl.constexpr = False,
    UNMASKED_EXPONENT: tl.constexpr = False,
):
    i_bh, i_v = tl.program_id(0), tl.program_id(1)
    i_b, i_h = (i_bh // H).to(tl.int64), (i_bh % H).to(tl.int64)
    t = tl.arange(0, BLOCK_T)
    dk = tl.arange(0, BLOCK_K)
    dv = i_v * BLOCK_V + tl.arange(0, BLOCK_V)
    s_offsets = i_bh.to(tl.int64) * D_k * D_v + dk[:, None] * D_v + dv[None, :]
    s_mask = (dk[:, None] < D_k) & (dv[None, :] < D_v)
    S = tl.load(s0_ptr + s_offsets, mask=s_mask, other=0.0)
    causal = t[:, None] >= t[None, :]
    for start in range(0, T, BLOCK_T):
        rows = start + t
        qk_mask = (rows[:, None] < T) & (dk[None, :] < D_k)
        v_mask = (rows[:, None] < T) & (dv[None, :] < D_v)
        qk_offsets = ((i_b * T + rows[:, None]) * H + i_h) * D_k + dk[None, :]
        v_offsets = ((i_b * T + rows[:, None]) * H + i_h) * D_v + dv[None, :]
        q = tl.load(q_ptr + qk_offsets, mask=qk_mask, other=0.0)
        k = tl.load(k_ptr + qk_offsets, mask=qk_mask, other=0.0)
        v = tl.load(v_ptr + v_offsets, mask=v_mask, other=0.0)
        beta = tl.load(beta_ptr + (i_b * T + rows) * H + i_h, mask=rows < T, other=0.0)
        g = tl.load(g_ptr + (i_b * T + rows) * H + i_h, mask=rows < T, other=0.0)
        G = tl.cumsum(g, 0)  # log γ_i
        if SUM_NOT_CUMSUM:  # wrong: every token decayed by the whole chunk's decay
            G = tl.zeros([BLOCK_T], dtype=tl.float32) + tl.sum(g, 0)
        G_last = tl.sum(tl.where(t == BLOCK_T - 1, G, 0.0), 0)
        if MASK_BY_PRODUCT:  # wrong at strong decay: exp above the diagonal overflows to inf, and inf · 0 is NaN
            decay = tl.exp(G[:, None] - G[None, :]) * causal.to(tl.float32)
        elif UNMASKED_EXPONENT:  # right: the inf above the diagonal is discarded by the tl.where on A and the scores
            decay = tl.exp(G[:, None] - G[None, :])
        else:
            decay = tl.exp(tl.where(causal, G[:, None] - G[None, :], 0.0))
        kk = tl.dot(k, tl.trans(k), input_precision="ieee")
        if not NO_DECAY_IN_A:  # wrong without it: A ignores the decay between the tokens of the chunk
            kk = kk * decay
        A = tl.where(t[:, None] > t[None, :], beta[:, None] * kk, 0.0)
        inverse = tl.where(t[:, None] == t[None, :], 1.0, 0.0)
        if NEUMANN:  # wrong on correlated keys: (I − A)(I + A²)(I + A⁴)(I + A⁸), the Neumann series by doubling
            eye = inverse
            inverse = eye - A
            power = tl.dot(A, A, input_precision="ieee")
            for _ in range(3):
                inverse = tl.dot(inverse, eye + power, input_precision="ieee")
                power = tl.dot(power, power, input_precision="ieee")
        else:
            for i in range(1, BLOCK_T):
                a_i = tl.sum(tl.where(t[:, None] == i, A, 0.0), 0)
                inverse = tl.where(t[:, None] == i, inverse - tl.sum(a_i[:, None] * inverse, 0)[None, :], inverse)
        ut = inverse * beta[None, :]
        if W_UNDECAYED:  # wrong: W = 𝒯 K, without diag(γ)
            W = tl.dot(ut, k, input_precision="ieee")
        else:
            W = tl.dot(ut, k * tl.exp(G)[:, None], input_precision="ieee")
        U = tl.dot(ut, v, input_precision="ieee") - tl.dot(W, S, input_precision="ieee")
        scores = tl.dot(q, tl.trans(k), input_precision="ieee")
        if not NO_SCORE_DECAY:  # wrong without it: the scores ignore the decay between query and key
            scores = scores * decay
        if not MASK_BY_PRODUCT:  # the decay already holds the mask: no tl.where
            scores = tl.where(causal, scores, 0.0)
        q_decayed = q if NO_QUERY_DECAY else q * tl.exp(G)[:, None]
        o = tl.dot(q_decayed, S, input_precision="ieee") + tl.dot(scores, U, input_precision="ieee")
        tl.store(o_ptr + v_offsets, o, mask=v_mask)
        if not NO_STATE_DECAY:  # wrong without it: the state never forgets
            S = S * tl.exp(G_last)
        if NO_KEY_DECAY:  # wrong: the keys' decay to the chunk's end forgotten in the state update
            S += tl.dot(tl.trans(k), U, input_precision="ieee")
        else:
            S += tl.dot(tl.trans(k * tl.exp(G_last - G)[:, None]), U, input_precision="ieee")
    tl.store(s_ptr + s_offsets, S, mask=s_mask)


@triton.jit
def chunk_dv(
    q_ptr,
    k_ptr,
    beta_ptr,
    do_ptr,
    ds_ptr,
    dv_ptr,
    C,
    D_k,
    D_v,
    BLOCK_C: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_V: tl.constexpr,
    NO_DS: tl.constexpr = False,
    UT_NOT_TRANSPOSED: tl.constexpr = False,
    STRICT: tl.constexpr = False,
    P_NOT_TRANSPOSED: tl.constexpr = False,
    NO_BETA: tl.constexpr = False,
):
    t = tl.arange(0, BLOCK_C)
    dk = tl.arange(0, BLOCK_K)
    dv = tl.arange(0, BLOCK_V)
    qk_mask = (t[:, None] < C) & (dk[None, :] < D_k)
    v_mask = (t[:, None] < C) & (dv[None, :] < D_v)
    q = tl.load(q_ptr + t[:, None] * D_k + dk[None, :], mask=qk_mask, other=0.0)
    k = tl.load(k_ptr + t[:, None] * D_k + dk[None, :], mask=qk_mask, other=0.0)
    beta = tl.load(beta_ptr + t, mask=t < C, other=0.0)
    do = tl.load(do_ptr + t[:, None] * D_v + dv[None, :], mask=v_mask, other=0.0)
    ds = tl.load(ds_ptr + dk[:, None] * D_v + dv[None, :], mask=(dk[:, None] < D_k) & (dv[None, :] < D_v), other=0.0)
    A = tl.where(t[:, None] > t[None, :], beta[:, None] * tl.dot(k, tl.trans(k), input_precision="ieee"), 0.0)
    inverse = tl.where(t[:, None] == t[None, :], 1.0, 0.0)
    for i in range(1, BLOCK_C):
        a_i = tl.sum(tl.where(t[:, None] == i, A, 0.0), 0)
        inverse = tl.where(t[:, None] == i, inverse - tl.sum(a_i[:, None] * inverse, 0)[None, :], inverse)
    if STRICT:  # wrong: a token's own write is read by its own query
        P = tl.where(t[:, None] > t[None, :], tl.dot(q, tl.trans(k), input_precision="ieee"), 0.0)
    else:
        P = tl.where(t[:, None] >= t[None, :], tl.dot(q, tl.trans(k), input_precision="ieee"), 0.0)
    if P_NOT_TRANSPOSED:
        d_pseudo = tl.dot(P, do, input_precision="ieee")
    else:
        d_pseudo = tl.dot(tl.trans(P), do, input_precision="ieee")
    if not NO_DS:
        d_pseudo += tl.dot(k, ds, input_precision="ieee")
    if NO_BETA:  # wrong: Xᵀ where 𝒯ᵀ = diag(β) Xᵀ belongs
        d_v = tl.dot(tl.trans(inverse), d_pseudo, input_precision="ieee")
    elif UT_NOT_TRANSPOSED:
        d_v = tl.dot(inverse * beta[None, :], d_pseudo, input_precision="ieee")
    else:
        d_v = beta[:, None] * tl.dot(tl.trans(inverse), d_pseudo, input_precision="ieee")  # 𝒯ᵀ = diag(β) Xᵀ
    tl.store(dv_ptr + t[:, None] * D_v + dv[None, :], d_v, mask=v_mask)


@triton.jit
def delta_rule_chunk_int32_inputs(
    q_ptr, k_ptr, v_ptr, beta_ptr, o_ptr, s0_ptr, s_ptr, T, H, D_k, D_v,
    BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr,
):  # fmt: skip
    # right at every size a check can run; only the state's offsets are widened (i_bh), while i_b and i_h stay int32
    # in the offsets of q, k, v, o and β, which overflow past 2**31 elements
    i_bh, i_v = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    t = tl.arange(0, BLOCK_T)
    dk = tl.arange(0, BLOCK_K)
    dv = i_v * BLOCK_V + tl.arange(0, BLOCK_V)
    s_offsets = i_bh.to(tl.int64) * D_k * D_v + dk[:, None] * D_v + dv[None, :]
    s_mask = (dk[:, None] < D_k) & (dv[None, :] < D_v)
    S = tl.load(s0_ptr + s_offsets, mask=s_mask, other=0.0)
    for start in range(0, T, BLOCK_T):
        rows = start + t
        qk_mask = (rows[:, None] < T) & (dk[None, :] < D_k)
        v_mask = (rows[:, None] < T) & (dv[None, :] < D_v)
        qk_offsets = ((i_b * T + rows[:, None]) * H + i_h) * D_k + dk[None, :]
        v_offsets = ((i_b * T + rows[:, None]) * H + i_h) * D_v + dv[None, :]
        q = tl.load(q_ptr + qk_offsets, mask=qk_mask, other=0.0)
        k = tl.load(k_ptr + qk_offsets, mask=qk_mask, other=0.0)
        v = tl.load(v_ptr + v_offsets, mask=v_mask, other=0.0)
        beta = tl.load(beta_ptr + (i_b * T + rows) * H + i_h, mask=rows < T, other=0.0)
        A = tl.where(t[:, None] > t[None, :], beta[:, None] * tl.dot(k, tl.trans(k), input_precision="ieee"), 0.0)
        inverse = tl.where(t[:, None] == t[None, :], 1.0, 0.0)
        for i in range(1, BLOCK_T):
            a_i = tl.sum(tl.where(t[:, None] == i, A, 0.0), 0)
            inverse = tl.where(t[:, None] == i, inverse - tl.sum(a_i[:, None] * inverse, 0)[None, :], inverse)
        ut = inverse * beta[None, :]
        W = tl.dot(ut, k, input_precision="ieee")
        U = tl.dot(ut, v, input_precision="ieee") - tl.dot(W, S, input_precision="ieee")
        scores = tl.where(t[:, None] >= t[None, :], tl.dot(q, tl.trans(k), input_precision="ieee"), 0.0)
        o = tl.dot(q, S, input_precision="ieee") + tl.dot(scores, U, input_precision="ieee")
        tl.store(o_ptr + v_offsets, o, mask=v_mask)
        S += tl.dot(tl.trans(k), U, input_precision="ieee")
    tl.store(s_ptr + s_offsets, S, mask=s_mask)


@triton.jit
def running_sum_batch_widened(x_ptr, out_ptr, T, H, D, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    # right: only the batch index is widened; the head's i_h * D stays int32, which is at most H * D
    i_bh, i_d = tl.program_id(0), tl.program_id(1)
    i_b, i_h = (i_bh // H).to(tl.int64), i_bh % H
    cols = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    t = tl.arange(0, BLOCK_T)
    base = i_b * T * H * D + i_h * D
    carry = tl.zeros([BLOCK_D], dtype=tl.float32)
    for start in range(0, T, BLOCK_T):
        rows = start + t
        mask = (rows[:, None] < T) & (cols[None, :] < D)
        offsets = base + rows[:, None] * H * D + cols[None, :]
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
        tl.store(out_ptr + offsets, tl.cumsum(x, 0) + carry[None, :], mask=mask)
        carry += tl.sum(x, 0)


@triton.jit
def _causal_chunk_tiles(
    q_ptr, k_ptr, v_ptr, C, D_k, D_v, BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr
):
    t = tl.arange(0, BLOCK_C)
    dk = tl.arange(0, BLOCK_K)
    dv = tl.arange(0, BLOCK_V)
    qk_mask = (t[:, None] < C) & (dk[None, :] < D_k)
    v_mask = (t[:, None] < C) & (dv[None, :] < D_v)
    q = tl.load(q_ptr + t[:, None] * D_k + dk[None, :], mask=qk_mask, other=0.0)
    k = tl.load(k_ptr + t[:, None] * D_k + dk[None, :], mask=qk_mask, other=0.0)
    v = tl.load(v_ptr + t[:, None] * D_v + dv[None, :], mask=v_mask, other=0.0)
    return q, k, v


@triton.jit
def causal_chunk_allow_tf32_false(
    q_ptr, k_ptr, v_ptr, out_ptr, C, D_k, D_v, BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr
):
    # right: allow_tf32=False, the deprecated spelling that fla uses, is "ieee" in Triton 3.9
    q, k, v = _causal_chunk_tiles(q_ptr, k_ptr, v_ptr, C, D_k, D_v, BLOCK_C, BLOCK_K, BLOCK_V)
    t = tl.arange(0, BLOCK_C)
    scores = tl.where(t[:, None] >= t[None, :], tl.dot(q, tl.trans(k), allow_tf32=False), 0.0)
    out = tl.dot(scores, v, allow_tf32=False)
    dv = tl.arange(0, BLOCK_V)
    tl.store(out_ptr + t[:, None] * D_v + dv[None, :], out, mask=(t[:, None] < C) & (dv[None, :] < D_v))


@triton.jit
def causal_chunk_positional_precision(
    q_ptr, k_ptr, v_ptr, out_ptr, C, D_k, D_v, BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr
):
    # right: the precision as tl.dot's fourth positional argument (input, other, acc, input_precision)
    q, k, v = _causal_chunk_tiles(q_ptr, k_ptr, v_ptr, C, D_k, D_v, BLOCK_C, BLOCK_K, BLOCK_V)
    t = tl.arange(0, BLOCK_C)
    scores = tl.where(t[:, None] >= t[None, :], tl.dot(q, tl.trans(k), None, "ieee"), 0.0)
    out = tl.dot(scores, v, None, "ieee")
    dv = tl.arange(0, BLOCK_V)
    tl.store(out_ptr + t[:, None] * D_v + dv[None, :], out, mask=(t[:, None] < C) & (dv[None, :] < D_v))


@triton.jit
def causal_chunk_allow_tf32_true(
    q_ptr, k_ptr, v_ptr, out_ptr, C, D_k, D_v, BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr
):
    # wrong on a GPU: allow_tf32=True asks for tf32 products
    q, k, v = _causal_chunk_tiles(q_ptr, k_ptr, v_ptr, C, D_k, D_v, BLOCK_C, BLOCK_K, BLOCK_V)
    t = tl.arange(0, BLOCK_C)
    scores = tl.where(t[:, None] >= t[None, :], tl.dot(q, tl.trans(k), allow_tf32=True), 0.0)
    out = tl.dot(scores, v, allow_tf32=True)
    dv = tl.arange(0, BLOCK_V)
    tl.store(out_ptr + t[:, None] * D_v + dv[None, :], out, mask=(t[:, None] < C) & (dv[None, :] < D_v))


@triton.jit
def ut_transform_neumann(k_ptr, beta_ptr, out_ptr, C, D_k, BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr):
    # wrong in fp32 on correlated keys: (I + A)^-1 as the Neumann series (I - A)(I + A^2)(I + A^4)(I + A^8), exact
    # for a strictly lower A of 16 rows in exact arithmetic; its terms grow far beyond the inverse and cancel
    t = tl.arange(0, BLOCK_C)
    dk = tl.arange(0, BLOCK_K)
    k = tl.load(k_ptr + t[:, None] * D_k + dk[None, :], mask=(t[:, None] < C) & (dk[None, :] < D_k), other=0.0)
    beta = tl.load(beta_ptr + t, mask=t < C, other=0.0)
    A = tl.where(t[:, None] > t[None, :], beta[:, None] * tl.dot(k, tl.trans(k), input_precision="ieee"), 0.0)
    eye = tl.where(t[:, None] == t[None, :], 1.0, 0.0)
    inverse = eye - A
    power = tl.dot(A, A, input_precision="ieee")
    for _ in range(3):
        inverse = tl.dot(inverse, eye + power, input_precision="ieee")
        power = tl.dot(power, power, input_precision="ieee")
    tl.store(out_ptr + t[:, None] * C + t[None, :], inverse * beta[None, :], mask=(t[:, None] < C) & (t[None, :] < C))


@triton.jit
def ut_transform_horner(k_ptr, beta_ptr, out_ptr, C, D_k, BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr):
    # right, and as accurate as forward substitution: the same series by Horner's rule, X <- I - A X, BLOCK_C times;
    # no power of A is formed (row i is final after i steps), but each step is a whole BLOCK_C x BLOCK_C product
    t = tl.arange(0, BLOCK_C)
    dk = tl.arange(0, BLOCK_K)
    k = tl.load(k_ptr + t[:, None] * D_k + dk[None, :], mask=(t[:, None] < C) & (dk[None, :] < D_k), other=0.0)
    beta = tl.load(beta_ptr + t, mask=t < C, other=0.0)
    A = tl.where(t[:, None] > t[None, :], beta[:, None] * tl.dot(k, tl.trans(k), input_precision="ieee"), 0.0)
    eye = tl.where(t[:, None] == t[None, :], 1.0, 0.0)
    inverse = eye
    for _ in range(BLOCK_C):
        inverse = eye - tl.dot(A, inverse, input_precision="ieee")
    tl.store(out_ptr + t[:, None] * C + t[None, :], inverse * beta[None, :], mask=(t[:, None] < C) & (t[None, :] < C))


@triton.jit
def running_sum_cast(x_ptr, out_ptr, T, H, D, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    # right: the batch index widened with tl.cast instead of .to
    i_bh, i_d = tl.program_id(0), tl.program_id(1)
    i_b, i_h = tl.cast(i_bh // H, tl.int64), i_bh % H
    cols = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    t = tl.arange(0, BLOCK_T)
    base = (i_b * T * H + i_h) * D
    carry = tl.zeros([BLOCK_D], dtype=tl.float32)
    for start in range(0, T, BLOCK_T):
        rows = start + t
        mask = (rows[:, None] < T) & (cols[None, :] < D)
        offsets = base + rows[:, None] * H * D + cols[None, :]
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
        tl.store(out_ptr + offsets, tl.cumsum(x, 0) + carry[None, :], mask=mask)
        carry += tl.sum(x, 0)


@triton.jit
def running_sum_wide_size(x_ptr, out_ptr, T, H, D, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    # right: the sequence length widened instead of the program id; i_b * T_wide is then an int64 product
    i_bh, i_d = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    T_wide = T.to(tl.int64)
    cols = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    t = tl.arange(0, BLOCK_T)
    base = (i_b * T_wide * H + i_h) * D
    carry = tl.zeros([BLOCK_D], dtype=tl.float32)
    for start in range(0, T, BLOCK_T):
        rows = start + t
        mask = (rows[:, None] < T) & (cols[None, :] < D)
        offsets = base + rows[:, None] * H * D + cols[None, :]
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
        tl.store(out_ptr + offsets, tl.cumsum(x, 0) + carry[None, :], mask=mask)
        carry += tl.sum(x, 0)


@triton.jit
def running_sum_reassigned(x_ptr, out_ptr, T, H, D, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    # right: the batch index widened by reassigning its own name, on the line after it is computed (review r35f)
    i_bh, i_d = tl.program_id(0), tl.program_id(1)
    i_b = i_bh // H
    i_b = i_b.to(tl.int64)
    i_h = i_bh % H
    cols = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    t = tl.arange(0, BLOCK_T)
    base = (i_b * T * H + i_h) * D
    carry = tl.zeros([BLOCK_D], dtype=tl.float32)
    for start in range(0, T, BLOCK_T):
        rows = start + t
        mask = (rows[:, None] < T) & (cols[None, :] < D)
        offsets = base + rows[:, None] * H * D + cols[None, :]
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
        tl.store(out_ptr + offsets, tl.cumsum(x, 0) + carry[None, :], mask=mask)
        carry += tl.sum(x, 0)


@triton.jit
def running_sum_widened_too_late(x_ptr, out_ptr, T, H, D, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    # wrong: the same reassignment, but after the offset is computed: the product is already int32
    i_bh, i_d = tl.program_id(0), tl.program_id(1)
    i_b = i_bh // H
    i_h = i_bh % H
    base = (i_b * T * H + i_h) * D
    i_b = i_b.to(tl.int64)
    cols = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    t = tl.arange(0, BLOCK_T)
    carry = tl.zeros([BLOCK_D], dtype=tl.float32)
    for start in range(0, T, BLOCK_T):
        rows = start + t
        mask = (rows[:, None] < T) & (cols[None, :] < D)
        offsets = base + rows[:, None] * H * D + cols[None, :]
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
        tl.store(out_ptr + offsets, tl.cumsum(x, 0) + carry[None, :], mask=mask)
        carry += tl.sum(x, 0)


@triton.jit
def _head_offset(i_b, i_h, T, H, D):
    return (i_b * T * H + i_h) * D


@triton.jit
def running_sum_helper_int32(x_ptr, out_ptr, T, H, D, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    # wrong: the offset computed in a @triton.jit helper from int32 indices; the column block index widened, which
    # is not the product that overflows (review r35f)
    i_bh, i_d = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    cols = i_d.to(tl.int64) * BLOCK_D + tl.arange(0, BLOCK_D)
    t = tl.arange(0, BLOCK_T)
    base = _head_offset(i_b, i_h, T, H, D)
    carry = tl.zeros([BLOCK_D], dtype=tl.float32)
    for start in range(0, T, BLOCK_T):
        rows = start + t
        mask = (rows[:, None] < T) & (cols[None, :] < D)
        offsets = base + rows[:, None] * H * D + cols[None, :]
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
        tl.store(out_ptr + offsets, tl.cumsum(x, 0) + carry[None, :], mask=mask)
        carry += tl.sum(x, 0)


@triton.jit
def running_sum_helper_int64(x_ptr, out_ptr, T, H, D, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    # right: the same helper, handed a batch index already in int64
    i_bh, i_d = tl.program_id(0), tl.program_id(1)
    i_b, i_h = (i_bh // H).to(tl.int64), i_bh % H
    cols = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    t = tl.arange(0, BLOCK_T)
    base = _head_offset(i_b, i_h, T, H, D)
    carry = tl.zeros([BLOCK_D], dtype=tl.float32)
    for start in range(0, T, BLOCK_T):
        rows = start + t
        mask = (rows[:, None] < T) & (cols[None, :] < D)
        offsets = base + rows[:, None] * H * D + cols[None, :]
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
        tl.store(out_ptr + offsets, tl.cumsum(x, 0) + carry[None, :], mask=mask)
        carry += tl.sum(x, 0)


@triton.jit
def delta_rule_chunk_reassigned(
    q_ptr, k_ptr, v_ptr, beta_ptr, o_ptr, s0_ptr, s_ptr, T, H, D_k, D_v,
    BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr,
):  # fmt: skip
    # right: puzzle 12.6 with the program id widened on its own line (i_bh = i_bh.to(tl.int64)), i_b and i_h then
    # computed from it in int64 (review r35f)
    i_bh, i_v = tl.program_id(0), tl.program_id(1)
    i_bh = i_bh.to(tl.int64)
    i_b = i_bh // H
    i_h = i_bh % H
    t = tl.arange(0, BLOCK_T)
    dk = tl.arange(0, BLOCK_K)
    dv = i_v * BLOCK_V + tl.arange(0, BLOCK_V)
    s_offsets = i_bh * D_k * D_v + dk[:, None] * D_v + dv[None, :]
    s_mask = (dk[:, None] < D_k) & (dv[None, :] < D_v)
    S = tl.load(s0_ptr + s_offsets, mask=s_mask, other=0.0)
    for start in range(0, T, BLOCK_T):
        rows = start + t
        qk_mask = (rows[:, None] < T) & (dk[None, :] < D_k)
        v_mask = (rows[:, None] < T) & (dv[None, :] < D_v)
        qk_offsets = ((i_b * T + rows[:, None]) * H + i_h) * D_k + dk[None, :]
        v_offsets = ((i_b * T + rows[:, None]) * H + i_h) * D_v + dv[None, :]
        q = tl.load(q_ptr + qk_offsets, mask=qk_mask, other=0.0)
        k = tl.load(k_ptr + qk_offsets, mask=qk_mask, other=0.0)
        v = tl.load(v_ptr + v_offsets, mask=v_mask, other=0.0)
        beta = tl.load(beta_ptr + (i_b * T + rows) * H + i_h, mask=rows < T, other=0.0)
        A = tl.where(t[:, None] > t[None, :], beta[:, None] * tl.dot(k, tl.trans(k), input_precision="ieee"), 0.0)
        inverse = tl.where(t[:, None] == t[None, :], 1.0, 0.0)
        for i in range(1, BLOCK_T):
            a_i = tl.sum(tl.where(t[:, None] == i, A, 0.0), 0)
            inverse = tl.where(t[:, None] == i, inverse - tl.sum(a_i[:, None] * inverse, 0)[None, :], inverse)
        ut = inverse * beta[None, :]
        U = tl.dot(ut, v, input_precision="ieee") - tl.dot(
            tl.dot(ut, k, input_precision="ieee"), S, input_precision="ieee"
        )
        scores = tl.where(t[:, None] >= t[None, :], tl.dot(q, tl.trans(k), input_precision="ieee"), 0.0)
        o = tl.dot(q, S, input_precision="ieee") + tl.dot(scores, U, input_precision="ieee")
        tl.store(o_ptr + v_offsets, o, mask=v_mask)
        S += tl.dot(tl.trans(k), U, input_precision="ieee")
    tl.store(s_ptr + s_offsets, S, mask=s_mask)


@triton.jit
def ut_transform_neumann_float64(k_ptr, beta_ptr, out_ptr, C, D_k, BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr):
    # the Neumann series by doubling on fp64 tiles, no precision stated (review r35b): Triton ignores the option for
    # fp64 tiles, so the lint must not call these products tf32
    t = tl.arange(0, BLOCK_C)
    dk = tl.arange(0, BLOCK_K)
    mask = (t[:, None] < C) & (dk[None, :] < D_k)
    k = tl.load(k_ptr + t[:, None] * D_k + dk[None, :], mask=mask, other=0.0).to(tl.float64)
    beta = tl.load(beta_ptr + t, mask=t < C, other=0.0).to(tl.float64)
    A = tl.where(t[:, None] > t[None, :], beta[:, None] * tl.dot(k, tl.trans(k)), 0.0)
    eye = tl.where(t[:, None] == t[None, :], 1.0, 0.0).to(tl.float64)
    inverse = eye - A
    power = tl.dot(A, A)
    for _ in range(3):
        inverse = tl.dot(inverse, eye + power)
        power = tl.dot(power, power)
    out = (inverse * beta[None, :]).to(tl.float32)
    tl.store(out_ptr + t[:, None] * C + t[None, :], out, mask=(t[:, None] < C) & (t[None, :] < C))


@triton.jit
def running_sum_block_pointers(x_ptr, out_ptr, T, H, D, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    """Right in older Triton's style (an int64 head base, tiles through block pointers): Triton 3.9 removed them."""
    i_bh, i_d = tl.program_id(0), tl.program_id(1)
    i_b, i_h = (i_bh // H).to(tl.int64), (i_bh % H).to(tl.int64)
    x_ptr += (i_b * T * H + i_h) * D
    out_ptr += (i_b * T * H + i_h) * D
    carry = tl.zeros([BLOCK_D], dtype=tl.float32)
    for start in range(0, T, BLOCK_T):
        p_x = tl.make_block_ptr(x_ptr, (T, D), (H * D, 1), (start, i_d * BLOCK_D), (BLOCK_T, BLOCK_D), (1, 0))
        p_out = tl.make_block_ptr(out_ptr, (T, D), (H * D, 1), (start, i_d * BLOCK_D), (BLOCK_T, BLOCK_D), (1, 0))
        x = tl.load(p_x, boundary_check=(0, 1))
        tl.store(p_out, tl.cumsum(x, 0) + carry[None, :], boundary_check=(0, 1))
        carry += tl.sum(x, 0)


@triton.jit
def chunk_linear_attention_outer_dot(
    q_ptr, k_ptr, v_ptr, o_ptr, s_ptr, T, D_k, D_v, BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr
):
    # wrong on a GPU: token by token, k vᵀ as a tl.dot with an inner size of 1, below the minimum a GPU compiles (K ≥ 8
    # for fp32 on NVIDIA); the numbers are right, and Triton's bare interpreter runs it
    dk = tl.arange(0, BLOCK_K)
    dv = tl.arange(0, BLOCK_V)
    S = tl.zeros([BLOCK_K, BLOCK_V], dtype=tl.float32)
    for t in range(0, T):
        q = tl.load(q_ptr + t * D_k + dk, mask=dk < D_k, other=0.0)
        k = tl.load(k_ptr + t * D_k + dk, mask=dk < D_k, other=0.0)
        v = tl.load(v_ptr + t * D_v + dv, mask=dv < D_v, other=0.0)
        S += tl.dot(k[:, None], v[None, :], input_precision="ieee")
        tl.store(o_ptr + t * D_v + dv, tl.sum(q[:, None] * S, 0), mask=dv < D_v)
    tl.store(s_ptr + dk[:, None] * D_v + dv[None, :], S, mask=(dk[:, None] < D_k) & (dv[None, :] < D_v))


@triton.jit
def running_sum_promoted(x_ptr, out_ptr, T, H, D, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    # right: the batch index made int64 by type promotion (int32 + an int64 zero is int64), with no conversion call
    i_bh, i_d = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H + tl.zeros([], dtype=tl.int64), i_bh % H
    cols = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    t = tl.arange(0, BLOCK_T)
    base = (i_b * T * H + i_h) * D
    carry = tl.zeros([BLOCK_D], dtype=tl.float32)
    for start in range(0, T, BLOCK_T):
        rows = start + t
        mask = (rows[:, None] < T) & (cols[None, :] < D)
        offsets = base + rows[:, None] * H * D + cols[None, :]
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
        tl.store(out_ptr + offsets, tl.cumsum(x, 0) + carry[None, :], mask=mask)
        carry += tl.sum(x, 0)


@triton.jit
def running_sum_promoted_by_name(x_ptr, out_ptr, T, H, D, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    # right: the same promotion through a named int64 zero made with tl.full, the dtype passed by position
    i_bh, i_d = tl.program_id(0), tl.program_id(1)
    zero = tl.full([], 0, tl.int64)
    i_b, i_h = i_bh // H, i_bh % H
    cols = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    t = tl.arange(0, BLOCK_T)
    base = ((zero + i_b) * T * H + i_h) * D
    carry = tl.zeros([BLOCK_D], dtype=tl.float32)
    for start in range(0, T, BLOCK_T):
        rows = start + t
        mask = (rows[:, None] < T) & (cols[None, :] < D)
        offsets = base + rows[:, None] * H * D + cols[None, :]
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
        tl.store(out_ptr + offsets, tl.cumsum(x, 0) + carry[None, :], mask=mask)
        carry += tl.sum(x, 0)


@triton.jit
def running_sum_promoted_too_late(x_ptr, out_ptr, T, H, D, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    # wrong: the int64 zero is added after the int32 product, which has already overflowed
    i_bh, i_d = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    cols = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    t = tl.arange(0, BLOCK_T)
    base = (i_b * T * H + i_h) * D + tl.zeros([], dtype=tl.int64)
    carry = tl.zeros([BLOCK_D], dtype=tl.float32)
    for start in range(0, T, BLOCK_T):
        rows = start + t
        mask = (rows[:, None] < T) & (cols[None, :] < D)
        offsets = base + rows[:, None] * H * D + cols[None, :]
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
        tl.store(out_ptr + offsets, tl.cumsum(x, 0) + carry[None, :], mask=mask)
        carry += tl.sum(x, 0)

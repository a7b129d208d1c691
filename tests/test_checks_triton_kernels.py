"""Chapter 10's puzzle checks accept correct kernels, reject plausible wrong ones and report unsolved stubs."""

import pytest

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from ttr_edu.checks import CheckFailed
from ttr_edu.checks import triton_kernels as checks  # noqa: E402

if type(triton.jit(lambda: None)).__name__ != "InterpretedFunction":
    pytest.skip("the puzzles run in Triton's interpreter (TRITON_INTERPRET=1)", allow_module_level=True)


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
def causal_chunk(q_ptr, k_ptr, v_ptr, out_ptr, C, D_k, D_v,
                 BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr, STRICT: tl.constexpr = False):
    t = tl.arange(0, BLOCK_C)
    dk = tl.arange(0, BLOCK_K)
    dv = tl.arange(0, BLOCK_V)
    qk_mask = (t[:, None] < C) & (dk[None, :] < D_k)
    v_mask = (t[:, None] < C) & (dv[None, :] < D_v)
    q = tl.load(q_ptr + t[:, None] * D_k + dk[None, :], mask=qk_mask, other=0.0)
    k = tl.load(k_ptr + t[:, None] * D_k + dk[None, :], mask=qk_mask, other=0.0)
    v = tl.load(v_ptr + t[:, None] * D_v + dv[None, :], mask=v_mask, other=0.0)
    scores = tl.dot(q, tl.trans(k), input_precision="ieee")
    if STRICT:
        scores = tl.where(t[:, None] > t[None, :], scores, 0.0)
    else:
        scores = tl.where(t[:, None] >= t[None, :], scores, 0.0)
    tl.store(out_ptr + t[:, None] * D_v + dv[None, :], tl.dot(scores, v, input_precision="ieee"), mask=v_mask)


@triton.jit
def chunk_linear_attention(q_ptr, k_ptr, v_ptr, o_ptr, s_ptr, T, D_k, D_v, BLOCK_T: tl.constexpr,
                           BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr, STATE_FIRST: tl.constexpr = False):
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
def ut_transform(k_ptr, beta_ptr, out_ptr, C, D_k, BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr,
                 FORGET_BETA: tl.constexpr = False):
    t = tl.arange(0, BLOCK_C)
    dk = tl.arange(0, BLOCK_K)
    k = tl.load(k_ptr + t[:, None] * D_k + dk[None, :], mask=(t[:, None] < C) & (dk[None, :] < D_k), other=0.0)
    beta = tl.load(beta_ptr + t, mask=t < C, other=0.0)
    A = tl.where(t[:, None] > t[None, :], beta[:, None] * tl.dot(k, tl.trans(k), input_precision="ieee"), 0.0)
    inverse = tl.where(t[:, None] == t[None, :], 1.0, 0.0)
    for i in range(1, BLOCK_C):
        a_i = tl.sum(tl.where(t[:, None] == i, A, 0.0), 0)
        inverse = tl.where(t[:, None] == i, inverse - tl.sum(a_i[:, None] * inverse, 0)[None, :], inverse)
    if not FORGET_BETA:
        inverse = inverse * beta[None, :]
    tl.store(out_ptr + t[:, None] * C + t[None, :], inverse, mask=(t[:, None] < C) & (t[None, :] < C))


def test_solutions_pass(capsys):
    assert checks.check_scale_tile(scale_tile)
    assert checks.check_causal_chunk(causal_chunk)
    assert checks.check_chunk_linear_attention(chunk_linear_attention)
    assert checks.check_ut_transform(ut_transform)
    assert capsys.readouterr().out.count("PASS") == 4


class Bound:
    """A kernel with some constexpr flags fixed, launched like the kernel itself."""

    def __init__(self, kernel, **flags):
        self.kernel, self.flags = kernel, flags

    def __getitem__(self, grid):
        return lambda *args, **constants: self.kernel[grid](*args, **constants, **self.flags)


Bound.__name__ = "InterpretedFunction"  # the checks refuse compiled kernels by this name


@pytest.mark.parametrize("wrong", [scale_tile_store_unmasked, scale_tile_row_stride_block])
def test_write_outside_the_output_is_reported(wrong):
    with pytest.raises(CheckFailed, match="wrote .* outside `out`"):
        checks.check_scale_tile(wrong)


@pytest.mark.parametrize(
    "check, wrong",
    [
        (checks.check_scale_tile, scale_tile_first_rows_only),
        (checks.check_causal_chunk, Bound(causal_chunk, STRICT=True)),
        (checks.check_chunk_linear_attention, Bound(chunk_linear_attention, STATE_FIRST=True)),
        (checks.check_ut_transform, Bound(ut_transform, FORGET_BETA=True)),
    ],
    ids=["rows not offset by program", "strict mask", "state updated first", "no diag(beta)"],
)
def test_wrong_kernels_show_the_first_wrong_element(check, wrong):
    with pytest.raises(CheckFailed, match="first wrong element"):
        check(wrong)


def test_unsolved_kernel_is_reported_not_raised(capsys):
    @triton.jit
    def stub(x_ptr, out_ptr, T, D, scale, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
        raise NotImplementedError()

    assert checks.check_scale_tile(stub) is False
    assert "not attempted yet" in capsys.readouterr().out

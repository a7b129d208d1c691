"""The Triton kernels against the reference ops, under the interpreter on CPU (or compiled on a GPU).

Sizes are small: the interpreter runs every tile operation in NumPy, one program at a time.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from tests.helpers import fla_inputs

triton = pytest.importorskip("triton")

from ttr_edu import kernels  # noqa: E402
from ttr_edu._internal.validation import finite_checks  # noqa: E402
from ttr_edu.kernels import _dispatch, _triton_kernels  # noqa: E402
from ttr_edu.ops.delta_rule import delta_rule_chunk, delta_rule_recurrent  # noqa: E402
from ttr_edu.ops.gated_delta_rule import gated_delta_rule_chunk, gated_delta_rule_recurrent  # noqa: E402
from ttr_edu.ops.linear_attention import linear_attention_chunk, linear_attention_recurrent  # noqa: E402

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
if DEVICE.type == "cpu" and not kernels.interpreter_active():
    pytest.skip("CPU tensors need TRITON_INTERPRET=1 before triton is imported", allow_module_level=True)

TOL = 1e-4  # relative error ‖a − b‖ / ‖b‖ in fp32: a kernel's reordered sums, not its maths


def rel_err(a, b):
    return (torch.linalg.vector_norm((a - b).double()) / torch.linalg.vector_norm(b.double())).item()


def make_inputs(B, T, H, d_k, d_v, seed=0, dtype=torch.float32, with_state=True):
    """Unit keys and β ∈ (0, 1) (β‖k‖² ∈ (0, 1): the delta rule stays stable), g ∈ (−0.2, 0], a random S_0."""
    inputs = fla_inputs(
        B,
        T,
        H,
        d_k,
        d_v,
        dtype=dtype,
        seed=seed,
        beta=(0.0, 1.0),
        max_decay=0.2,
        initial_state=with_state,
        device=DEVICE,
    )
    inputs.setdefault("initial_state", None)
    return inputs


# op name -> (kernel, reference chunk op, per-token recurrence, the inputs it takes)
OPS = {
    "linear_attention": (kernels.linear_attention_chunk, linear_attention_chunk, linear_attention_recurrent, "qkv"),
    "delta_rule": (kernels.delta_rule_chunk, delta_rule_chunk, delta_rule_recurrent, "qkvb"),
    "gated_delta_rule": (kernels.gated_delta_rule_chunk, gated_delta_rule_chunk, gated_delta_rule_recurrent, "qkvgb"),
}


def positional(name, x):
    """The positional tensors of op ``name`` in its order: (q, k, v), (q, k, v, beta) or (q, k, v, g, beta)."""
    order = {"qkv": ("q", "k", "v"), "qkvb": ("q", "k", "v", "beta"), "qkvgb": ("q", "k", "v", "g", "beta")}
    return [x[n] for n in order[OPS[name][3]]]


def call(fn, name, x, **kwargs):
    return fn(*positional(name, x), initial_state=x["initial_state"], output_final_state=True, **kwargs)


SHAPES = [  # (B, T, H, D_k, D_v, chunk_size)
    pytest.param(1, 1, 1, 16, 16, 16, id="T=1"),
    pytest.param(2, 45, 2, 16, 24, 16, id="tail,H=2,Dk!=Dv"),
    pytest.param(1, 40, 3, 8, 40, 32, id="Dk<16,Dv=40"),
    pytest.param(1, 70, 1, 32, 16, 64, id="chunk64,tail"),
]


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("B, T, H, d_k, d_v, chunk_size", SHAPES)
def test_kernel_matches_reference_and_recurrence(name, B, T, H, d_k, d_v, chunk_size):
    kernel, reference, recurrence, _ = OPS[name]
    x = make_inputs(B, T, H, d_k, d_v)
    o, S = call(kernel, name, x, chunk_size=chunk_size)
    o_ref, S_ref = call(reference, name, x, chunk_size=chunk_size)
    o_rec, S_rec = call(recurrence, name, x)
    assert o.dtype == torch.float32 and S.dtype == torch.float32
    assert rel_err(o, o_ref) <= TOL and rel_err(S, S_ref) <= TOL
    assert rel_err(o, o_rec) <= TOL and rel_err(S, S_rec) <= TOL


@pytest.mark.parametrize("name", OPS)
def test_large_heads_dk_dv_128(name):
    kernel, reference, _, _ = OPS[name]
    x = make_inputs(1, 20, 1, 128, 128, seed=3)
    o, S = call(kernel, name, x, chunk_size=16)
    o_ref, S_ref = call(reference, name, x, chunk_size=16)
    assert rel_err(o, o_ref) <= TOL and rel_err(S, S_ref) <= TOL


@pytest.mark.parametrize("name", OPS)
def test_d_k_256_the_documented_limit(name):
    kernel, reference, _, _ = OPS[name]
    x = make_inputs(1, 5, 1, 256, 16, seed=11)
    o, S = call(kernel, name, x, chunk_size=16)
    o_ref, S_ref = call(reference, name, x, chunk_size=16)
    assert rel_err(o, o_ref) <= TOL and rel_err(S, S_ref) <= TOL


def test_normalised_linear_attention_carries_z():
    x = make_inputs(2, 37, 2, 16, 8, seed=1)
    q, k, v = x["q"].abs(), x["k"].abs(), x["v"]  # positive features keep the normaliser away from zero
    state = (x["initial_state"], torch.rand(2, 2, 16, device=DEVICE))
    o, (S, z) = kernels.linear_attention_chunk(
        q, k, v, normalize=True, initial_state=state, output_final_state=True, chunk_size=16
    )
    o_ref, (S_ref, z_ref) = linear_attention_chunk(
        q, k, v, normalize=True, initial_state=state, output_final_state=True, chunk_size=16
    )
    assert rel_err(o, o_ref) <= TOL and rel_err(S, S_ref) <= TOL and rel_err(z, z_ref) <= TOL


@pytest.mark.parametrize("name", OPS)
def test_state_handed_over_equals_one_run(name):
    kernel = OPS[name][0]
    x = make_inputs(1, 50, 2, 16, 16, seed=2)
    o_whole, S_whole = call(kernel, name, x, chunk_size=16)
    first = {n: t if n == "initial_state" else t[:, :23] for n, t in x.items()}  # T is dim 1 of the rest
    second = {n: t if n == "initial_state" else t[:, 23:] for n, t in x.items()}
    o1, S1 = call(kernel, name, first, chunk_size=16)
    o2, S2 = call(kernel, name, {**second, "initial_state": S1}, chunk_size=16)
    assert rel_err(torch.cat([o1, o2], dim=1), o_whole) <= TOL and rel_err(S2, S_whole) <= TOL


@pytest.mark.parametrize("name", OPS)
def test_gradients_match_reference(name):
    kernel, reference, _, _ = OPS[name]
    x = make_inputs(1, 21, 2, 16, 8, seed=4)

    def grads(fn):
        leaves = {n: None if t is None else t.clone().requires_grad_() for n, t in x.items()}
        o, S = call(fn, name, leaves, chunk_size=16)
        (o.sin().sum() + (S * S).sum()).backward()
        return {n: t.grad for n, t in leaves.items() if t is not None and t.grad is not None}

    got, want = grads(kernel), grads(reference)
    assert got.keys() == want.keys() and len(want) >= 4
    for n in want:
        assert rel_err(got[n], want[n]) <= TOL, n


@pytest.mark.parametrize("name", OPS)
def test_second_derivatives_match_reference(name):
    """create_graph=True: the recomputed gradients are differentiable again (they used to be constants, so a
    gradient penalty got a second derivative of 33 where the reference gives 3.4e5)."""
    kernel, reference, _, _ = OPS[name]
    x = make_inputs(1, 20, 1, 16, 16, seed=10)

    def second(fn):
        q = (2 * x["q"]).requires_grad_()  # a leaf: the derivative is taken with respect to it
        o, _ = call(fn, name, {**x, "q": q}, chunk_size=16)
        (dq,) = torch.autograd.grad(o.square().sum(), q, create_graph=True)
        (ddq,) = torch.autograd.grad(dq.square().sum() + q.square().sum(), q)
        return ddq

    assert rel_err(second(kernel), second(reference)) <= TOL


def _poisoned_empty(real_empty):
    def empty(*size, **kwargs):
        out = real_empty(*size, **kwargs)
        return out.fill_(math.nan) if out.is_floating_point() else out

    return empty


@pytest.mark.parametrize("name", OPS)
def test_every_output_element_is_written(name, monkeypatch):
    """Outputs are allocated with torch.empty: poisoned with NaN, an element the kernel skips stays NaN."""
    monkeypatch.setattr(torch, "empty", _poisoned_empty(torch.empty))
    x = make_inputs(2, 45, 2, 8, 24, seed=5)
    o, S = call(OPS[name][0], name, x, chunk_size=16)
    assert torch.isfinite(o).all() and torch.isfinite(S).all()
    o_ref, _ = call(OPS[name][1], name, x, chunk_size=16)
    assert rel_err(o, o_ref) <= TOL


def test_nan_poison_catches_a_kernel_that_skips_a_tile(monkeypatch):
    """The poison test can fail: a grid one value tile short leaves NaN behind."""
    monkeypatch.setattr(torch, "empty", _poisoned_empty(torch.empty))
    B, T, H, d_k, d_v = 1, 20, 1, 16, 32
    x = make_inputs(B, T, H, d_k, d_v, with_state=False)
    o = torch.empty(B, T, H, d_v, device=DEVICE)
    s_final = torch.empty(B, H, d_k, d_v, device=DEVICE)
    _triton_kernels.linear_attention_fwd_kernel[(B * H, 1)](  # two 16-wide value tiles are needed; launch one
        x["q"],
        x["k"],
        x["v"],
        o,
        s_final,
        s_final,
        s_final,
        0.25,
        T,
        H=H,
        D_K=d_k,
        D_V=d_v,
        BT=16,
        BK=16,
        BV=16,
        HAS_S0=False,
        STORE_FINAL=True,
        PRECISION="ieee",
        IS_VARLEN=False,
    )
    assert torch.isfinite(o[..., :16]).all() and torch.isnan(o[..., 16:]).all()


class _GridRecorder:
    """Stands in for a Triton kernel: records the launch grid and runs nothing."""

    def __init__(self):
        self.grids = []

    def __getitem__(self, grid):
        self.grids.append(grid)
        return lambda *args, **kwargs: None


@pytest.mark.parametrize("name", OPS)
def test_many_heads_go_on_the_long_grid_axis(name, monkeypatch):
    """CUDA launches at most 65 535 programs on grid axes 1 and 2: B * H must sit on axis 0."""
    recorder = _GridRecorder()
    kernel_name = "linear_attention_fwd_kernel" if name == "linear_attention" else "delta_rule_fwd_kernel"
    monkeypatch.setattr(_triton_kernels, kernel_name, recorder)
    monkeypatch.setattr(_dispatch, "interpreter_active", lambda: True)  # it looks at the kernel object
    x = make_inputs(70_000, 1, 1, 4, 4, with_state=False)
    with finite_checks(False):  # the recorder never writes o, so its uninitialised memory may hold NaN
        call(OPS[name][0], name, x, chunk_size=16)
    (grid,) = recorder.grids
    assert grid[0] == 70_000 and all(n <= 65_535 for n in grid[1:])


@pytest.mark.parametrize("name", OPS)
def test_non_contiguous_inputs_are_read_correctly(name):
    kernel = OPS[name][0]
    x = make_inputs(1, 30, 2, 16, 16, seed=6)
    # (B, H, T, D) storage seen through a transpose: same values, other strides
    strided = {
        n: t if t is None or n == "initial_state" else t.transpose(1, 2).contiguous().transpose(1, 2)
        for n, t in x.items()
    }
    assert not strided["q"].is_contiguous()
    o, S = call(kernel, name, strided, chunk_size=16)
    o_ref, S_ref = call(kernel, name, x, chunk_size=16)
    assert torch.equal(o, o_ref) and torch.equal(S, S_ref)


@pytest.mark.parametrize("name", OPS)
def test_answer_does_not_depend_on_chunk_size(name):
    kernel = OPS[name][0]
    x = make_inputs(1, 40, 1, 16, 16, seed=7)
    o16, S16 = call(kernel, name, x, chunk_size=16)
    o32, S32 = call(kernel, name, x, chunk_size=32)
    assert rel_err(o16, o32) <= TOL and rel_err(S16, S32) <= TOL


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
def test_dtypes_follow_the_reference_contract(dtype):
    x = make_inputs(1, 20, 1, 16, 16, seed=8, dtype=dtype)
    o, S = call(kernels.delta_rule_chunk, "delta_rule", x, chunk_size=16)
    o_ref, S_ref = call(delta_rule_chunk, "delta_rule", x, chunk_size=16)
    assert o.dtype == o_ref.dtype == dtype and S.dtype == S_ref.dtype
    assert rel_err(o, o_ref) <= (2e-2 if dtype == torch.bfloat16 else TOL)


# ----------------------------------------------------------------------------------------------------------------
# Bad input: the kernel and the reference op raise the same error for the same mistake.


def _mistakes():
    def shorter_k(x):
        x["k"] = x["k"][:, :5]

    def wrong_beta(x):
        x["beta"] = x["beta"][..., None]

    def wrong_g(x):
        x["g"] = x["g"][:, :, :1]

    def wrong_state(x):
        x["initial_state"] = x["initial_state"][..., :3]

    def integer_q(x):
        x["q"] = x["q"].long()

    def double_v(x):
        x["v"] = x["v"].double()

    def meta_v(x):
        x["v"] = x["v"].to("meta")

    return {
        "k shorter in T": (shorter_k, {}),
        "beta (B, T, H, 1)": (wrong_beta, {}),
        "g (B, T, 1)": (wrong_g, {}),
        "initial_state D_v": (wrong_state, {}),
        "integer q": (integer_q, {}),
        "v of another dtype": (double_v, {}),
        "v on another device": (meta_v, {}),
        "chunk_size 0": (None, {"chunk_size": 0}),
        "chunk_size 1.5": (None, {"chunk_size": 1.5}),
        "negative scale": (None, {"scale": -1.0}),
    }


MISTAKES = _mistakes()


def _error_of(fn, *args, **kwargs):
    with pytest.raises((TypeError, ValueError)) as info:
        fn(*args, **kwargs)
    return type(info.value), str(info.value)


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("mistake", MISTAKES)
def test_kernel_and_reference_reject_the_same_mistake_alike(name, mistake):
    edit, kwargs = MISTAKES[mistake]
    takes = OPS[name][3]
    if mistake == "g (B, T, 1)" and "g" not in takes or mistake == "beta (B, T, H, 1)" and "b" not in takes:
        pytest.skip("the op has no such argument")
    x = make_inputs(1, 8, 2, 4, 6)
    if edit is not None:
        edit(x)
    kernel, reference = OPS[name][:2]
    options = {"chunk_size": 16, **kwargs}
    assert _error_of(call, kernel, name, x, **options) == _error_of(call, reference, name, x, **options)


def test_normalised_state_must_be_a_pair_in_both():
    x = make_inputs(1, 8, 1, 4, 4)
    args = (x["q"], x["k"], x["v"])
    kw = {"normalize": True, "initial_state": x["initial_state"], "chunk_size": 16}
    assert _error_of(kernels.linear_attention_chunk, *args, **kw) == _error_of(linear_attention_chunk, *args, **kw)


def test_unstable_beta_warns_like_the_reference():
    x = make_inputs(1, 8, 1, 4, 4)
    x["beta"] = x["beta"] + 3.0  # β‖k‖² > 2
    with pytest.warns(RuntimeWarning, match="beta"):
        call(kernels.delta_rule_chunk, "delta_rule", x, chunk_size=16)
    with pytest.raises(ValueError, match="beta"):
        call(kernels.delta_rule_chunk, "delta_rule", x, chunk_size=16, check_stability="raise")


@pytest.mark.parametrize("chunk_size", [8, 24, 256])
def test_kernel_tile_limits_are_explained(chunk_size):
    x = make_inputs(1, 8, 1, 4, 4)
    with pytest.raises(ValueError, match="chunk_size: the kernels need a power of two from 16"):
        call(kernels.delta_rule_chunk, "delta_rule", x, chunk_size=chunk_size)


def test_too_large_d_k_is_explained():
    x = make_inputs(1, 2, 1, 300, 4, with_state=False)
    with pytest.raises(ValueError, match="D_k <= 256"):
        call(kernels.linear_attention_chunk, "linear_attention", x, chunk_size=16)


@pytest.mark.parametrize("normalize, d_v", [(False, 2**10), (True, 2**10 - 1)])
def test_slices_beyond_32_bit_offsets_are_refused(normalize, d_v):
    """T * H * D >= 2**30 would overflow the kernels' 32-bit offsets: refused before anything is allocated (the
    inputs are expanded views of one number). The normaliser's column of ones counts in D_v."""
    T, H = 2**19, 2**1
    one = torch.ones(1, 1, 1, 1, device=DEVICE)
    q = k = one.expand(1, T, H, 16)
    v = one.expand(1, T, H, d_v)
    with pytest.raises(ValueError, match=r"q: .*32-bit offsets.*T = 524288, H = 2, max\(D_k, D_v\) = 1024"):
        kernels.linear_attention_chunk(q, k, v, normalize=normalize, chunk_size=16)


def test_cpu_without_interpreter_says_how_to_enable_it(monkeypatch):
    monkeypatch.setattr(_dispatch, "interpreter_active", lambda: False)
    x = {n: None if t is None else t.cpu() for n, t in make_inputs(1, 4, 1, 4, 4).items()}
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1.*ttr_edu.ops.delta_rule_chunk"):
        call(kernels.delta_rule_chunk, "delta_rule", x, chunk_size=16)


def test_other_devices_point_to_the_reference():
    x = {n: None if t is None else t.to("meta") for n, t in make_inputs(1, 4, 1, 4, 4).items()}
    with pytest.raises(ValueError, match="^q: .*ttr_edu.ops.linear_attention_chunk"):
        call(kernels.linear_attention_chunk, "linear_attention", x, chunk_size=16)


def test_normalised_bf16_divides_before_rounding():
    """Numerator and normaliser stay fp32 until the division, as in the reference: one bf16 rounding at the end."""
    x = make_inputs(1, 40, 1, 16, 8, seed=9, dtype=torch.bfloat16)
    q, k, v = x["q"].abs(), x["k"].abs(), x["v"]
    o, _ = kernels.linear_attention_chunk(q, k, v, normalize=True, chunk_size=16)
    o_ref, _ = linear_attention_chunk(q, k, v, normalize=True, chunk_size=16)
    # in the interpreter the kernel's fp32 arithmetic matches the reference's, so the bf16 results agree (measured: 0);
    # rounding numerator and normaliser to bf16 before dividing would put ~2e-3 here
    assert o.dtype == torch.bfloat16 and rel_err(o, o_ref) <= (1e-3 if DEVICE.type == "cpu" else 1e-2)


def test_gated_kernel_refuses_a_full_reset_rather_than_returning_nan():
    """g = -inf: the reference op is exact, the kernel (running-sum decays) would give NaN, so it refuses."""
    from ttr_edu import kernels, ops

    torch.manual_seed(0)
    q, k, v = torch.randn(3, 1, 20, 1, 16)
    k = torch.nn.functional.normalize(k, dim=-1)
    beta = torch.rand(1, 20, 1)
    g = torch.full((1, 20, 1), -0.1)
    g[0, 7, 0] = float("-inf")
    assert torch.isfinite(ops.gated_delta_rule_chunk(q, k, v, g, beta, chunk_size=16)[0]).all()
    with pytest.raises(ValueError, match=r"g: expected a log decay in \(-inf, 0\] \(finite\)"):
        kernels.gated_delta_rule_chunk(q, k, v, g, beta, chunk_size=16)


@pytest.mark.slow  # tens of seconds in the Triton interpreter
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gated_kernel_final_state_is_exact_under_strong_decay(seed):
    """g = logsigmoid(x) / 0.1 (strong decays, where a total decay summed twice drifts): the chunk's total decay comes
    from the same running sum as the per-token decays, so the kernel's fp32 final state is as close to the fp64
    recurrence as the reference op's (~5e-8).
    Taking the total from a separate tl.sum(g) gave 3e-6 here (4e-5 at other sizes)."""
    gen = torch.Generator().manual_seed(seed)
    B, T, H, D = 1, 256, 2, 32
    rand = lambda *shape: torch.randn(*shape, generator=gen, dtype=torch.float64)
    q, v = rand(B, T, H, D), rand(B, T, H, D)
    k = F.normalize(rand(B, T, H, D), dim=-1)
    beta = torch.rand(B, T, H, generator=gen, dtype=torch.float64)
    g = F.logsigmoid(rand(B, T, H)) / 0.1
    s0 = rand(B, H, D, D)
    _, S_64 = gated_delta_rule_recurrent(q, k, v, g, beta, initial_state=s0, output_final_state=True)
    as_kernel_input = lambda x: x.to(DEVICE, torch.float32)
    _, S = kernels.gated_delta_rule_chunk(
        *map(as_kernel_input, (q, k, v, g, beta)), initial_state=as_kernel_input(s0), output_final_state=True
    )
    assert rel_err(S.cpu(), S_64) <= 1e-6


VARLEN_CU = [0, 7, 30, 31, 50, 83]  # a one-token sequence, chunks cut mid-sequence


@pytest.mark.parametrize("name", list(OPS))
def test_varlen_kernel_equals_reference_and_per_sequence_loop(name):
    """cu_seqlens: one program per (sequence, head) reads its own bos:eos range; the result equals the reference
    op's varlen result and the kernel run on each sequence alone."""
    kernel, reference, _, _ = OPS[name]
    N, T = len(VARLEN_CU) - 1, VARLEN_CU[-1]
    x = make_inputs(1, T, 2, 16, 8, with_state=False)
    S0 = make_inputs(N, 1, 2, 16, 8, seed=1)["initial_state"]
    cu = torch.tensor(VARLEN_CU, device=DEVICE)
    o, S = kernel(*positional(name, x), initial_state=S0, output_final_state=True, chunk_size=16, cu_seqlens=cu)
    o_ref, S_ref = reference(
        *positional(name, x), initial_state=S0, output_final_state=True, chunk_size=16, cu_seqlens=cu
    )
    assert S.shape == (N, 2, 16, 8)
    assert rel_err(o, o_ref) < TOL and rel_err(S, S_ref) < TOL
    for n, (a, b) in enumerate(zip(VARLEN_CU, VARLEN_CU[1:])):
        o_n, S_n = kernel(
            *(t[:, a:b] for t in positional(name, x)),
            initial_state=S0[n : n + 1],
            output_final_state=True,
            chunk_size=16,
        )
        assert rel_err(o[:, a:b], o_n) < TOL and rel_err(S[n : n + 1], S_n) < TOL


@pytest.mark.parametrize("name", list(OPS))
def test_varlen_kernel_carries_no_state_across_a_boundary(name):
    kernel = OPS[name][0]
    x = make_inputs(1, VARLEN_CU[-1], 2, 16, 8, with_state=False)
    cu = torch.tensor(VARLEN_CU, device=DEVICE)
    o, S = kernel(*positional(name, x), output_final_state=True, chunk_size=16, cu_seqlens=cu)
    x["v"][:, VARLEN_CU[2] - 1] = 1e12  # the last token of sequence 1
    o_p, S_p = kernel(*positional(name, x), output_final_state=True, chunk_size=16, cu_seqlens=cu)
    assert not torch.equal(o_p[:, VARLEN_CU[1] : VARLEN_CU[2]], o[:, VARLEN_CU[1] : VARLEN_CU[2]])
    assert torch.equal(o_p[:, VARLEN_CU[2] :], o[:, VARLEN_CU[2] :]) and torch.equal(S_p[2:], S[2:])


def test_varlen_normalised_linear_attention_carries_z_per_sequence():
    N, T = len(VARLEN_CU) - 1, VARLEN_CU[-1]
    x = make_inputs(1, T, 2, 16, 8, with_state=False)
    q, k, v = x["q"], x["k"].abs(), x["v"]
    state = (make_inputs(N, 1, 2, 16, 8)["initial_state"], torch.rand(N, 2, 16, device=DEVICE))
    cu = torch.tensor(VARLEN_CU, device=DEVICE)
    o, (S, z) = kernels.linear_attention_chunk(
        q, k, v, normalize=True, initial_state=state, output_final_state=True, chunk_size=16, cu_seqlens=cu
    )
    o_ref, (S_ref, z_ref) = linear_attention_chunk(
        q, k, v, normalize=True, initial_state=state, output_final_state=True, chunk_size=16, cu_seqlens=cu
    )
    assert z.shape == (N, 2, 16)
    assert rel_err(o, o_ref) < TOL and rel_err(S, S_ref) < TOL and rel_err(z, z_ref) < TOL


@pytest.mark.parametrize("name", list(OPS))
def test_varlen_kernel_gradients_match_reference(name):
    kernel, reference, _, _ = OPS[name]
    x = make_inputs(1, VARLEN_CU[-1], 2, 16, 8, with_state=False)
    cu = torch.tensor(VARLEN_CU, device=DEVICE)
    grads = []
    for fn in (kernel, reference):
        q = x["q"].clone().requires_grad_()
        o, _ = fn(q, *positional(name, x)[1:], chunk_size=16, cu_seqlens=cu)
        grads.append(torch.autograd.grad(o.square().sum(), q)[0])
    assert rel_err(grads[0], grads[1]) < TOL


@pytest.mark.parametrize("name", list(OPS))
def test_varlen_kernel_refuses_bad_offsets_like_the_reference(name):
    kernel, reference = OPS[name][:2]
    x = make_inputs(1, VARLEN_CU[-1], 2, 16, 8, with_state=False)
    for offsets, error in (
        (torch.tensor([0, 30, 7, 83]), ValueError),
        (torch.tensor([0, 7, 80]), ValueError),
        (torch.tensor([0.0, 83.0]), TypeError),
        (torch.tensor([[0, 83]]), ValueError),
    ):
        messages = []
        for fn in (kernel, reference):
            with pytest.raises(error, match="cu_seqlens: expected") as caught:
                fn(*positional(name, x), chunk_size=16, cu_seqlens=offsets.to(DEVICE))
            messages.append(str(caught.value))
        assert messages[0] == messages[1]
    with pytest.raises(ValueError, match=r"initial_state: expected shape .*B is 1, expected 5 \(set by cu_seqlens"):
        kernel(
            *positional(name, x),
            initial_state=x["v"].new_zeros(1, 2, 16, 8),
            chunk_size=16,
            cu_seqlens=torch.tensor(VARLEN_CU, device=DEVICE),
        )

"""Variable-length batches (fla's ``cu_seqlens``): every recurrent and chunk op equals a loop over the sequences,
no state crosses a boundary, and bad offsets are refused by name."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import relative_error
from ttr_edu import ops
from ttr_edu.ops._varlen import length_groups

CU = [0, 7, 30, 31, 50, 83]  # lengths 7, 23, 1, 19, 33: a one-token sequence, chunks cut mid-sequence
H, D_K, D_V = 2, 8, 5


def make_packed(dtype=torch.float64, seed=0, cu=CU):
    gen = torch.Generator().manual_seed(seed)
    T, N = cu[-1], len(cu) - 1
    rand = lambda *shape: torch.randn(*shape, generator=gen, dtype=torch.float64)
    x = {
        "q": rand(1, T, H, D_K),
        "k": F.normalize(rand(1, T, H, D_K), dim=-1),
        "v": rand(1, T, H, D_V),
        "g": -torch.rand(1, T, H, generator=gen, dtype=torch.float64),
        "gk": F.logsigmoid(rand(1, T, H, D_K)),
        "beta": torch.rand(1, T, H, generator=gen, dtype=torch.float64),
        "S0": rand(N, H, D_K, D_V),
        "z0": rand(N, H, D_K).abs(),
    }
    return {name: t.to(dtype) for name, t in x.items()}


# layer -> (positional inputs, recurrent form, chunk form, extra options)
LAYERS = {
    "linear_attention": (("q", "k", "v"), ops.linear_attention_recurrent, ops.linear_attention_chunk, {}),
    "linear_attention_normalized": (
        ("q", "k", "v"),
        ops.linear_attention_recurrent,
        ops.linear_attention_chunk,
        {"normalize": True},
    ),
    "delta_rule": (("q", "k", "v", "beta"), ops.delta_rule_recurrent, ops.delta_rule_chunk, {}),
    "gated_linear_attention": (
        ("q", "k", "v", "g"),
        ops.gated_linear_attention_recurrent,
        ops.gated_linear_attention_chunk,
        {},
    ),
    "gated_delta_rule": (
        ("q", "k", "v", "g", "beta"),
        ops.gated_delta_rule_recurrent,
        ops.gated_delta_rule_chunk,
        {},
    ),
    "gla": (("q", "k", "v", "gk"), ops.gla_recurrent, ops.gla_chunk, {}),
}


def state_of(layer, x, rows):
    S = x["S0"][rows]
    return (S, x["z0"][rows]) if layer == "linear_attention_normalized" else S


def per_sequence_loop(layer, x, cu=CU):
    """The reference: the recurrent form on each sequence alone (B = 1), outputs concatenated, states stacked."""
    names, recurrent, _, options = LAYERS[layer]
    outputs, states = [], []
    for n, (a, b) in enumerate(zip(cu, cu[1:])):
        o, S = recurrent(
            *(x[m][:, a:b] for m in names),
            initial_state=state_of(layer, x, slice(n, n + 1)),
            output_final_state=True,
            **options,
        )
        outputs.append(o)
        states.append(S)
    if isinstance(states[0], tuple):
        return torch.cat(outputs, 1), tuple(torch.cat(parts) for parts in zip(*states))
    return torch.cat(outputs, 1), torch.cat(states)


def call(layer, form, x, cu=CU, **kwargs):
    names, recurrent, chunk, options = LAYERS[layer]
    fn = recurrent if form == "recurrent" else chunk
    extra = {"chunk_size": 16} if form == "chunk" else {}
    kwargs.setdefault("initial_state", state_of(layer, x, slice(None)))
    return fn(
        *(x[m] for m in names), cu_seqlens=torch.tensor(cu), output_final_state=True, **options, **extra, **kwargs
    )


def state_error(a, b):
    if isinstance(a, tuple):
        return max(relative_error(p, r) for p, r in zip(a, b))
    return relative_error(a, b)


@pytest.mark.parametrize("form", ["recurrent", "chunk"])
@pytest.mark.parametrize("layer", list(LAYERS))
def test_varlen_equals_a_loop_over_sequences(layer, form):
    """chunk (and recurrent) with cu_seqlens vs the recurrent form run on each sequence alone, fp64."""
    x = make_packed()
    o, S = call(layer, form, x)
    o_ref, S_ref = per_sequence_loop(layer, x)
    assert o.shape == o_ref.shape == (1, CU[-1], H, D_V)
    assert relative_error(o, o_ref) < 1e-12
    assert state_error(S, S_ref) < 1e-12


@pytest.mark.parametrize("layer", list(LAYERS))
def test_varlen_without_initial_state_starts_every_sequence_from_zero(layer):
    x = make_packed()
    o, _ = call(layer, "chunk", x, initial_state=None)
    x_zero = dict(x, S0=torch.zeros_like(x["S0"]), z0=torch.zeros_like(x["z0"]))
    o_ref, _ = per_sequence_loop(layer, x_zero)
    assert relative_error(o, o_ref) < 1e-12


@pytest.mark.parametrize("form", ["recurrent", "chunk"])
@pytest.mark.parametrize("layer", list(LAYERS))
def test_no_state_crosses_a_boundary(layer, form):
    """A huge key and value in sequence 1 change its own outputs, and nothing in the sequences after it."""
    x = make_packed()
    o, S = call(layer, form, x)
    poisoned = {name: t.clone() for name, t in x.items()}
    last = CU[2] - 1  # the last token of sequence 1, right before the boundary
    poisoned["v"][:, last] = 1e12
    poisoned["k"][:, last] *= 1e3 if layer != "delta_rule" and "gated_delta" not in layer else 1.0
    o_p, S_p = call(layer, form, poisoned)
    assert not torch.equal(o_p[:, CU[1] : CU[2]], o[:, CU[1] : CU[2]])
    assert torch.equal(o_p[:, CU[2] :], o[:, CU[2] :])
    assert torch.equal(o_p[:, : CU[1]], o[:, : CU[1]])
    S, S_p = (S[0], S_p[0]) if isinstance(S, tuple) else (S, S_p)
    assert torch.equal(S_p[2:], S[2:]) and not torch.equal(S_p[1], S[1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_varlen_keeps_the_dtype_contract(dtype):
    x = make_packed(dtype)
    o, S = call("delta_rule", "chunk", x)
    assert o.dtype == dtype and S.dtype == torch.float32


def test_varlen_gradients_reach_every_sequence():
    x = make_packed()
    q = x["q"].clone().requires_grad_()
    S0 = x["S0"].clone().requires_grad_()
    o, S = ops.gated_delta_rule_chunk(
        q,
        x["k"],
        x["v"],
        x["g"],
        x["beta"],
        initial_state=S0,
        output_final_state=True,
        chunk_size=16,
        cu_seqlens=torch.tensor(CU),
    )
    (o.square().sum() + S.square().sum()).backward()
    assert torch.isfinite(q.grad).all() and (S0.grad.flatten(1).norm(dim=1) > 0).all()


BAD_OFFSETS = [
    (
        torch.tensor([0, 30, 7, 83]),
        ValueError,
        r"cu_seqlens: expected strictly increasing offsets.*cu_seqlens\[1\] = 30",
    ),
    (torch.tensor([0, 7, 7, 83]), ValueError, "strictly increasing"),
    (torch.tensor([1, 7, 83]), ValueError, "cu_seqlens: expected offsets that start at 0, got cu_seqlens\\[0\\] = 1"),
    (torch.tensor([0, 7, 80]), ValueError, "cu_seqlens: expected offsets that end at T = 83.*got 80"),
    (torch.tensor([0.0, 7.0, 83.0]), TypeError, "cu_seqlens: expected an integer dtype.*float32"),
    (torch.tensor([True, False]), TypeError, "cu_seqlens: expected an integer dtype"),
    (torch.tensor([[0, 7, 83]]), ValueError, r"cu_seqlens: expected a 1-D tensor of shape \(N \+ 1,\).*\(1, 3\)"),
    (torch.tensor([0]), ValueError, "N >= 1"),
    ([0, 7, 83], TypeError, "cu_seqlens: expected an integer torch.Tensor.*list"),
]


@pytest.mark.parametrize("form", ["recurrent", "chunk"])
@pytest.mark.parametrize("layer", list(LAYERS))
@pytest.mark.parametrize("offsets, error, match", BAD_OFFSETS)
def test_bad_offsets_are_refused_by_name(layer, form, offsets, error, match):
    x = make_packed()
    names, recurrent, chunk, options = LAYERS[layer]
    fn = recurrent if form == "recurrent" else chunk
    with pytest.raises(error, match=match):
        fn(*(x[m] for m in names), cu_seqlens=offsets, **options)


def test_int32_offsets_work_like_int64():
    x = make_packed()
    names = LAYERS["delta_rule"][0]
    o32, _ = ops.delta_rule_chunk(*(x[m] for m in names), cu_seqlens=torch.tensor(CU, dtype=torch.int32))
    o64, _ = ops.delta_rule_chunk(*(x[m] for m in names), cu_seqlens=torch.tensor(CU, dtype=torch.int64))
    assert torch.equal(o32, o64)


def test_batch_of_more_than_one_is_refused():
    x = make_packed()
    q, k, v = (x[m].expand(2, -1, -1, -1) for m in "qkv")
    with pytest.raises(
        ValueError,
        match=r"q: with cu_seqlens the sequences are packed along T in a batch of one, "
        r"expected shape \(1, T, H, D_k\), got \(2, 83, 2, 8\)",
    ):
        ops.linear_attention_chunk(q, k, v, cu_seqlens=torch.tensor(CU))


def test_initial_state_needs_one_state_per_sequence():
    x = make_packed()
    with pytest.raises(
        ValueError,
        match=r"initial_state: with cu_seqlens expected one state per sequence, "
        r"\(N, H, ...\) with N = len\(cu_seqlens\) - 1 = 5, got shape \(1, 2, 8, 5\)",
    ):
        ops.delta_rule_chunk(x["q"], x["k"], x["v"], x["beta"], initial_state=x["S0"][:1], cu_seqlens=torch.tensor(CU))


def test_a_per_token_tensor_of_another_length_is_refused():
    x = make_packed()
    with pytest.raises(ValueError, match=r"beta: with cu_seqlens every input is packed as \(1, T, ...\) with T = 83"):
        ops.delta_rule_chunk(x["q"], x["k"], x["v"], x["beta"][:, :-1], cu_seqlens=torch.tensor(CU))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 300), min_size=1, max_size=40))
def test_length_groups_pad_at_most_twice_the_packed_length(lengths):
    groups = length_groups(lengths)
    assert sorted(i for group in groups for i in group) == list(range(len(lengths)))
    padded = sum(len(group) * max(lengths[i] for i in group) for group in groups)
    assert padded <= 2 * sum(lengths)


def test_equal_lengths_make_one_batched_call():
    assert length_groups([64] * 10) == [list(range(10))]

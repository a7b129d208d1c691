"""Bad input to any op raises ValueError/TypeError naming the argument (and, for shapes, the named dims)."""

import pytest
import torch

from tests.helpers import fla_inputs
from ttr_edu import ops

B, T, H, D_K, D_V = 2, 5, 3, 4, 2


def _inputs():
    return fla_inputs(B, T, H, D_K, D_V, dtype=torch.float32, beta=(0.0, 1.0), max_decay=1.0)


# name -> (call(inputs, **kwargs), the kind of state it carries: "S", "SP" (RLS) or None)
OPS = {
    "linear_attention_recurrent": (lambda x, **kw: ops.linear_attention_recurrent(x["q"], x["k"], x["v"], **kw), "S"),
    "linear_attention_parallel": (lambda x, **kw: ops.linear_attention_parallel(x["q"], x["k"], x["v"], **kw), "S"),
    "linear_attention_chunk": (lambda x, **kw: ops.linear_attention_chunk(x["q"], x["k"], x["v"], **kw), "S"),
    "delta_rule_recurrent": (lambda x, **kw: ops.delta_rule_recurrent(x["q"], x["k"], x["v"], x["beta"], **kw), "S"),
    "delta_rule_parallel": (lambda x, **kw: ops.delta_rule_parallel(x["q"], x["k"], x["v"], x["beta"], **kw), "S"),
    "delta_rule_chunk": (lambda x, **kw: ops.delta_rule_chunk(x["q"], x["k"], x["v"], x["beta"], **kw), "S"),
    "gated_linear_attention_recurrent": (
        lambda x, **kw: ops.gated_linear_attention_recurrent(x["q"], x["k"], x["v"], x["g"], **kw),
        "S",
    ),
    "gated_linear_attention_chunk": (
        lambda x, **kw: ops.gated_linear_attention_chunk(x["q"], x["k"], x["v"], x["g"], **kw),
        "S",
    ),
    "gated_delta_rule_recurrent": (
        lambda x, **kw: ops.gated_delta_rule_recurrent(x["q"], x["k"], x["v"], x["g"], x["beta"], **kw),
        "S",
    ),
    "gated_delta_rule_chunk": (
        lambda x, **kw: ops.gated_delta_rule_chunk(x["q"], x["k"], x["v"], x["g"], x["beta"], **kw),
        "S",
    ),
    "rls_recurrent": (lambda x, **kw: ops.rls_recurrent(x["q"], x["k"], x["v"], g=x["g"], **kw), "SP"),
    "rls_exact": (lambda x, **kw: ops.rls_exact(x["q"], x["k"], x["v"], g=x["g"], **kw), "SP"),
    "rls_chunk": (lambda x, **kw: ops.rls_chunk(x["q"], x["k"], x["v"], **kw), "SP"),
    "softmax_attention": (lambda x, **kw: ops.softmax_attention(x["q"], x["k"], x["v"], **kw), None),
    "local_linear_attention": (lambda x, **kw: ops.local_linear_attention(x["q"], x["k"], x["v"], **kw), None),
}
WITH_BETA = [name for name in OPS if "delta" in name]
WITH_G = [name for name in OPS if "gated" in name or name in ("rls_recurrent", "rls_exact")]
STATEFUL = [name for name, (_, state) in OPS.items() if state is not None]
CHUNKED = [name for name in OPS if name.endswith("_chunk")]


def call(name, **overrides):
    inputs = _inputs()
    kwargs = {key: overrides.pop(key) for key in list(overrides) if key not in inputs}
    inputs.update(overrides)
    return OPS[name][0](inputs, **kwargs)


@pytest.mark.parametrize("name", OPS)
def test_valid_call_runs(name):
    o, _ = call(name)
    assert o.shape == (B, T, H, D_V) and torch.isfinite(o).all()


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize(
    "arg, shape, dim",
    [
        ("k", (B + 1, T, H, D_K), "B"),
        ("v", (B, T + 1, H, D_V), "T"),
        ("k", (B, T, H + 1, D_K), "H"),
        ("k", (B, T, H, D_K + 1), "D_k"),
        ("v", (B, T, H), None),
    ],
)
def test_mismatched_shapes(name, arg, shape, dim):
    with pytest.raises(ValueError, match=arg) as info:
        call(name, **{arg: torch.randn(*shape)})
    assert "(B, T, H, D_" in str(info.value)
    if dim is not None:
        assert f"{dim} is" in str(info.value)


@pytest.mark.parametrize("name", WITH_BETA)
@pytest.mark.parametrize("shape", [(B, T), (B, T, H, 1), (B, T + 1, H), (H,)])
def test_beta_of_wrong_shape(name, shape):
    with pytest.raises(ValueError, match=r"beta: expected .*\(B, T, H\)"):
        call(name, beta=torch.rand(*shape))


@pytest.mark.parametrize("name", WITH_G)
def test_g_of_wrong_shape(name):
    with pytest.raises(ValueError, match=r"g: expected .*\(B, T, H\)"):
        call(name, g=torch.rand(B, T, H, 1))


@pytest.mark.parametrize("name", STATEFUL)
def test_initial_state_of_wrong_shape(name):
    bad_S = torch.zeros(B, H, D_V, D_K)  # transposed: (B, H, D_v, D_k)
    state = (bad_S, torch.eye(D_K).expand(B, H, D_K, D_K)) if OPS[name][1] == "SP" else bad_S
    with pytest.raises(ValueError, match=r"initial_state.*\(B, H, D_k, D_v\)"):
        call(name, initial_state=state)


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("arg", ["q", "k", "v"])
def test_integer_dtype(name, arg):
    with pytest.raises(TypeError, match=f"{arg}: expected a floating-point tensor"):
        call(name, **{arg: torch.ones(B, T, H, D_V if arg == "v" else D_K, dtype=torch.int64)})


@pytest.mark.parametrize("name", OPS)
def test_mixed_dtypes(name):
    with pytest.raises(TypeError, match="v: expected the dtype of q"):
        call(name, v=torch.randn(B, T, H, D_V, dtype=torch.float64))


@pytest.mark.parametrize("name", OPS)
def test_not_a_tensor(name):
    with pytest.raises(TypeError, match="q: expected a torch.Tensor"):
        call(name, q=[[0.0]])


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("arg", ["k", "v"])
def test_different_devices(name, arg):
    x = _inputs()[arg]
    with pytest.raises(ValueError, match="one device") as info:
        call(name, **{arg: torch.empty(x.shape, device="meta")})
    assert "meta" in str(info.value) and "cpu" in str(info.value)


@pytest.mark.parametrize("name", STATEFUL)
def test_initial_state_on_another_device(name):
    S = torch.zeros(B, H, D_K, D_V, device="meta")
    state = (S, torch.eye(D_K).expand(B, H, D_K, D_K)) if OPS[name][1] == "SP" else S
    with pytest.raises(ValueError, match="initial_state.*device"):
        call(name, initial_state=state)


@pytest.mark.parametrize("name", CHUNKED)
@pytest.mark.parametrize("chunk_size, error", [(0, ValueError), (-4, ValueError), (2.5, TypeError), (True, TypeError)])
def test_bad_chunk_size(name, chunk_size, error):
    with pytest.raises(error, match="chunk_size"):
        call(name, chunk_size=chunk_size)


@pytest.mark.parametrize("name", CHUNKED)
@pytest.mark.parametrize("chunk_size", [1, 3, T, 64])
def test_any_positive_chunk_size_runs(name, chunk_size):
    o, _ = call(name, chunk_size=chunk_size)
    assert o.shape == (B, T, H, D_V) and torch.isfinite(o).all()


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan")])
def test_bad_scale(name, scale):
    with pytest.raises(ValueError, match="scale"):
        call(name, scale=scale)


@pytest.mark.parametrize("name", OPS)
def test_empty_sequence(name):
    inputs = {key: x[:, :0] for key, x in _inputs().items()}
    with pytest.raises(ValueError, match="T = 0"):
        OPS[name][0](inputs)


@pytest.mark.parametrize("name", WITH_BETA)
def test_stability_warning_points_at_the_caller(name):
    with pytest.warns(RuntimeWarning) as record:
        call(name, beta=torch.full((B, T, H), 3.0))
    assert record[0].filename == __file__


# ---- the dtypes of a state made of several tensors ---------------------------------------------------------------

D_H = 3  # the MLP memory's hidden width


def _tuple_state_ops():
    """name -> (call(inputs, state, **kwargs), the state's parts in fp64 (each test casts them), whether the parts
    must have the dtype of q exactly (a key-value cache, concatenated with k and v) or may also have the compute
    dtype)."""
    f64 = {"dtype": torch.float64}
    S, z, eye = torch.zeros(B, H, D_K, D_V, **f64), torch.zeros(B, H, D_K, **f64), torch.eye(D_K, **f64)
    W = (torch.full((B, H, D_K, D_H), 0.1, **f64), torch.full((B, H, D_H, D_V), 0.1, **f64))
    cache = (torch.zeros(B, 2, H, D_K, **f64), torch.zeros(B, 2, H, D_V, **f64))

    def rls(form):
        return lambda x, st, **kw: getattr(ops, f"rls_{form}")(x["q"], x["k"], x["v"], initial_state=st, **kw)

    def ttt_mlp(form):
        return lambda x, st, **kw: getattr(ops, f"ttt_mlp_{form}")(
            x["q"], x["k"], x["v"], x["beta"], 2, initial_state=st, **kw
        )

    def normalised(form):
        def run(x, st, **kw):
            q, k = ops.elu_plus_one(x["q"]), ops.elu_plus_one(x["k"])
            return getattr(ops, f"linear_attention_{form}")(q, k, x["v"], normalize=True, initial_state=st, **kw)

        return run

    def titans(x, st, **kw):
        gates = (torch.full(x["q"].shape[:3], 0.1, dtype=x["q"].dtype),) * 3
        return ops.titans_recurrent(x["q"], x["k"], x["v"], *gates, initial_state=st, **kw)

    def titans_with_momentum(x, st, **kw):
        return titans(x, ops.TitansState(*st), **kw)

    def softmax(x, st, **kw):
        return ops.softmax_attention(x["q"], x["k"], x["v"], initial_state=st, **kw)

    table = {
        f"rls_{form}": (rls(form), (S, eye.expand(B, H, D_K, D_K)), False) for form in ("recurrent", "exact", "chunk")
    }
    table |= {f"ttt_mlp_{form}": (ttt_mlp(form), W, False) for form in ("recurrent", "chunk")}
    table |= {f"linear_attention_{f}": (normalised(f), (S, z), False) for f in ("recurrent", "parallel", "chunk")}
    table["titans_recurrent (W1, W2)"] = (titans, W, False)
    table["titans_recurrent TitansState(S, U)"] = (titans_with_momentum, (S, S), False)
    table["softmax_attention (k_cache, v_cache)"] = (softmax, cache, True)
    return table


TUPLE_STATE_OPS = _tuple_state_ops()


@pytest.mark.parametrize("name", TUPLE_STATE_OPS)
@pytest.mark.parametrize("part", [0, 1])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_a_part_of_a_tuple_state_in_another_dtype_is_refused_by_name(name, part, dtype):
    """Beside fp32 inputs, a part in half precision has lost digits already and an fp64 one would be rounded: both
    are refused, naming the part (``initial_state[1] (P)``, ``initial_state.momentum[0] (U)``)."""
    op, parts, _ = TUPLE_STATE_OPS[name]
    state = [p.float() for p in parts]
    state[part] = parts[part].to(dtype)
    with pytest.raises(
        TypeError, match=rf"^initial_state(\.\w+)?(\[\d\] \(\w+\))?: expected float32 like q, got {dtype}$"
    ):
        op(_inputs(), tuple(state))


@pytest.mark.parametrize("name", TUPLE_STATE_OPS)
def test_a_tuple_state_in_the_dtype_of_q_or_of_a_final_state_runs(name):
    """Half inputs compute in fp32 and return their final state in fp32: that state is taken back, as is one in the
    dtype of q (a key-value cache: only that one, as its final state has it); fp64 inputs take fp64 parts."""
    op, parts, exact = TUPLE_STATE_OPS[name]
    half = {key: x.to(torch.bfloat16) for key, x in _inputs().items()}
    _, final = op(half, tuple(p.to(torch.bfloat16) for p in parts), output_final_state=True)
    op(half, final)
    if not exact:
        op(half, tuple(p.float() for p in parts))
    op({key: x.double() for key, x in _inputs().items()}, parts)
    allowed = "bfloat16 like q" if exact else "bfloat16 like q or float32, the dtype of a final state"
    with pytest.raises(TypeError, match=f"expected {allowed}, got torch.float16"):
        op(half, tuple(p.to(torch.float16) for p in parts))


@pytest.mark.parametrize("name", [n for n in STATEFUL if OPS[n][1] == "S"])
def test_a_one_tensor_state_of_another_dtype_is_cast(name):
    """One state tensor of any floating dtype is cast to the compute dtype (documented per op), unlike the parts of
    a tuple state."""
    for dtype in (torch.float16, torch.float64):
        o, S = call(name, initial_state=torch.zeros(B, H, D_K, D_V, dtype=dtype), output_final_state=True)
        assert torch.isfinite(o).all() and S.dtype == torch.float32

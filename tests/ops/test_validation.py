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

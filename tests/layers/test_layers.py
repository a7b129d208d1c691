"""The token mixers: shapes, causality, gradients, bad input, and their mixing equals the regression framework."""

import pytest
import torch

from tests.helpers import relative_error
from ttr_edu import ops
from ttr_edu.layers import (
    MEMORY_MIXERS,
    MIXERS,
    DeltaNet,
    DeltaProduct,
    GatedDeltaNet,
    LinearAttention,
    LocalLinearAttention,
    Longhorn,
    MesaLayer,
    SoftmaxAttention,
)
from ttr_edu.regression import (
    ExactSolve,
    Gates,
    Linear,
    LocalLinear,
    RecursiveLeastSquares,
    TestTimeRegression,
    Uniform,
    named_layer,
)


def x(seed=0, T=12, hidden=16):
    return torch.randn(2, T, hidden, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", list(MIXERS) + list(MEMORY_MIXERS))
def test_shape_gradients_and_causality(name):
    torch.manual_seed(0)
    layer = {**MIXERS, **MEMORY_MIXERS}[name](16, 2)
    inputs = x().requires_grad_()
    y = layer(inputs)
    assert y.shape == (2, 12, 16)
    y.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in layer.parameters() if p.requires_grad)
    changed = inputs.detach().clone()
    changed[:, 7:] += 1.0  # the future changes ...
    assert torch.allclose(layer(changed)[:, :7], y[:, :7].detach(), atol=1e-6)  # ... the past does not
    assert layer.state_size(12) > 0


STEPPED = {
    **MIXERS,
    **MEMORY_MIXERS,
    "mesa_exact": lambda d, h: MesaLayer(d, h, solver="exact"),
    "gated_mesa": lambda d, h: MesaLayer(d, h, use_gate=True),
    "longhorn_diagonal": lambda d, h: Longhorn(d, h, diagonal=True),
    "ttt_mlp_no_conv": lambda d, h: MEMORY_MIXERS["ttt_mlp"](d, h, use_short_conv=False, mini_batch_size=3),
}


@pytest.mark.parametrize("name", STEPPED)
def test_one_token_at_a_time_equals_the_whole_sequence(name):
    """step() (the op's recurrent form, one token, from initial_state) gives forward()'s output at every position,
    fp64, for every mixer: the chunk op and the recurrent op of a layer compute one function."""
    torch.manual_seed(0)
    layer = STEPPED[name](16, 2).double()
    inputs = x(5, T=9).double()
    with torch.no_grad():
        whole = layer(inputs)
        state, outputs = layer.initial_state(2), []
        for t in range(inputs.shape[1]):
            o, state = layer.step(inputs[:, t], state)
            outputs.append(o)
    assert relative_error(torch.stack(outputs, dim=1), whole) <= 1e-10


def test_step_refuses_bad_input_by_name():
    layer = DeltaNet(16, 2)
    state = layer.initial_state(2)
    with pytest.raises(TypeError, match="state: expected a MixerState"):
        layer.step(torch.randn(2, 16), None)
    with pytest.raises(ValueError, match=r"x: expected one token per sequence, shape \(B, hidden_size\)"):
        layer.step(torch.randn(2, 1, 16), state)
    _, state = layer.step(torch.randn(2, 16), state)
    with pytest.raises(ValueError, match="x: expected the batch size of the state"):
        layer.step(torch.randn(3, 16), state)
    with pytest.raises(ValueError, match="batch_size"):
        layer.initial_state(0)


@pytest.mark.parametrize("name", list(MIXERS))
def test_bad_input_is_named(name):
    layer = MIXERS[name](16, 2)
    with pytest.raises(ValueError, match="x: expected shape"):
        layer(torch.randn(2, 12, 8))
    with pytest.raises(TypeError, match="x"):
        layer(torch.ones(2, 12, 16, dtype=torch.long))


def test_mesa_layer_refuses_an_unknown_solver():
    with pytest.raises(ValueError, match="solver: expected 'auto', 'recurrent' or 'exact', got 'cg'"):
        MesaLayer(16, 2, solver="cg")


def test_heads_must_divide_the_width():
    with pytest.raises(ValueError, match="num_heads"):
        DeltaNet(16, 3)


def mixes_like(layer, framework, **kw):
    torch.manual_seed(1)
    with torch.no_grad():
        inputs = layer.project(x(1))
        got = layer.mix(**inputs)
        if "o_norm" in dict(layer.named_children()):
            if isinstance(layer, LinearAttention):
                inputs["q"], inputs["k"] = layer.feature_map(inputs["q"]), layer.feature_map(inputs["k"])
            want = layer.o_norm(framework(**inputs, **kw)[0])
        else:
            want = framework(**inputs, **kw)[0]
    assert relative_error(got, want) < 1e-5, relative_error(got, want)


def test_each_layer_mixes_as_its_point_of_the_framework():
    mixes_like(LinearAttention(16, 2), named_layer("linear_attention"))
    mixes_like(DeltaNet(16, 2), named_layer("deltanet"))
    mixes_like(GatedDeltaNet(16, 2), named_layer("gated_deltanet"))
    mixes_like(MesaLayer(16, 2, ridge=0.5), named_layer("rls", ridge=0.5))
    # Mesa with gates: the constant ridge of MesaNet (ops.rls_recurrent with g), i.e. ExactSolve under Gates.
    mixes_like(MesaLayer(16, 2, ridge=0.5, use_gate=True), TestTimeRegression(Gates(), Linear(), ExactSolve(ridge=0.5)))
    mixes_like(
        MesaLayer(16, 2, ridge=0.5, use_gate=True), lambda q, k, v, g: ops.rls_recurrent(q, k, v, ridge=0.5, g=g)
    )
    mixes_like(SoftmaxAttention(16, 2), named_layer("softmax_attention"))
    mixes_like(
        LocalLinearAttention(16, 2, ridge=0.1), TestTimeRegression(Uniform(), LocalLinear(), ExactSolve(ridge=0.1))
    )


@pytest.mark.parametrize("options", [{}, {"solver": "recurrent"}, {"solver": "exact"}, {"use_gate": True}])
def test_mesa_layer_computes_what_it_computed_through_the_framework(options):
    """MesaLayer calls the ops (rls_chunk, rls_recurrent, rls_exact); until release 0.2 it called the regression
    framework (RecursiveLeastSquares without gates, ExactSolve with gates or solver="exact"). fp64: the same output and
    the same gradient for every parameter, to 1e-12, so trained MQAR / LM results are unchanged in function."""
    torch.manual_seed(3)
    layer = MesaLayer(16, 2, ridge=0.5, **options).double()
    exact = options.get("use_gate", False) or options.get("solver") == "exact"
    optimizer = ExactSolve(0.5) if exact else RecursiveLeastSquares(0.5)
    framework = TestTimeRegression(Gates() if options.get("use_gate") else Uniform(), Linear(), optimizer)
    inputs = x(4).double()
    results = []
    for mix in (layer.mix, lambda **kw: layer.o_norm(framework(**kw)[0])):
        layer.zero_grad()
        y = layer.o_proj(mix(**layer.project(inputs)).flatten(-2))
        (y * torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)).sum().backward()
        results.append((y.detach(), [p.grad.clone() for p in layer.parameters()]))
    (y_new, grads_new), (y_old, grads_old) = results
    assert relative_error(y_new, y_old) <= 1e-12
    for new, old in zip(grads_new, grads_old):
        assert relative_error(new, old) <= 1e-12


@pytest.mark.parametrize("cls", [LinearAttention, DeltaNet, GatedDeltaNet, Longhorn, DeltaProduct])
def test_chunk_size_is_one_argument_and_a_speed_setting_only(cls):
    """Every layer that runs a chunk op takes its chunk size as an argument (default 32; linear attention 64, as its
    trained results); any size computes the same function (fp64), and a bad one is refused by name."""
    torch.manual_seed(0)
    default = cls(16, 2).double()
    assert default.chunk_size == (64 if cls is LinearAttention else 32)
    torch.manual_seed(0)
    odd = cls(16, 2, chunk_size=5).double()
    inputs = x(2).double()
    with torch.no_grad():
        assert relative_error(odd(inputs), default(inputs)) <= 1e-12
    with pytest.raises(ValueError, match="chunk_size"):
        cls(16, 2, chunk_size=0)
    with pytest.raises(TypeError, match="chunk_size"):
        cls(16, 2, chunk_size=8.0)


def test_state_sizes():
    assert DeltaNet(16, 2).state_size(64) == 2 * 8 * 8
    assert MesaLayer(16, 1).state_size(64) == 16 * 32  # S and P
    assert SoftmaxAttention(16, 2).state_size(64) == 2 * 64 * 16  # the key-value cache grows with T

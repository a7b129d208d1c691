"""The token mixers: shapes, causality, gradients, bad input, and their mixing equals the regression framework."""

import pytest
import torch

from tests.helpers import relative_error
from ttr_edu import ops
from ttr_edu.layers import (
    MEMORY_MIXERS,
    MIXERS,
    DeltaNet,
    GatedDeltaNet,
    LinearAttention,
    LocalLinearAttention,
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


@pytest.mark.parametrize("name", list(MIXERS))
def test_bad_input_is_named(name):
    layer = MIXERS[name](16, 2)
    with pytest.raises(ValueError, match="x: expected shape"):
        layer(torch.randn(2, 12, 8))
    with pytest.raises(TypeError, match="x"):
        layer(torch.ones(2, 12, 16, dtype=torch.long))


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


@pytest.mark.parametrize("options", [{}, {"solver": "exact"}, {"use_gate": True}])
def test_mesa_layer_computes_what_it_computed_through_the_framework(options):
    """MesaLayer calls the ops (rls_recurrent, rls_exact); until release 0.2 it called the regression framework
    (RecursiveLeastSquares without gates, ExactSolve with gates or solver="exact"). fp64: the same output and the
    same gradient for every parameter, to 1e-12, so trained MQAR / LM results are unchanged in function."""
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


def test_state_sizes():
    assert DeltaNet(16, 2).state_size(64) == 2 * 8 * 8
    assert MesaLayer(16, 1).state_size(64) == 16 * 32  # S and P
    assert SoftmaxAttention(16, 2).state_size(64) == 2 * 64 * 16  # the key-value cache grows with T

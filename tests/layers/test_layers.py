"""The token mixers: the layer suite on every registered mixer (shapes, causality, gradients, bad input, state size,
and their mixing equals the regression framework's), and each layer's own options."""

import pytest
import torch

from tests.helpers import relative_error
from tests.helpers.layer_suite import (
    check_bad_input_is_named,
    check_mixes_as_its_named_layer,
    check_shape_gradients_and_causality,
    check_state_size,
)
from ttr_edu.layers import (
    REGISTRY,
    DeltaNet,
    DeltaProduct,
    GatedDeltaNet,
    LinearAttention,
    Longhorn,
    MesaLayer,
    SoftmaxAttention,
)
from ttr_edu.regression import ExactSolve, Gates, Linear, RecursiveLeastSquares, TestTimeRegression, Uniform

NAMED = [name for name, spec in REGISTRY.items() if spec.named_layer is not None]


def x(seed=0, T=12, hidden=16):
    return torch.randn(2, T, hidden, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", list(REGISTRY))
def test_shape_gradients_and_causality(name):
    check_shape_gradients_and_causality(REGISTRY[name])


@pytest.mark.parametrize("name", list(REGISTRY))
def test_bad_input_is_named(name):
    check_bad_input_is_named(REGISTRY[name])


@pytest.mark.parametrize("name", list(REGISTRY))
def test_the_state_size_is_fixed_exactly_for_a_parametric_memory(name):
    check_state_size(REGISTRY[name])


@pytest.mark.parametrize("name", NAMED)
def test_each_layer_mixes_as_its_point_of_the_framework(name):
    check_mixes_as_its_named_layer(REGISTRY[name])


def test_every_registered_name_of_the_framework_is_one():
    from ttr_edu.regression import NAMED_LAYERS

    assert {REGISTRY[name].named_layer for name in NAMED} <= set(NAMED_LAYERS)
    assert len(NAMED) >= 12  # every layer of chapters 04–08 names its point


def test_mesa_layer_refuses_an_unknown_solver():
    with pytest.raises(ValueError, match="solver: expected one of 'auto', 'recurrent', 'exact', got 'cg'"):
        MesaLayer(16, 2, solver="cg")
    with pytest.raises(TypeError, match="solver"):
        MesaLayer(16, 2, solver=3)


def test_heads_must_divide_the_width():
    with pytest.raises(ValueError, match="num_heads"):
        DeltaNet(16, 3)


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
    assert LinearAttention(16, 2, "dpfp", feature_map_params={"nu": 2}).state_size(64) == 2 * (2 * 8 * 2) * 8
    assert SoftmaxAttention(16, 2).state_size(64) == 2 * 64 * 16  # the key-value cache grows with T

"""Any point of the design space trains as a token mixer through the regression framework (the generic path): it
passes the layer suite, computes the op's function at a named point, and trains in TinyLM and the MQAR model at a
point that has no op."""

import pytest
import torch

from tests.helpers.layer_suite import run_layer_suite
from ttr_edu.layers import REGISTRY, RegressionMixer, register_point, unregister
from ttr_edu.models.lm import LMConfig, TinyLM, causal_lm_loss
from ttr_edu.models.mqar import MQARModel
from ttr_edu.regression.cost import cost
from ttr_edu.regression.design_space import Point, named_point
from ttr_edu.tasks.mqar import mqar_batch

NO_OP = Point.of("window", "linear", "implicit_step", window=4)  # no op of the package computes this point


GATED_IMPLICIT = Point.of("gates", "linear", "implicit_step")  # chapter 13's default capstone point, no op either


@pytest.fixture
def window_implicit():
    spec = register_point("window_implicit_step", NO_OP)
    yield spec
    unregister(spec.name)


@pytest.fixture
def gated_implicit():
    spec = register_point("gated_implicit_step", GATED_IMPLICIT)
    yield spec
    unregister(spec.name)


def test_the_registry_holds_no_generic_mixer_until_one_is_registered(gated_implicit):
    assert REGISTRY["gated_implicit_step"] is gated_implicit and gated_implicit.options["point"] == GATED_IMPLICIT
    assert not any(spec.layer is RegressionMixer for name, spec in REGISTRY.items() if name != gated_implicit.name)
    with pytest.raises(ValueError, match="registered already"):
        register_point("gated_implicit_step", GATED_IMPLICIT)
    assert register_point("gated_implicit_step", GATED_IMPLICIT, replace=True).options["point"] == GATED_IMPLICIT


def test_a_generic_mixer_passes_the_layer_suite(gated_implicit):
    run_layer_suite(gated_implicit)


def test_a_point_with_no_op_passes_the_layer_suite(window_implicit):
    run_layer_suite(window_implicit)


@pytest.mark.parametrize("name", ["deltanet", "gated_deltanet", "longhorn"])
def test_at_a_named_point_it_computes_the_named_layers_op(name):
    torch.manual_seed(0)
    layer = REGISTRY[name](16, 2).double()
    generic = RegressionMixer(16, 2, point=named_point(name)).double()
    x = torch.randn(2, 11, 16, dtype=torch.float64)
    with torch.no_grad():
        inputs = layer.project(x)  # the named layer's own q, k, v, beta (and g): the same op inputs for both
        want = layer.mix(**inputs)
        got = generic.mix(**inputs)
    assert (got - want).norm() / want.norm() < 1e-10


def test_a_point_with_no_op_trains_in_tinylm(window_implicit):
    torch.manual_seed(0)
    model = TinyLM(LMConfig(mixer=window_implicit.name, d_model=16, num_heads=2, n_layers=1))
    data = torch.randint(0, 256, (8, 17), generator=torch.Generator().manual_seed(0))
    data[:, 1::2] = data[:, 0:-1:2]  # every odd byte repeats the one before it: learnable
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(25):
        loss = causal_lm_loss(model(data), data)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0], losses


def test_a_point_with_no_op_trains_in_the_mqar_model(gated_implicit):
    torch.manual_seed(0)
    model = MQARModel(gated_implicit.name, 32, 16)
    assert isinstance(model.mixer, RegressionMixer)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(40):
        loss = model.loss(mqar_batch(32, 24, 4, 32, generator=generator))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert sum(losses[-5:]) < 0.9 * sum(losses[:5]), losses


def test_it_reports_the_points_state_and_its_own_cache():
    layer = RegressionMixer(16, 2, point=Point.of("gates", "linear", "rls"))
    assert layer.state_size(64) == 2 * cost(layer.point, 8, 8).state == 2 * (8 * 8 + 8 * 8)
    assert layer.cache_size(64) == 2 * layer.cache_size(32) > layer.state_size(64)


def test_a_point_that_makes_no_layer_is_refused_by_name():
    with pytest.raises(ValueError, match="^point: .*makes no layer"):
        RegressionMixer(16, 2, point=Point.of("uniform", "kernel_smoother", "online_sgd"))
    with pytest.raises(TypeError, match="^point: "):
        RegressionMixer(16, 2, point=3)
    with pytest.raises(ValueError, match="^name: unknown layer"):
        RegressionMixer(16, 2, point="mamba")

"""The adaptive-step and deep-memory mixers: shapes, causality, gradients, bad input, and each mixes as its op."""

import pytest
import torch

from tests.helpers import relative_error
from ttr_edu.layers import MEMORY_MIXERS, TTTMLP, DeltaProduct, Longhorn, TitansMemory, TTTLinear
from ttr_edu.regression import named_layer


def x(seed=0, T=12, hidden=16):
    return torch.randn(2, T, hidden, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", list(MEMORY_MIXERS))
def test_bad_input_is_named(name):
    layer = MEMORY_MIXERS[name](16, 2)
    with pytest.raises(ValueError, match="x: expected shape"):
        layer(torch.randn(2, 12, 8))
    with pytest.raises(TypeError, match="x"):
        layer(torch.ones(2, 12, 16, dtype=torch.long))


def test_options_are_checked():
    with pytest.raises(ValueError, match="num_householder"):
        DeltaProduct(16, 2, num_householder=0)
    with pytest.raises(TypeError, match="mini_batch_size"):
        TTTLinear(16, 2, mini_batch_size=2.5)


def mixes_like(layer, framework, rename=None, **kw):
    torch.manual_seed(1)
    with torch.no_grad():
        inputs = layer.project(x(1))
        got = layer.mix(**inputs)
        if isinstance(layer, DeltaProduct):  # the ops take token t's j-th pair at row t·n_h + j
            inputs = {name: value.flatten(1, 2) if name != "q" else value for name, value in inputs.items()}
        call = {(rename or {}).get(key, key): value for key, value in inputs.items()}
        q, k, v = call.pop("q"), call.pop("k"), call.pop("v")
        want = layer.o_norm(framework(q, k, v, **call, **kw)[0])
    assert relative_error(got, want) < 1e-5, relative_error(got, want)


def test_each_layer_mixes_as_its_point_of_the_framework():
    mixes_like(Longhorn(16, 2), named_layer("longhorn"))
    mixes_like(DeltaProduct(16, 2, num_householder=3), named_layer("deltaproduct", num_householder=3))
    mixes_like(TTTLinear(16, 2, mini_batch_size=4), named_layer("ttt_linear", mini_batch_size=4))
    layer = TTTMLP(16, 2, mini_batch_size=4, expansion=2)
    mixes_like(layer, named_layer("ttt_mlp", mini_batch_size=4), initial_state=layer.start_weights(2))
    layer = TitansMemory(16, 2)
    mixes_like(layer, named_layer("titans"), initial_state=layer.start_weights(2))

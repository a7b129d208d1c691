"""Every registered mixer reads one token at a time: stepping through a sequence gives the outputs of its
whole-sequence forward pass, from its own recurrent form (``mix_step``) and its own initial state."""

import pytest
import torch

from tests.helpers import relative_error
from ttr_edu.layers import MEMORY_MIXERS, MIXERS, DeltaNet, LinearAttention, Longhorn, MesaLayer, SoftmaxAttention
from ttr_edu.layers.base import MixerState

REGISTERED = {**MIXERS, **MEMORY_MIXERS}
#: options that change the recurrent form a layer steps with, beside the registry's defaults
VARIANTS = {
    "linear_attention_normalized": lambda: LinearAttention(8, 2, normalize=True, sum_norm=True),
    "linear_attention_dpfp": lambda: LinearAttention(8, 2, "dpfp", feature_map_params={"nu": 1}),
    "mesa_gated": lambda: MesaLayer(8, 2, use_gate=True),
    "softmax_qk_norm": lambda: SoftmaxAttention(8, 2, qk_norm=True),
    "longhorn_diagonal": lambda: Longhorn(8, 2, diagonal=True),
    "deltanet_no_conv": lambda: DeltaNet(8, 2, use_short_conv=False),
    "ttt_linear_b3": lambda: MEMORY_MIXERS["ttt_linear"](8, 2, mini_batch_size=3),
    "ttt_mlp_b3": lambda: MEMORY_MIXERS["ttt_mlp"](8, 2, mini_batch_size=3, expansion=2),
}
LAYERS = {**{name: (lambda cls=cls: cls(8, 2)) for name, cls in REGISTERED.items()}, **VARIANTS}


def step_through(layer, x):
    state, outputs = layer.initial_state(x.shape[0]), []
    for t in range(x.shape[1]):
        o, state = layer.step(x[:, t], state)
        outputs.append(o)
    return torch.stack(outputs, dim=1), state


@pytest.mark.parametrize("name", list(LAYERS))
def test_stepping_equals_the_forward_pass(name):
    torch.manual_seed(0)
    layer = LAYERS[name]().double()
    x = torch.randn(3, 11, 8, dtype=torch.float64)
    with torch.no_grad():
        stepped, state = step_through(layer, x)
        full = layer(x)
    assert relative_error(stepped, full) < 1e-12, relative_error(stepped, full)
    assert isinstance(state, MixerState) and state.window.shape[1] == layer.receptive_field


def test_every_registered_mixer_has_its_own_step():
    """A new mixer must define its recurrent form: the template's mix_step raises NotImplementedError."""
    for name, cls in REGISTERED.items():
        assert "mix_step" in {n for klass in cls.__mro__[:-3] for n in vars(klass)}, name


def test_a_step_is_checked():
    layer = DeltaNet(8, 2)
    state = layer.initial_state(2)
    with pytest.raises(TypeError, match="state"):
        layer.step(torch.randn(2, 8), None)
    with pytest.raises(ValueError, match=r"x: expected one token per sequence, shape \(B, hidden_size\)"):
        layer.step(torch.randn(2, 1, 8), state)
    _, state = layer.step(torch.randn(2, 8), state)
    with pytest.raises(ValueError, match="batch size of the state"):
        layer.step(torch.randn(3, 8), state)
    with pytest.raises(ValueError, match="batch_size"):
        layer.initial_state(0)

"""Every registered mixer reads one token at a time: stepping through a sequence gives the outputs of its
whole-sequence forward pass, from its own recurrent form (``mix_step``) and its own initial state. (Every feature map
and convolution setting, and the mixers as the MQAR model builds them: ``test_pipeline.py``.)"""

import pytest
import torch

from tests.helpers import relative_error
from ttr_edu._internal import validation
from ttr_edu.layers import REGISTRY, DeltaNet, LinearAttention, Longhorn, MesaLayer, SoftmaxAttention, base
from ttr_edu.layers.base import Mixer, MixerState, ShortConvolution

#: options that change the recurrent form a layer steps with, beside the registry's options
VARIANTS = {
    "linear_attention_normalized": lambda: LinearAttention(8, 2, normalize=True, sum_norm=True),
    "linear_attention_dpfp": lambda: LinearAttention(8, 2, "dpfp", feature_map_params={"nu": 1}),
    "linear_attention_favor_plus": lambda: LinearAttention(8, 2, "favor_plus", use_short_conv=False),
    "mesa_ungated_exact": lambda: MesaLayer(8, 2, solver="exact"),
    "softmax_qk_norm": lambda: SoftmaxAttention(8, 2, qk_norm=True),
    "longhorn_diagonal": lambda: Longhorn(8, 2, diagonal=True),
    "deltanet_no_beta_relu": lambda: DeltaNet(8, 2, use_beta=False, feature_map="relu"),
    "deltanet_conv_2": lambda: DeltaNet(8, 2, conv_size=2),
    "ttt_linear_b3": lambda: REGISTRY["ttt_linear"](8, 2, mini_batch_size=3),
    "ttt_mlp_b3": lambda: REGISTRY["ttt_mlp"](8, 2, mini_batch_size=3, expansion=2),
    "deltaproduct_3": lambda: REGISTRY["deltaproduct"](8, 2, num_householder=3),
}
LAYERS = {**{name: (lambda spec=spec: spec(8, 2)) for name, spec in REGISTRY.items()}, **VARIANTS}


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
    assert isinstance(state, MixerState) and state.batch_size == 3
    if layer.use_short_conv:  # the convolution keeps the inputs its next output needs, no more
        assert state.conv.shape[1] == layer.qkv_conv1d.conv_size - 1


def test_every_registered_mixer_has_its_own_step():
    """A new mixer must define its recurrent form: the template's mix_step raises NotImplementedError."""
    for name, spec in REGISTRY.items():
        assert spec.layer.mix_step is not Mixer.mix_step and spec.layer.mix is not Mixer.mix, name


def test_a_step_is_checked():
    layer = DeltaNet(8, 2)
    state = layer.initial_state(2)
    with pytest.raises(TypeError, match="state: expected a MixerState"):
        layer.step(torch.randn(2, 8), None)
    with pytest.raises(ValueError, match=r"x: expected one token per sequence, shape \(B, hidden_size\)"):
        layer.step(torch.randn(2, 1, 8), state)
    with pytest.raises(ValueError, match="x: expected the batch size of the state"):
        layer.step(torch.randn(3, 8), state)
    _, state = layer.step(torch.randn(2, 8), state)
    with pytest.raises(ValueError, match="x: expected the batch size of the state"):
        layer.step(torch.randn(3, 8), state)
    with pytest.raises(ValueError, match="batch_size"):
        layer.initial_state(0)


@pytest.mark.parametrize("activation", ["silu", None, (None, None, "silu"), ("silu", None, "silu")])
def test_a_convolution_steps_as_it_convolves(activation):
    """One token from the cache of the previous inputs is the whole sequence's convolution at that position, with
    the activation of each group of channels."""
    torch.manual_seed(0)
    conv = ShortConvolution(6, conv_size=4, activation=activation).double()
    x = torch.randn(2, 9, 6, dtype=torch.float64)
    full, cache = conv(x), None
    for t in range(9):
        y, cache = conv.step(x[:, t], cache)
        assert torch.allclose(y, full[:, t], rtol=1e-13, atol=1e-13)
        assert cache.shape[1] == min(t + 1, 3)
    linear = conv.conv(x.transpose(1, 2))[..., :9].transpose(1, 2)
    groups = [activation] * 3 if activation is None or isinstance(activation, str) else activation
    for g, act in enumerate(groups):
        want = linear[..., 2 * g : 2 * g + 2]
        assert torch.allclose(full[..., 2 * g : 2 * g + 2], torch.nn.functional.silu(want) if act else want)


def test_a_convolution_refuses_groups_that_do_not_divide_its_channels():
    with pytest.raises(ValueError, match="activation: expected one activation or one per group"):
        ShortConvolution(6, activation=("silu", None, None, "silu"))
    with pytest.raises(ValueError, match="activation"):
        ShortConvolution(6, activation="relu")


def test_the_unchecked_step_is_the_step_and_scans_nothing(monkeypatch):
    """step checks x once and runs step_unchecked; step_unchecked alone gives the same outputs and states without a
    single call of the input policy or scan for NaN/inf (a language model's generation checks its prompt once, then
    steps unchecked)."""
    torch.manual_seed(0)
    x = torch.randn(2, 7, 8)
    for name, spec in REGISTRY.items():
        layer = spec(8, 2)
        with torch.no_grad():
            stepped, _ = step_through(layer, x)
            calls = []
            monkeypatch.setattr(base, "check_layer_input", lambda *a: calls.append(a))
            monkeypatch.setattr(validation, "all_finite", lambda *a: calls.append(a))
            state, unchecked = layer.initial_state(2), []
            for t in range(7):
                o, state = layer.step_unchecked(x[:, t], state)
                unchecked.append(o)
            monkeypatch.undo()
        assert calls == [] and torch.equal(torch.stack(unchecked, dim=1), stepped), name
        assert validation.finite_checks_enabled(), name  # the scans are back on after the step

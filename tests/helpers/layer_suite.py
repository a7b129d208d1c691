"""The layer suite: what every registered mixer must do, as functions of its :class:`~ttr_edu.layers.MixerSpec`.

``tests/layers`` runs each check on every spec of the registry; a mixer added anywhere (a test file, a notebook)
runs them all with :func:`run_layer_suite`.
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch

from tests.helpers import relative_error
from ttr_edu._internal import validation
from ttr_edu.layers import QK_FEATURE_MAPS, MixerSpec, base
from ttr_edu.models.lm import LMConfig, TinyLM, generate
from ttr_edu.regression import named_layer

__all__ = [
    "feature_maps",
    "check_shape_gradients_and_causality",
    "check_bad_input_is_named",
    "check_steps_as_it_forwards",
    "check_mixes_as_its_named_layer",
    "check_state_size",
    "checks_while_generating",
    "run_layer_suite",
]


def x(seed=0, T=12, hidden=16, dtype=torch.float32):
    return torch.randn(2, T, hidden, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def feature_maps(spec: MixerSpec) -> list[dict]:
    """The feature-map options to try: every name of ``QK_FEATURE_MAPS`` for a parametric mixer, none otherwise."""
    return [{"feature_map": name} for name in QK_FEATURE_MAPS] if spec.parametric else [{}]


def check_shape_gradients_and_causality(spec: MixerSpec, **options) -> None:
    torch.manual_seed(0)
    layer = spec(16, 2, **options)
    inputs = x().requires_grad_()
    y = layer(inputs)
    assert y.shape == (2, 12, 16)
    y.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in layer.parameters() if p.requires_grad)
    changed = inputs.detach().clone()
    changed[:, 7:] += 1.0  # the future changes ...
    assert torch.allclose(layer(changed)[:, :7], y[:, :7].detach(), atol=1e-6)  # ... the past does not


def check_bad_input_is_named(spec: MixerSpec) -> None:
    layer = spec(16, 2)
    with pytest.raises(ValueError, match="x: expected shape"):
        layer(torch.randn(2, 12, 8))
    with pytest.raises(TypeError, match="x"):
        layer(torch.ones(2, 12, 16, dtype=torch.long))
    with pytest.raises(ValueError, match="x: expected finite values"):
        layer(torch.full((2, 12, 16), float("nan")))
    state = layer.initial_state(2)
    with pytest.raises(ValueError, match=r"x: expected one token per sequence"):
        layer.step(torch.randn(2, 1, 16), state)
    with pytest.raises(ValueError, match="x: expected the batch size of the state"):
        layer.step(torch.randn(3, 16), state)


def check_steps_as_it_forwards(layer: torch.nn.Module) -> None:
    """``step`` from ``initial_state`` over a sequence equals ``forward`` at every position (fp64)."""
    torch.manual_seed(1)
    layer = layer.double()
    inputs = torch.randn(2, 9, layer.hidden_size, dtype=torch.float64)
    with torch.no_grad():
        full = layer(inputs)
        state, outputs = layer.initial_state(2), []
        for t in range(inputs.shape[1]):
            o, state = layer.step(inputs[:, t], state)
            outputs.append(o)
    err = relative_error(torch.stack(outputs, dim=1), full)
    # fp64, two orders of summation over 9 tokens, then a division by the sum normaliser, which can be small: the
    # step and forward differ by rounding alone, a few thousand ulps at most (1e-12 failed once at 1.02e-12)
    assert err < 1e4 * torch.finfo(torch.float64).eps, err


def check_mixes_as_its_named_layer(spec: MixerSpec) -> None:
    """The layer's op on its own inputs equals the regression framework's layer of the same name (fp64), with the
    layer's ridge, Householder steps or mini-batch, and its learned starting weights where it has them."""
    assert spec.named_layer is not None, spec.name
    torch.manual_seed(1)
    layer = spec(16, 2).double()
    options = {
        name: getattr(layer, name) for name in ("ridge", "num_householder", "mini_batch_size") if hasattr(layer, name)
    }
    framework = named_layer(spec.named_layer, **options)
    with torch.no_grad():
        inputs = layer.project(x(1, dtype=torch.float64))
        got = layer.mix(**inputs)
        call = dict(inputs)
        if call["k"].dim() == 5:  # several pairs per token: the ops take token t's j-th pair at row t·n_h + j
            call.update({n: call[n].flatten(1, 2) for n in ("k", "v", "beta")})
        if hasattr(layer, "start_weights"):
            call["initial_state"] = layer.start_weights(2)
        q, k, v = call.pop("q"), call.pop("k"), call.pop("v")
        want = framework(q, k, v, **call)[0]
        if hasattr(layer, "o_norm"):
            want = layer.o_norm(want)
    err = relative_error(got, want)
    assert err < 1e-10, (spec.name, err)


def check_state_size(spec: MixerSpec) -> None:
    """A parametric memory keeps a fixed number of floats at any length; a key-value cache grows with it."""
    layer = spec(16, 2)
    grows = layer.state_size(64) > layer.state_size(8)
    assert layer.state_size(8) > 0 and grows != spec.parametric, (spec.name, spec.parametric)
    assert (layer.feature_map is not None) == spec.parametric, "a parametric mixer takes a feature map"


def checks_while_generating(model: TinyLM, prompt_length: int = 4, num_tokens: int = 16) -> tuple[int, int]:
    """``(layer input checks, scans for NaN/inf)`` while :func:`generate` reads a prompt and samples."""
    counts = {"layer": 0, "scans": 0}
    check_layer_input, all_finite = base.check_layer_input, validation.all_finite

    def counted_check(*args):
        counts["layer"] += 1
        return check_layer_input(*args)

    def counted_scan(*args):
        counts["scans"] += 1
        return all_finite(*args)

    prompt = torch.arange(1, prompt_length + 1)[None]
    with mock.patch.object(base, "check_layer_input", counted_check):
        with mock.patch.object(validation, "all_finite", counted_scan):
            generate(model, prompt, num_tokens, temperature=0)
    return counts["layer"], counts["scans"]


def run_layer_suite(spec: MixerSpec) -> None:
    """Every check of the suite on ``spec``: shapes, gradients and causality and ``step == forward`` for every
    feature map it takes, with and without the short convolution; named errors; its state size; its point of the
    regression framework (when it names one); and a language model that generates with it without a check per
    token."""
    for fm in feature_maps(spec):
        for conv in (True, False):
            check_shape_gradients_and_causality(spec, use_short_conv=conv, **fm)
            check_steps_as_it_forwards(spec(8, 2, use_short_conv=conv, **fm))
    check_bad_input_is_named(spec)
    check_state_size(spec)
    if spec.named_layer is not None:
        check_mixes_as_its_named_layer(spec)
    torch.manual_seed(0)
    assert checks_while_generating(TinyLM(LMConfig(mixer=spec.name, d_model=16, num_heads=2))) == (0, 0)

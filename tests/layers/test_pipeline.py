"""A layer owns its whole input pipeline: projections, the short convolution and its activation, the feature map,
the norms and β or the gate, one path for ``forward`` and for ``step``.

Three properties of that pipeline, each of which once failed:

* the activation on ``q`` and ``k`` is applied once, as flash-linear-attention's ``DeltaNet`` applies it;
* stepping equals the forward pass for every registered mixer, every feature map it takes, with and without the
  short convolution, and as the MQAR model builds it;
* :func:`ttr_edu.models.lm.generate` checks its arguments once: no layer check and no scan for NaN/inf per token.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.helpers import relative_error
from tests.helpers.layer_suite import check_steps_as_it_forwards, checks_while_generating, feature_maps
from ttr_edu import ops
from ttr_edu.layers import QK_FEATURE_MAPS, REGISTRY, DeltaNet
from ttr_edu.models.lm import LMConfig, TinyLM
from ttr_edu.models.mqar import MODELS, MQARModel

#: the parametric mixers whose feature map is the short convolution's SiLU
SILU_BY_DEFAULT = [name for name, spec in REGISTRY.items() if spec(8, 2).feature_map == "silu"]


def _linear_conv(layer, x):
    """The short convolution's linear output over ``x`` ``(B, T, hidden)``: ``(B, T, channels)``, no activation."""
    T = x.shape[1]
    return layer.qkv_conv1d.conv(layer.qkv_proj(x).transpose(1, 2))[..., :T].transpose(1, 2)


@pytest.mark.parametrize("name", SILU_BY_DEFAULT)
def test_the_activation_on_q_and_k_is_applied_once(name):
    """``k = l2(silu(conv(W_k x)))``, one SiLU, as fla's DeltaNet: its q and k convolutions end in SiLU
    (``activation='silu' if qk_activation == 'silu' else None``) and no second activation follows when
    ``qk_activation == 'silu'`` (fla-org/flash-linear-attention at bc3b101dcb713ddc5bd8924b66754eb68b5ccf89,
    ``fla/layers/delta_net.py`` lines 139-150 and 226-232)."""
    torch.manual_seed(0)
    layer = REGISTRY[name](16, 2).double()
    x = torch.randn(2, 10, 16, dtype=torch.float64)
    with torch.no_grad():
        k = layer.project(x)["k"]
        raw_k = _linear_conv(layer, x)[..., 16:32].unflatten(-1, (2, 8))
    if k.dim() == 5:  # DeltaProduct: (B, T, n_h, H, D), the first key of each token is the shared projection's
        k = k[:, :, 0]
    once, twice = F.normalize(F.silu(raw_k), dim=-1), F.normalize(F.silu(F.silu(raw_k)), dim=-1)
    assert relative_error(k, once) < 1e-12, f"k is l2(silu(silu(conv))): {relative_error(k, twice) < 1e-12}"


def test_deltanet_is_fla_deltanet_written_out():
    """The whole forward pass of :class:`DeltaNet` against fla's layer written out from its source (the commit and lines
    above, and ``fla/layers/delta_net.py`` lines 238-241 for β, 256 and 267 for the L2 norm in the kernel, 284-286 for
    the output norm and projection): SiLU'd short convolutions on q, k, v, L2-normalised q and k, ``β = σ(W_β x)``, the
    delta rule, an RMSNorm per head, the output projection."""
    torch.manual_seed(0)
    layer = DeltaNet(16, 2).double()
    x = torch.randn(2, 10, 16, dtype=torch.float64)
    with torch.no_grad():
        q, k, v = F.silu(_linear_conv(layer, x)).unflatten(-1, (3, 2, 8)).unbind(2)
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        beta = torch.sigmoid(layer.b_proj(x))
        o, _ = ops.delta_rule_recurrent(q, k, v, beta)
        want = layer.o_proj(layer.o_norm(o).flatten(-2))
        got = layer(x)
    assert relative_error(got, want) < 1e-12


@pytest.mark.parametrize("conv", [True, False], ids=["conv", "no_conv"])
@pytest.mark.parametrize("feature_map", QK_FEATURE_MAPS)
@pytest.mark.parametrize("name", list(MODELS))
def test_an_mqar_mixer_steps_as_it_forwards(name, feature_map, conv):
    torch.manual_seed(0)
    if not MODELS[name].parametric and feature_map != "silu":
        pytest.skip("a key-value-cache layer takes no feature map")
    model = MQARModel(name, 32, 8, 2, feature_map=feature_map, use_short_conv=conv)
    check_steps_as_it_forwards(model.mixer)


@pytest.mark.parametrize("conv", [True, False], ids=["conv", "no_conv"])
@pytest.mark.parametrize("name", list(REGISTRY))
def test_a_registered_mixer_steps_as_it_forwards_with_every_feature_map(name, conv):
    torch.manual_seed(0)  # the layers' initial weights: the same run every time
    for options in feature_maps(REGISTRY[name]):
        check_steps_as_it_forwards(REGISTRY[name](8, 2, use_short_conv=conv, **options))


@pytest.mark.parametrize("name", list(REGISTRY))
def test_generate_checks_its_arguments_once(name):
    """20 tokens (a prompt of 4, then 16 sampled) through a 2-block model: no layer check and no scan per token
    (``generate`` checks the prompt's ids, which needs no scan for NaN)."""
    torch.manual_seed(0)
    model = TinyLM(LMConfig(mixer=name, d_model=16, num_heads=2))
    assert checks_while_generating(model) == (0, 0)

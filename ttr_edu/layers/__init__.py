"""Token mixers as ``torch.nn.Module``: each test-time-regression layer with its whole input pipeline.

Every mixer maps ``x`` ``(B, T, hidden_size)`` to the same shape through the template of :mod:`.base` (its
projections, short convolution and its activation, feature map, norms, β or gate, the op of :mod:`ttr_edu.ops`, a
per-head norm, the output projection), and reads one token at a time with :meth:`~ttr_edu.layers.base.Mixer.step`
from :meth:`~ttr_edu.layers.base.Mixer.initial_state`, through the same pipeline.

* :mod:`.linear`: the parametric memories of chapters 04 and 06 (linear attention, DeltaNet, gated DeltaNet, RLS /
  Mesa); :mod:`.local`: the nonparametric ones of chapter 07 (softmax and local linear attention), which keep the
  key-value cache; together :data:`MIXERS`;
* :mod:`.memory`: chapter 08's adaptive steps and deep memories (Longhorn, DeltaProduct, TTT-Linear, TTT-MLP,
  Titans), :data:`MEMORY_MIXERS`;
* :mod:`.regression`: :class:`RegressionMixer`, any point of the design space through the regression framework
  (chapter 13): the generic path, slower, the one layer that does not call an op (``register_point``).

:mod:`.registry` holds one :class:`MixerSpec` per mixer; :data:`MIXERS`, :data:`MEMORY_MIXERS` and the models' lists
are views of it, and :func:`register` adds a mixer to all of them.

Constructor arguments are named as in flash-linear-attention's layers (``hidden_size``, ``num_heads``,
``use_short_conv``, ``conv_size``, ``use_beta``, ``feature_map``, ``qk_norm``).

Each layer's ``state_size(seq_len)`` counts the floats it keeps per sequence to produce the next output: the fixed
``H · D_k · D_v`` of a parametric memory (plus ``H · D_k²`` for RLS's inverse covariance), or the key-value cache
``2 · T · hidden_size`` of a nonparametric one.
"""

from ttr_edu.layers.base import QK_FEATURE_MAPS, Mixer, MixerState, ShortConvolution
from ttr_edu.layers.linear import DeltaNet, GatedDeltaNet, LinearAttention, MesaLayer
from ttr_edu.layers.local import LocalLinearAttention, SoftmaxAttention
from ttr_edu.layers.memory import TTTMLP, DeltaProduct, Longhorn, TitansMemory, TTTLinear
from ttr_edu.layers.registry import REGISTRY, MixerSpec, SpecView, register, unregister
from ttr_edu.layers.regression import RegressionMixer, register_point

__all__ = [
    "Mixer",
    "MixerState",
    "ShortConvolution",
    "QK_FEATURE_MAPS",
    "LinearAttention",
    "DeltaNet",
    "GatedDeltaNet",
    "MesaLayer",
    "SoftmaxAttention",
    "LocalLinearAttention",
    "Longhorn",
    "DeltaProduct",
    "TTTLinear",
    "TTTMLP",
    "TitansMemory",
    "RegressionMixer",
    "register_point",
    "MixerSpec",
    "SpecView",
    "REGISTRY",
    "register",
    "unregister",
    "MIXERS",
    "MEMORY_MIXERS",
]

#: name -> :class:`MixerSpec` of the layers of chapters 04–07 (``MIXERS[name](hidden_size, num_heads)`` builds one);
#: the names match :data:`ttr_edu.regression.NAMED_LAYERS`.
MIXERS: SpecView[MixerSpec] = SpecView(lambda spec: spec.family == "mixer")
#: name -> :class:`MixerSpec` of chapter 08's adaptive steps and deep memories; the names match
#: :data:`ttr_edu.regression.NAMED_LAYERS`.
MEMORY_MIXERS: SpecView[MixerSpec] = SpecView(lambda spec: spec.family == "memory")

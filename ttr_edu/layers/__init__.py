"""Token mixers as ``torch.nn.Module``: each test-time-regression layer with its projections, heads and gates.

Every mixer maps ``x`` ``(B, T, hidden_size)`` to the same shape through the template of :mod:`.base`
(project, short convolution, the op of :mod:`ttr_edu.ops`, a per-head norm, the output projection), and reads one
token at a time with :meth:`~ttr_edu.layers.base._Mixer.step` from :meth:`~ttr_edu.layers.base._Mixer.initial_state`.

* :mod:`.linear`: the parametric memories of chapters 04 and 06 (linear attention, DeltaNet, gated DeltaNet, RLS /
  Mesa), named in :data:`MIXERS` with the nonparametric ones of :mod:`.local` (softmax and local linear attention);
* :mod:`.memory`: adaptive steps and deep memories (Longhorn, DeltaProduct, TTT-Linear, TTT-MLP, Titans), named in
  :data:`MEMORY_MIXERS` (kept out of :data:`MIXERS`, whose every entry the main MQAR grid trains).

Constructor arguments are named as in flash-linear-attention's layers (``hidden_size``, ``num_heads``,
``use_short_conv``, ``conv_size``, ``use_beta``, ``feature_map``, ``qk_norm``).

Each layer's ``state_size(seq_len)`` counts the floats it keeps per sequence to produce the next output: the fixed
``H · D_k · D_v`` of a parametric memory (plus ``H · D_k²`` for RLS's inverse covariance), or the key-value cache
``2 · T · hidden_size`` of a nonparametric one.
"""

from ttr_edu.layers.base import MAX_CONV_SIZE, ShortConvolution, check_layer_input
from ttr_edu.layers.linear import DeltaNet, GatedDeltaNet, LinearAttention, MesaLayer
from ttr_edu.layers.local import LocalLinearAttention, SoftmaxAttention
from ttr_edu.layers.memory import TTTMLP, DeltaProduct, Longhorn, TitansMemory, TTTLinear

__all__ = [
    "ShortConvolution",
    "check_layer_input",
    "MAX_CONV_SIZE",
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
    "MIXERS",
    "MEMORY_MIXERS",
]

#: name -> layer class; the names match :data:`ttr_edu.regression.NAMED_LAYERS` where the layer is one of them.
MIXERS = {
    "linear_attention": LinearAttention,
    "deltanet": DeltaNet,
    "gated_deltanet": GatedDeltaNet,
    "mesa": MesaLayer,
    "softmax_attention": SoftmaxAttention,
    "local_linear_attention": LocalLinearAttention,
}

#: name -> layer class for the adaptive steps and deep memories; the names match
#: :data:`ttr_edu.regression.NAMED_LAYERS`.
MEMORY_MIXERS = {
    "longhorn": Longhorn,
    "deltaproduct": DeltaProduct,
    "ttt_linear": TTTLinear,
    "ttt_mlp": TTTMLP,
    "titans": TitansMemory,
}

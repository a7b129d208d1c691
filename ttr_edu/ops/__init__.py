"""Pure-PyTorch reference layers, one module per family, every form of a layer side by side.

All follow the flash-linear-attention convention (CONTRIBUTING.md, "Conventions"): ``q, k`` are ``(B, T, H, D_k)``,
``v`` is ``(B, T, H, D_v)``, ``beta`` and the log decay ``g`` are ``(B, T, H)``, the state ``S`` is ``(B, H, D_k, D_v)``
in fp32 (fp64 for fp64 inputs), ``o_t = S_tᵀ q_t``, ``scale`` defaults to ``D_k ** -0.5`` and every op returns
``(o, final_state)`` (``final_state`` is ``None`` unless ``output_final_state=True``).

Every public function here wears :func:`ttr_edu._internal.validation.guarded`, the input policy (NaN/inf inputs and
overflowing outputs refused by name, bool flags, scalars that fit the dtype; ``ttr_edu.finite_checks(False)`` turns the
scans off). States that are more than ``S``: normalised linear attention carries ``(S, z)``, RLS carries ``(S, P)``, the
MLP memories of TTT-MLP and Titans carry ``(W1, W2)`` (Titans adds its momentum, :class:`TitansState`); each is passed
in ``initial_state`` and returned in the same form.

Recurrent and chunk forms accept fla's ``cu_seqlens`` (variable-length sequences packed along T, ``B = 1``, states
``(N, H, D_k, D_v)``). Per-key gates ``(B, T, H, D_k)`` (fla's ``chunk_gla``) are :func:`gla_recurrent` and
:func:`gla_chunk`; the scalar gate (fla's ``simple_gla``) is ``gated_linear_attention_*``.
"""

from .delta_product import delta_product_chunk, delta_product_recurrent
from .delta_rule import delta_rule_chunk, delta_rule_parallel, delta_rule_pseudo_values, delta_rule_recurrent
from .feature_maps import (
    FEATURE_MAPS,
    FavorPlus,
    d_dot,
    dpfp,
    elu_plus_one,
    favor_plus,
    favor_plus_variance,
    get_feature_map,
    identity_feature_map,
    l2_norm,
    orthogonal_random_features,
    relu_feature_map,
    sum_norm,
)
from .gated_delta_rule import gated_delta_rule_chunk, gated_delta_rule_recurrent
from .gated_linear_attention import gated_linear_attention_chunk, gated_linear_attention_recurrent
from .gla import gla_chunk, gla_recurrent
from .linear_attention import linear_attention_chunk, linear_attention_parallel, linear_attention_recurrent
from .local_linear_attention import local_linear_attention
from .longhorn import longhorn_chunk, longhorn_diagonal_recurrent, longhorn_recurrent, longhorn_step_size
from .rls import rls_chunk, rls_exact, rls_recurrent
from .softmax_attention import softmax_attention
from .titans import TitansState, titans_recurrent
from .ttt import ttt_linear_chunk, ttt_linear_recurrent, ttt_mlp_chunk, ttt_mlp_recurrent

__all__ = [
    # feature maps and normalisations
    "elu_plus_one",
    "relu_feature_map",
    "identity_feature_map",
    "dpfp",
    "favor_plus",
    "favor_plus_variance",
    "orthogonal_random_features",
    "FavorPlus",
    "sum_norm",
    "l2_norm",
    "d_dot",
    "get_feature_map",
    "FEATURE_MAPS",
    # layers
    "linear_attention_recurrent",
    "linear_attention_parallel",
    "linear_attention_chunk",
    "delta_rule_recurrent",
    "delta_rule_parallel",
    "delta_rule_chunk",
    "delta_rule_pseudo_values",
    "gated_linear_attention_recurrent",
    "gated_linear_attention_chunk",
    "gla_recurrent",
    "gla_chunk",
    "gated_delta_rule_recurrent",
    "gated_delta_rule_chunk",
    "rls_recurrent",
    "rls_chunk",
    "rls_exact",
    "softmax_attention",
    "local_linear_attention",
    # adaptive steps and deep memories (chapter adaptive_and_deep_memories)
    "longhorn_recurrent",
    "longhorn_chunk",
    "longhorn_diagonal_recurrent",
    "longhorn_step_size",
    "delta_product_recurrent",
    "delta_product_chunk",
    "ttt_linear_recurrent",
    "ttt_linear_chunk",
    "ttt_mlp_recurrent",
    "ttt_mlp_chunk",
    "titans_recurrent",
    "TitansState",
]

"""The nonparametric token mixers: softmax attention and local linear attention, which keep the key-value cache.

Test-time regression with a nonparametric function class (Wang, Shi, Fox 2025 §4): softmax attention is the
Nadaraya–Watson smoother, local linear attention fits a kernel-weighted line around each query.
"""

from __future__ import annotations

from ttr_edu._internal.validation import check_bool, check_positive_float
from ttr_edu.layers.base import _Mixer
from ttr_edu.ops import local_linear_attention, softmax_attention

__all__ = [
    "SoftmaxAttention",
    "LocalLinearAttention",
]


class SoftmaxAttention(_Mixer):
    """Causal softmax attention: the Nadaraya–Watson smoother with kernel ``exp(scale · q·k)`` (Wang et al. 2025 §4.1).

    Args:
        hidden_size, num_heads; qk_norm: L2-normalise q and k, with a learned ``scale`` (init ``qk_scale``), so the
        kernel becomes a true Gaussian in ``‖q − k‖``; use_short_conv, conv_size.
    """

    parametric = False

    def __init__(
        self,
        hidden_size: int,
        num_heads: int = 1,
        *,
        qk_norm: bool = False,
        qk_scale: float = 10.0,
        use_short_conv: bool = True,
        conv_size: int = 4,
    ) -> None:
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size)
        self.qk_norm = check_bool("qk_norm", qk_norm)
        self.qk_scale = check_positive_float("qk_scale", qk_scale)

    def _options(self) -> dict:
        # the bandwidth 1/scale is fixed with qk_norm; the projections can still learn norms before it
        return {"scale": self.qk_scale, "qk_norm": True} if self.qk_norm else {}

    def mix(self, q, k, v):
        return softmax_attention(q, k, v, **self._options())[0]

    def mix_step(self, memory, q, k, v):
        return softmax_attention(q, k, v, initial_state=memory, output_final_state=True, **self._options())


class LocalLinearAttention(_Mixer):
    """Local linear attention (Wang et al. 2025 §4.2): a softmax-weighted line fitted around each query.

    Args:
        hidden_size, num_heads; ridge: λ > 0 on the local key covariance; use_short_conv, conv_size.
    """

    parametric = False

    def __init__(
        self,
        hidden_size: int,
        num_heads: int = 1,
        *,
        ridge: float = 1e-2,
        use_short_conv: bool = True,
        conv_size: int = 4,
    ) -> None:
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size)
        self.ridge = check_positive_float("ridge", ridge)

    def mix(self, q, k, v):
        return local_linear_attention(q, k, v, ridge=self.ridge)[0]

    def mix_step(self, memory, q, k, v):
        return local_linear_attention(q, k, v, ridge=self.ridge, initial_state=memory, output_final_state=True)

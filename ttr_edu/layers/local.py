"""The nonparametric token mixers: softmax attention and local linear attention, which keep the key-value cache.

Test-time regression with a nonparametric function class (Wang, Shi, Fox 2025 §4): softmax attention is the
Nadaraya–Watson smoother, local linear attention fits a kernel-weighted line around each query.
"""

from __future__ import annotations

from typing import Any

import torch

from ttr_edu._internal.validation import check_bool, check_positive_float
from ttr_edu.layers.base import Mixer
from ttr_edu.layers.registry import MixerSpec, register
from ttr_edu.ops import l2_norm, local_linear_attention, softmax_attention
from ttr_edu.ops.softmax_attention import attend_last

__all__ = [
    "SoftmaxAttention",
    "LocalLinearAttention",
]


class SoftmaxAttention(Mixer):
    """Causal softmax attention: the Nadaraya–Watson smoother with kernel ``exp(scale · q·k)`` (Wang et al. 2025 §4.1).

    Args:
        hidden_size, num_heads; qk_norm: L2-normalise q and k, with a learned ``scale`` (init ``qk_scale``), so the
        kernel becomes a true Gaussian in ``‖q − k‖``; use_short_conv, conv_size.
    """

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

    def mix(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """:func:`ttr_edu.ops.softmax_attention`, causal: ``(B, T, H, D)``."""
        return softmax_attention(q, k, v, **self._options())[0]

    def mix_step(self, memory: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """The newest query over the key-value cache ``memory`` ``(k, v)`` grown by this token."""
        return softmax_attention(q, k, v, initial_state=memory, output_final_state=True, **self._options())

    def mix_step_unchecked(
        self, memory: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, Any]:
        """:meth:`mix_step` through :func:`ttr_edu.ops.softmax_attention.attend_last`: no mask to build. One token
        ``(B, 1, H, D)``, the cache ``(k, v)`` ``(B, t, H, D)`` each."""
        if memory is not None:  # the cache grows by this token
            k, v = torch.cat([memory[0], k], dim=1), torch.cat([memory[1], v], dim=1)
        q_c, k_c, v_c = q, k, v
        if q.dtype not in (torch.float32, torch.float64):  # the op computes in fp32
            q_c, k_c, v_c = q.float(), k.float(), v.float()
        if self.qk_norm:
            q_c, k_c = l2_norm(q_c), l2_norm(k_c)
        o = attend_last(q_c, k_c, v_c, self.qk_scale if self.qk_norm else q.shape[-1] ** -0.5)
        return o.to(q.dtype), (k, v)


class LocalLinearAttention(Mixer):
    """Local linear attention (Wang et al. 2025 §4.2): a softmax-weighted line fitted around each query.

    Args:
        hidden_size, num_heads; ridge: λ > 0 on the local key covariance; use_short_conv, conv_size.
    """

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

    def mix(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """:func:`ttr_edu.ops.local_linear_attention`: ``(B, T, H, D)``."""
        return local_linear_attention(q, k, v, ridge=self.ridge)[0]

    def mix_step(self, memory: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """The newest query's local fit over the key-value cache ``memory`` ``(k, v)`` grown by this token."""
        return local_linear_attention(q, k, v, ridge=self.ridge, initial_state=memory, output_final_state=True)


register(
    MixerSpec(
        "softmax_attention",
        "softmax attention",
        SoftmaxAttention,
        parametric=False,
        named_layer="softmax_attention",
        mqar=True,
        fuzz={"qk_norm": ("flag", False), "qk_scale": ("positive", 10.0)},
    )
)
register(
    MixerSpec(
        "local_linear_attention",
        "local linear attention",
        LocalLinearAttention,
        parametric=False,
        named_layer="local_linear_attention",
        mqar=True,
        fuzz={"ridge": ("positive", 0.01)},
    )
)
register(
    MixerSpec(
        "softmax",
        "softmax attention",
        SoftmaxAttention,
        parametric=False,
        family="variant",
        lm=True,
        description="softmax attention (causal, no position embedding)",
    )
)

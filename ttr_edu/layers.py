"""Token mixers as ``torch.nn.Module``: each test-time-regression layer with its projections, heads and gates.

Every mixer maps ``x`` of shape ``(B, T, hidden_size)`` to the same shape, in four steps that read top to bottom:

1. project ``x`` to ``q, k, v`` (and the per-head ``beta`` and log decay ``g`` where the layer has them);
2. optionally pass ``q, k, v`` through a causal depthwise *short convolution* (``use_short_conv``, ``conv_size``),
   which lets a key see the previous token: the one-layer associative-recall circuit needs exactly that;
3. mix with the reference op of :mod:`ttr_edu.ops` in the fla layout ``(B, T, H, D)``;
4. normalise each head's output (RMSNorm, for the parametric layers) and project back.

Constructor arguments are named as in flash-linear-attention's layers (``hidden_size``, ``num_heads``,
``use_short_conv``, ``conv_size``, ``use_beta``, ``feature_map``, ``qk_norm``). The layers are the ones the MQAR
models of chapter 8 use (:mod:`ttr_edu.models_mqar`); :data:`MIXERS` names them.

Each layer's ``state_size(seq_len)`` counts the floats it keeps per sequence to produce the next output: the fixed
``H · D_k · D_v`` of a parametric memory (plus ``H · D_k²`` for RLS's inverse covariance), or the key-value cache
``2 · T · hidden_size`` of a nonparametric one.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ttr_edu._validation import Dims, check_bool, check_finite, check_positive_float, check_positive_int
from ttr_edu.ops import (
    delta_rule_chunk,
    gated_delta_rule_chunk,
    get_feature_map,
    l2_norm,
    linear_attention_chunk,
    local_linear_attention,
    softmax_attention,
    sum_norm,
)
from ttr_edu.ops.feature_maps import d_dot
from ttr_edu.regression import ExactSolve, Gates, Linear, RecursiveLeastSquares, TestTimeRegression, Uniform

__all__ = [
    "ShortConvolution",
    "LinearAttention",
    "DeltaNet",
    "GatedDeltaNet",
    "MesaLayer",
    "SoftmaxAttention",
    "LocalLinearAttention",
    "MIXERS",
]


class ShortConvolution(nn.Module):
    """A causal depthwise convolution over time with a SiLU, ``(B, T, C) -> (B, T, C)`` (as fla's ``ShortConvolution``).

    Each channel mixes its own last ``conv_size`` time steps, so a key can hold the previous token.
    """

    def __init__(self, hidden_size: int, conv_size: int = 4) -> None:
        super().__init__()
        self.hidden_size = check_positive_int("hidden_size", hidden_size)
        self.conv_size = check_positive_int("conv_size", conv_size)
        if conv_size > MAX_CONV_SIZE:
            raise ValueError(
                f"conv_size: a short convolution mixes a few neighbouring tokens; expected 1 to {MAX_CONV_SIZE}, "
                f"got {conv_size}"
            )
        self.conv = nn.Conv1d(hidden_size, hidden_size, conv_size, groups=hidden_size, padding=conv_size - 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, hidden_size) -> (B, T, hidden_size)``. Raises as :func:`check_layer_input`."""
        check_layer_input(self, x)
        T = x.shape[1]
        y = self.conv(x.transpose(1, 2))[..., :T]  # (B, C, T); padding both sides, the right end cut: causal
        return F.silu(y.contiguous()).transpose(1, 2)


#: The longest short convolution: fla's layers use 4; a huge kernel would only run (for minutes) over padding.
MAX_CONV_SIZE = 64


def check_layer_input(module: nn.Module, x) -> None:
    """The input policy for a layer's ``x`` (``ttr_edu._validation``): a floating ``(B, T, hidden_size)`` tensor
    with ``B, T ≥ 1``, finite, and of the dtype and device of the module's parameters.

    Raises:
        TypeError: not a floating tensor, or a dtype other than the module's (``module.to(dtype)`` converts it).
        ValueError: a wrong shape, an empty batch or sequence, NaN/inf entries, another device.
    """
    dims = Dims(hidden_size=module.hidden_size)
    dims.bind("x", x, ("B", "T", "hidden_size"))
    if dims["B"] == 0 or dims["T"] == 0:
        raise ValueError(f"x: expected B >= 1 and T >= 1, got shape {tuple(x.shape)}")
    weight = next(module.parameters(), None)
    if weight is not None and x.dtype != weight.dtype:
        raise TypeError(
            f"x: expected the dtype of the module's parameters ({weight.dtype}), got {x.dtype}; convert one of them "
            f"(x.to({weight.dtype}) or module.to({x.dtype}))"
        )
    if weight is not None and x.device != weight.device:
        raise ValueError(f"x: expected a tensor on {weight.device} (the module's device), got one on {x.device}")
    check_finite("x", x)


class _Mixer(nn.Module):
    """What every mixer shares: q, k, v projections, optional short convolutions, heads, the output projection."""

    parametric = True  # a fixed-size memory S (else: the key-value cache)

    def __init__(self, hidden_size: int, num_heads: int, use_short_conv: bool, conv_size: int) -> None:
        super().__init__()
        self.hidden_size = check_positive_int("hidden_size", hidden_size)
        self.num_heads = check_positive_int("num_heads", num_heads)
        if hidden_size % num_heads:
            raise ValueError(f"num_heads: must divide hidden_size={hidden_size}, got {num_heads}")
        self.head_dim = hidden_size // num_heads
        self.qkv_proj = nn.Linear(hidden_size, 3 * hidden_size, bias=False)  # q, k, v projections side by side
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.use_short_conv = check_bool("use_short_conv", use_short_conv)
        if self.use_short_conv:  # depthwise, so one convolution over the q, k, v channels is three of them
            self.qkv_conv1d = ShortConvolution(3 * hidden_size, conv_size)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(-1, (self.num_heads, self.head_dim))  # (B, T, hidden) -> (B, T, H, D)

    def project(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """``x`` ``(B, T, hidden_size)`` -> the op's inputs: ``q, k, v`` ``(B, T, H, D)`` (+ ``beta``, ``g``)."""
        check_layer_input(self, x)
        qkv = self.qkv_proj(x)
        if self.use_short_conv:
            qkv = self.qkv_conv1d(qkv)
        q, k, v = qkv.chunk(3, dim=-1)
        return {"q": self._heads(q), "k": self._heads(k), "v": self._heads(v)}

    def mix(self, **inputs: torch.Tensor) -> torch.Tensor:
        """The op: ``(B, T, H, D)`` inputs -> ``o`` ``(B, T, H, D_v)``."""
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, hidden_size) -> (B, T, hidden_size)``.

        Raises:
            TypeError: ``x`` not a floating tensor, or not of the module's dtype.
            ValueError: ``x`` not ``(B, T, hidden_size)`` with ``B, T ≥ 1``, not finite, or on another device.
        """
        o = self.mix(**self.project(x))
        return self.o_proj(o.flatten(-2))

    def state_size(self, seq_len: int) -> int:
        """Floats kept per sequence to produce the next output (see the module docstring)."""
        check_positive_int("seq_len", seq_len)
        return 2 * seq_len * self.hidden_size


def _same_width_feature_map(feature_map: str | None, head_dim: int):
    """``feature_map`` by name for a layer whose state is ``D × D`` (``None``: fla's SiLU); ``dpfp`` etc. refused."""
    if feature_map is None:
        return F.silu
    if d_dot(feature_map, head_dim) != head_dim:
        raise ValueError(f"feature_map: this layer needs a map that keeps the head width {head_dim}, "
                         f"got {feature_map!r} with d_dot {d_dot(feature_map, head_dim)}")
    return get_feature_map(feature_map)


class LinearAttention(_Mixer):
    """Linear attention (Katharopoulos et al. 2020; Schlag et al. 2021): ``S_t = S_{t−1} + φ(k_t) v_tᵀ``.

    Test-time regression: uniform weights, linear class, one gradient step from zero (Wang et al. 2025 §3.1).

    Args:
        hidden_size, num_heads: model width and heads (``D = hidden_size / num_heads``).
        feature_map: a name of :data:`ttr_edu.ops.FEATURE_MAPS` applied to q and k (``"elu_plus_one"``).
        feature_map_params: the map's parameters (``{"nu": 2}`` for ``"dpfp"``); ``"favor_plus"`` defaults to
            ``d_k = m = D`` (its random projection becomes a buffer of the layer).
        use_short_conv, conv_size: a causal depthwise convolution on q, k, v.
        normalize: divide by ``z_tᵀ φ(q_t)`` (the kernel-smoother normalisation).
        qk_norm: L2-normalise ``φ(q)`` and ``φ(k)``, as DeltaNet and the RLS layer do, so that a comparison between
            them changes the optimiser only.
        sum_norm: divide ``φ(q)`` and ``φ(k)`` by the sum of their features (Schlag et al. 2021, eq. 31), which
            they call crucial for stable training of fast-weight language models.
        output_norm: RMS-normalise each head's output (as fla's layers do). It divides every output by a
            per-token scalar, so it cancels any per-token normaliser of q (``normalize``, the q half of
            ``sum_norm``); Schlag et al.'s layers have no such norm.
    """

    def __init__(self, hidden_size: int, num_heads: int = 1, feature_map: str = "elu_plus_one", *,
                 use_short_conv: bool = True, conv_size: int = 4, normalize: bool = False,
                 feature_map_params: dict | None = None, qk_norm: bool = False, sum_norm: bool = False,
                 output_norm: bool = True) -> None:
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size)
        params = dict(feature_map_params or {})
        if feature_map == "favor_plus":
            params = {"d_k": self.head_dim, "m": self.head_dim, **params}
        self.feature_map = get_feature_map(feature_map, **params)
        self.d_k = d_dot(feature_map, self.head_dim, **{n: p for n, p in params.items() if n != "d_k"})
        self.normalize = check_bool("normalize", normalize)
        self.qk_norm = check_bool("qk_norm", qk_norm)
        self.sum_norm = check_bool("sum_norm", sum_norm)
        self.o_norm = nn.RMSNorm(self.head_dim) if check_bool("output_norm", output_norm) else nn.Identity()

    def features(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``φ(q), φ(k)``, then sum-normalised (``sum_norm``) or L2-normalised (``qk_norm``) as configured."""
        q, k = self.feature_map(q), self.feature_map(k)
        if self.sum_norm:
            q, k = sum_norm(q), sum_norm(k)
        if self.qk_norm:
            q, k = l2_norm(q), l2_norm(k)
        return q, k

    def mix(self, q, k, v):
        q, k = self.features(q, k)
        o, _ = linear_attention_chunk(q, k, v, normalize=self.normalize)
        return self.o_norm(o)

    def state_size(self, seq_len: int) -> int:
        return self.num_heads * self.d_k * self.head_dim


class DeltaNet(_Mixer):
    """DeltaNet (Schlag et al. 2021; Yang et al. 2024): ``S_t = S_{t−1} + β_t k_t (v_t − S_{t−1}ᵀ k_t)ᵀ``.

    As fla's ``DeltaNet``: SiLU then L2 norm on q and k (so ``β ‖k‖² = β`` and ``β = σ(W_β x) ∈ (0, 1)`` is stable).
    Test-time regression: uniform weights, linear class, online SGD with step β (Wang et al. 2025 §3.3).

    Args:
        hidden_size, num_heads; use_beta: a learned β head (else β = 1); use_short_conv, conv_size;
        feature_map: a name of :data:`ttr_edu.ops.FEATURE_MAPS` that keeps the width (``"identity"``,
            ``"elu_plus_one"``, ``"relu"``), applied before the L2 norm instead of the SiLU (``None``).
    """

    def __init__(self, hidden_size: int, num_heads: int = 1, *, use_beta: bool = True,
                 use_short_conv: bool = True, conv_size: int = 4, feature_map: str | None = None) -> None:
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size)
        self.feature_map = _same_width_feature_map(feature_map, self.head_dim)
        self.use_beta = check_bool("use_beta", use_beta)
        if self.use_beta:
            self.b_proj = nn.Linear(hidden_size, num_heads)
        self.o_norm = nn.RMSNorm(self.head_dim)

    def project(self, x):
        inputs = super().project(x)
        inputs["q"], inputs["k"] = l2_norm(self.feature_map(inputs["q"])), l2_norm(self.feature_map(inputs["k"]))
        inputs["beta"] = torch.sigmoid(self.b_proj(x)) if self.use_beta else x.new_ones(x.shape[:2] + (self.num_heads,))
        return inputs

    def mix(self, q, k, v, beta):
        return self.o_norm(delta_rule_chunk(q, k, v, beta, chunk_size=32, check_stability="ignore")[0])

    def state_size(self, seq_len: int) -> int:
        return self.num_heads * self.head_dim * self.head_dim


class GatedDeltaNet(DeltaNet):
    """Gated DeltaNet (Yang, Kautz, Hatamizadeh 2025): decay ``exp(g_t)``, then the delta-rule step.

    ``g = −exp(A_log) · softplus(W_a x + dt_bias)`` per head (the Mamba-2 parametrisation fla uses), so ``g < 0``.
    Test-time regression: data-dependent weights, linear class, online SGD.
    """

    def __init__(self, hidden_size: int, num_heads: int = 1, *, use_short_conv: bool = True,
                 conv_size: int = 4, feature_map: str | None = None) -> None:
        super().__init__(hidden_size, num_heads, use_beta=True, use_short_conv=use_short_conv, conv_size=conv_size,
                         feature_map=feature_map)
        self.a_proj = nn.Linear(hidden_size, num_heads, bias=False)
        self.A_log = nn.Parameter(torch.zeros(num_heads))
        # softplus(dt_bias) = 0.01 at start: α = exp(g) ≈ 0.99, a memory of ~100 tokens. A faster initial decay
        # (e.g. softplus(−2) ≈ 0.13, α ≈ 0.88) forgets the pairs before they are asked, and MQAR never takes off.
        self.dt_bias = nn.Parameter(torch.full((num_heads,), math.log(math.expm1(0.01))))

    def project(self, x):
        inputs = super().project(x)
        inputs["g"] = -self.A_log.exp() * F.softplus(self.a_proj(x) + self.dt_bias)
        return inputs

    def mix(self, q, k, v, beta, g):
        return self.o_norm(gated_delta_rule_chunk(q, k, v, g, beta, chunk_size=32, check_stability="ignore")[0])


class MesaLayer(_Mixer):
    """RLS / the Mesa layer (von Oswald et al. 2023; MesaNet, von Oswald et al. 2025): the exact ridge-regression
    memory ``S_t = (Σ γ k kᵀ + λI)⁻¹ Σ γ k vᵀ``.

    Test-time regression: (gated) weights, linear class, the exact solve (Wang et al. 2025 §3.1). q and k are
    L2-normalised so that the ridge ``lam`` is on the scale of one key. The ridge is constant in time, as in
    :func:`ttr_edu.ops.rls_recurrent` (whose module docstring explains the choice): with gates a decaying ridge
    made ``A_t`` singular (NaN outputs at ordinary gates), a constant one keeps ``A_t ⪰ λI``.

    * Without gates it runs :class:`ttr_edu.regression.RecursiveLeastSquares` (Sherman–Morrison, built from
      batched matrix products: 1.5–2× faster to train than the op's einsum loop);
    * with gates, :class:`ttr_edu.regression.ExactSolve` (one Cholesky solve per token, all tokens in one batch).
      The tests prove both equal to ``ops.rls_recurrent``.

    Args:
        hidden_size, num_heads; lam: the ridge λ > 0; use_gate: a learned forgetting gate ``g = logσ(W_a x + 4)``;
        feature_map: a width-keeping name of :data:`ttr_edu.ops.FEATURE_MAPS` applied before the L2 norm.
        solver: ``"auto"`` (as above) or ``"exact"``: the exact solve without gates too, the same function
            computed for every prefix at once (2–3× faster to train at ``D = 16``; the MQAR grid uses it).
    """

    def __init__(self, hidden_size: int, num_heads: int = 1, *, lam: float = 1.0, use_gate: bool = False,
                 use_short_conv: bool = True, conv_size: int = 4, feature_map: str = "identity",
                 solver: str = "auto") -> None:
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size)
        self.feature_map = _same_width_feature_map(feature_map, self.head_dim)
        if solver not in ("auto", "exact"):
            raise ValueError(f"solver: expected 'auto' or 'exact', got {solver!r}")
        self.lam = check_positive_float("lam", lam)
        self.use_gate = check_bool("use_gate", use_gate)
        if self.use_gate:
            self.a_proj = nn.Linear(hidden_size, num_heads)
            nn.init.constant_(self.a_proj.bias, 4.0)  # σ(4) ≈ 0.98: remember almost everything at start
        # Sherman–Morrison without gates; with them the exact solve (a constant ridge is no rank-one update)
        optimizer = ExactSolve(lam) if self.use_gate or solver == "exact" else RecursiveLeastSquares(lam)
        self.rls = TestTimeRegression(Gates() if self.use_gate else Uniform(), Linear(), optimizer)
        self.o_norm = nn.RMSNorm(self.head_dim)

    def project(self, x):
        inputs = super().project(x)
        inputs["q"], inputs["k"] = l2_norm(self.feature_map(inputs["q"])), l2_norm(self.feature_map(inputs["k"]))
        if self.use_gate:
            inputs["g"] = F.logsigmoid(self.a_proj(x))
        return inputs

    def mix(self, q, k, v, g=None):
        return self.o_norm(self.rls(q, k, v, g=g)[0])

    def state_size(self, seq_len: int) -> int:
        return self.num_heads * self.head_dim * (2 * self.head_dim)  # S and the (inverse) covariance


class SoftmaxAttention(_Mixer):
    """Causal softmax attention: the Nadaraya–Watson smoother with kernel ``exp(scale · q·k)`` (Wang et al. 2025 §4.1).

    Args:
        hidden_size, num_heads; qk_norm: L2-normalise q and k, with a learned ``scale`` (init ``qk_scale``), so the
        kernel becomes a true Gaussian in ``‖q − k‖``; use_short_conv, conv_size.
    """

    parametric = False

    def __init__(self, hidden_size: int, num_heads: int = 1, *, qk_norm: bool = False, qk_scale: float = 10.0,
                 use_short_conv: bool = True, conv_size: int = 4) -> None:
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size)
        self.qk_norm = check_bool("qk_norm", qk_norm)
        self.qk_scale = check_positive_float("qk_scale", qk_scale)

    def mix(self, q, k, v):
        if self.qk_norm:  # the bandwidth 1/scale is fixed here; the projections can still learn norms before it
            return softmax_attention(q, k, v, scale=self.qk_scale, qk_norm=True)[0]
        return softmax_attention(q, k, v)[0]


class LocalLinearAttention(_Mixer):
    """Local linear attention (Wang et al. 2025 §4.2): a softmax-weighted line fitted around each query.

    Args:
        hidden_size, num_heads; ridge: λ > 0 on the local key covariance; use_short_conv, conv_size.
    """

    parametric = False

    def __init__(self, hidden_size: int, num_heads: int = 1, *, ridge: float = 1e-2,
                 use_short_conv: bool = True, conv_size: int = 4) -> None:
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size)
        self.ridge = check_positive_float("ridge", ridge)

    def mix(self, q, k, v):
        return local_linear_attention(q, k, v, ridge=self.ridge)[0]


#: name -> layer class; the names match :data:`ttr_edu.regression.NAMED_LAYERS` where the layer is one of them.
MIXERS: dict[str, type[_Mixer]] = {
    "linear_attention": LinearAttention,
    "deltanet": DeltaNet,
    "gated_deltanet": GatedDeltaNet,
    "mesa": MesaLayer,
    "softmax_attention": SoftmaxAttention,
    "local_linear_attention": LocalLinearAttention,
}


# Adaptive steps and deep memories (chapter adaptive_and_deep_memories) live in their own module, named in its
# MEMORY_MIXERS (kept out of MIXERS, whose every entry the main MQAR grid trains).
from ttr_edu.layers_memory import MEMORY_MIXERS, TTTMLP, DeltaProduct, Longhorn, TitansMemory, TTTLinear  # noqa: E402

__all__ += ["Longhorn", "DeltaProduct", "TTTLinear", "TTTMLP", "TitansMemory", "MEMORY_MIXERS"]

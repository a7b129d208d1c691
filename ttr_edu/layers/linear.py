"""The parametric token mixers: linear attention, DeltaNet, gated DeltaNet and the RLS / Mesa layer.

Each keeps a fixed-size memory ``S`` ``(B, H, D_k, D_v)`` and is one point of test-time regression (Wang, Shi, Fox
2025). The template they share (projections, short convolution, heads, output projection) is
:class:`ttr_edu.layers.base.Mixer`.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ttr_edu._internal.deprecation import renamed_arguments
from ttr_edu._internal.validation import check_bool, check_choice, check_positive_float, check_positive_int
from ttr_edu.layers.base import Mixer
from ttr_edu.layers.registry import MixerSpec, feature_map_recipe, register
from ttr_edu.ops import (
    delta_rule_chunk,
    delta_rule_recurrent,
    gated_delta_rule_chunk,
    gated_delta_rule_recurrent,
    l2_norm,
    linear_attention_chunk,
    linear_attention_recurrent,
    rls_chunk,
    rls_exact,
    rls_recurrent,
    sum_norm,
)
from ttr_edu.ops.delta_rule import recurrent_step
from ttr_edu.ops.linear_attention import recurrent_step as linear_attention_step

__all__ = [
    "LinearAttention",
    "DeltaNet",
    "GatedDeltaNet",
    "MesaLayer",
]


class LinearAttention(Mixer):
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
        chunk_size: tokens per chunk of the chunk form (:func:`ttr_edu.ops.linear_attention_chunk`): a speed
            setting, every size computes the same function up to rounding. 64, the op's default, which this layer
            has always used (the delta-rule layers use 32).
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int = 1,
        feature_map: str = "elu_plus_one",
        *,
        use_short_conv: bool = True,
        conv_size: int = 4,
        normalize: bool = False,
        feature_map_params: dict | None = None,
        qk_norm: bool = False,
        sum_norm: bool = False,
        output_norm: bool = True,
        chunk_size: int = 64,
    ) -> None:
        super().__init__(
            hidden_size,
            num_heads,
            use_short_conv,
            conv_size,
            feature_map,
            feature_map_params=feature_map_params,
            any_width=True,
        )
        self.chunk_size = check_positive_int("chunk_size", chunk_size)
        self.normalize = check_bool("normalize", normalize)
        self.qk_norm = check_bool("qk_norm", qk_norm)
        self.sum_norm = check_bool("sum_norm", sum_norm)
        self.o_norm = nn.RMSNorm(self.head_dim) if check_bool("output_norm", output_norm) else nn.Identity()

    def op_inputs(self, x: torch.Tensor, qkv: torch.Tensor) -> dict[str, torch.Tensor]:
        """``φ(q), φ(k)`` ``(B, T, H, D_k)``, then sum-normalised (``sum_norm``) or L2-normalised (``qk_norm``) as
        configured, and ``v`` ``(B, T, H, D)``."""
        inputs = super().op_inputs(x, qkv)
        if self.sum_norm:
            inputs["q"], inputs["k"] = sum_norm(inputs["q"]), sum_norm(inputs["k"])
        if self.qk_norm:
            inputs["q"], inputs["k"] = l2_norm(inputs["q"]), l2_norm(inputs["k"])
        return inputs

    def mix(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """:func:`ttr_edu.ops.linear_attention_chunk`, then the output norm: ``(B, T, H, D_v)``."""
        o, _ = linear_attention_chunk(q, k, v, normalize=self.normalize, chunk_size=self.chunk_size)
        return self.o_norm(o)

    def mix_step(self, memory: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """:func:`ttr_edu.ops.linear_attention_recurrent` over one token ``(B, 1, H, ·)``, from and to ``memory``
        ``(B, H, D_k, D)`` (``(S, z)`` with ``normalize``)."""
        o, memory = linear_attention_recurrent(
            q, k, v, normalize=self.normalize, initial_state=memory, output_final_state=True
        )
        return self.o_norm(o), memory

    def mix_step_unchecked(
        self, memory: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, Any]:
        """One token through :func:`ttr_edu.ops.linear_attention.recurrent_step` (with ``normalize``, the pair
        ``(S, z)``: :meth:`mix_step`)."""
        if self.normalize:
            return self.mix_step(memory, q, k, v)
        B, _, H, D_k = q.shape
        n = B * H
        k, v = _compute(k, n), _compute(v, n)
        S = k.new_zeros(n, D_k, v.shape[-1]) if memory is None else memory.reshape(n, D_k, -1)
        o, S = linear_attention_step(S, _compute(q, n) * D_k**-0.5, k, v)
        return self.o_norm(o.view(B, 1, H, -1).to(q.dtype)), S.view(B, H, D_k, -1)


class DeltaNet(Mixer):
    """DeltaNet (Schlag et al. 2021; Yang et al. 2024): ``S_t = S_{t−1} + β_t k_t (v_t − S_{t−1}ᵀ k_t)ᵀ``.

    As flash-linear-attention's ``DeltaNet`` layer (``fla/layers/delta_net.py`` at commit
    ``bc3b101dcb713ddc5bd8924b66754eb68b5ccf89``): short convolutions on q, k and v that end in a SiLU, applied once
    (lines 139-155: ``activation='silu' if qk_activation == 'silu' else None`` on q and k; lines 226-232: no second
    activation when ``qk_activation == 'silu'``), then the L2 norm on q and k (``use_qk_l2norm_in_kernel``, lines
    254-267), so ``β ‖k‖² = β`` and ``β = σ(W_β x) ∈ (0, 1)`` (lines 238-241) is stable; an RMSNorm per head.
    Test-time regression: uniform weights, linear class, online SGD with step β (Wang et al. 2025 §3.3).

    Args:
        hidden_size, num_heads; use_beta: a learned β head (else β = 1); use_short_conv, conv_size;
        feature_map: ``φ`` on q and k before the L2 norm, a name of :data:`ttr_edu.layers.QK_FEATURE_MAPS`:
            ``"silu"`` (the convolution's SiLU, fla's default), ``"identity"``, ``"elu_plus_one"``, ``"relu"`` or
            ``"elu_plus_one_after_silu"``.
        chunk_size: tokens per chunk of the chunk form (:func:`ttr_edu.ops.delta_rule_chunk`), a speed setting
            (every size computes the same function up to rounding); 32, as the trained results were made with.
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int = 1,
        *,
        use_beta: bool = True,
        use_short_conv: bool = True,
        conv_size: int = 4,
        feature_map: str = "silu",
        chunk_size: int = 32,
    ) -> None:
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size, feature_map)
        self.chunk_size = check_positive_int("chunk_size", chunk_size)
        self.use_beta = check_bool("use_beta", use_beta)
        if self.use_beta:
            self.b_proj = nn.Linear(hidden_size, num_heads)
        self.o_norm = nn.RMSNorm(self.head_dim)

    def op_inputs(self, x: torch.Tensor, qkv: torch.Tensor) -> dict[str, torch.Tensor]:
        """``q, k`` ``l2(φ(·))`` and ``v`` ``(B, T, H, D)``, ``beta = σ(W_β x)`` ``(B, T, H)`` (ones without
        ``use_beta``)."""
        q, k = self._normed_qk(qkv)
        v = self._heads(qkv[..., 2 * self.hidden_size :])
        if self.use_beta:
            beta = torch.sigmoid(F.linear(x, self.b_proj.weight, self.b_proj.bias))
        else:
            beta = x.new_ones(x.shape[:2] + (self.num_heads,))
        return {"q": q, "k": k, "v": v, "beta": beta}

    def mix(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
        """:func:`ttr_edu.ops.delta_rule_chunk`, then the RMSNorm per head: ``(B, T, H, D)``."""
        return self.o_norm(delta_rule_chunk(q, k, v, beta, chunk_size=self.chunk_size, check_stability="ignore")[0])

    def mix_step(
        self, memory: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor
    ) -> tuple[torch.Tensor, Any]:
        """:func:`ttr_edu.ops.delta_rule_recurrent` over one token, from and to ``memory`` ``(B, H, D, D)``."""
        o, memory = delta_rule_recurrent(
            q, k, v, beta, initial_state=memory, output_final_state=True, check_stability="ignore"
        )
        return self.o_norm(o), memory

    def mix_step_unchecked(
        self,
        memory: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        beta: torch.Tensor,
        g: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, Any]:
        """One token of the (gated) delta rule through :func:`ttr_edu.ops.delta_rule.recurrent_step`."""
        o, memory = delta_step(memory, q, k, v, beta, g)  # o: (B·H, 1, D_v) rows, compute dtype
        o = F.rms_norm(o.to(q.dtype), self.o_norm.normalized_shape, self.o_norm.weight, self.o_norm.eps)
        return o.view(q.shape[0], 1, self.num_heads, -1), memory


class GatedDeltaNet(DeltaNet):
    """Gated DeltaNet (Yang, Kautz, Hatamizadeh 2025): decay ``exp(g_t)``, then the delta-rule step.

    ``g = −exp(A_log) · softplus(W_a x + dt_bias)`` per head (the Mamba-2 parametrisation fla uses), so ``g < 0``.
    Test-time regression: data-dependent weights, linear class, online SGD. Arguments as :class:`DeltaNet`'s (β is
    always learned).
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int = 1,
        *,
        use_short_conv: bool = True,
        conv_size: int = 4,
        feature_map: str = "silu",
        chunk_size: int = 32,
    ) -> None:
        super().__init__(
            hidden_size,
            num_heads,
            use_beta=True,
            use_short_conv=use_short_conv,
            conv_size=conv_size,
            feature_map=feature_map,
            chunk_size=chunk_size,
        )
        self.a_proj = nn.Linear(hidden_size, num_heads, bias=False)
        self.A_log = nn.Parameter(torch.zeros(num_heads))
        # softplus(dt_bias) = 0.01 at start: α = exp(g) ≈ 0.99, a memory of ~100 tokens. A faster initial decay
        # (e.g. softplus(−2) ≈ 0.13, α ≈ 0.88) forgets the pairs before they are asked, and MQAR never takes off.
        self.dt_bias = nn.Parameter(torch.full((num_heads,), math.log(math.expm1(0.01))))

    def op_inputs(self, x: torch.Tensor, qkv: torch.Tensor) -> dict[str, torch.Tensor]:
        """:class:`DeltaNet`'s inputs and the log decay ``g`` ``(B, T, H)``."""
        inputs = super().op_inputs(x, qkv)
        inputs["g"] = -self.A_log.exp() * F.softplus(F.linear(x, self.a_proj.weight) + self.dt_bias)
        return inputs

    def mix(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor, g: torch.Tensor | None = None
    ) -> torch.Tensor:
        """:func:`ttr_edu.ops.gated_delta_rule_chunk`, then the RMSNorm per head: ``(B, T, H, D)``."""
        return self.o_norm(
            gated_delta_rule_chunk(q, k, v, g, beta, chunk_size=self.chunk_size, check_stability="ignore")[0]
        )

    def mix_step(
        self,
        memory: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        beta: torch.Tensor,
        g: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, Any]:
        """:func:`ttr_edu.ops.gated_delta_rule_recurrent` over one token ``(B, 1, H, ·)``, from and to ``memory``
        ``(B, H, D, D)``."""
        o, memory = gated_delta_rule_recurrent(
            q, k, v, g, beta, initial_state=memory, output_final_state=True, check_stability="ignore"
        )
        return self.o_norm(o), memory


@renamed_arguments(lam="ridge")
class MesaLayer(Mixer):
    """RLS / the Mesa layer (von Oswald et al. 2023; MesaNet, von Oswald et al. 2025): the exact ridge-regression
    memory ``S_t = (Σ γ k kᵀ + λI)⁻¹ Σ γ k vᵀ``.

    Test-time regression: (gated) weights, linear class, the exact solve (Wang et al. 2025 §3.1). q and k are
    L2-normalised so that the ridge is on the scale of one key. The ridge is constant in time, as in
    :func:`ttr_edu.ops.rls_recurrent` (whose module docstring explains the choice): with gates a decaying ridge
    made ``A_t`` singular (NaN outputs at ordinary gates), a constant one keeps ``A_t ⪰ λI``.

    * Without gates it runs :func:`ttr_edu.ops.rls_chunk` (Woodbury: one ``C × C`` Cholesky per chunk, the
      Sherman–Morrison recursion of :func:`ttr_edu.ops.rls_recurrent` for a whole chunk at once; forward and backward
      3–6× faster at the MQAR grid's ``T = 64``, ``D = 16…64``);
    * with gates, :func:`ttr_edu.ops.rls_exact` (``A_t`` for all tokens at once, one batched Cholesky solve, the
      output read as linear attention with the query ``A_t⁻¹ q_t``).

    The tests prove both equal to :class:`ttr_edu.regression.TestTimeRegression` with
    :class:`~ttr_edu.regression.RecursiveLeastSquares` / :class:`~ttr_edu.regression.ExactSolve`, the generic path
    that explains them.

    Args:
        hidden_size, num_heads; ridge: the ridge λ > 0 (``lam`` until release 0.2, still accepted with a
        ``DeprecationWarning``); use_gate: a learned forgetting gate ``g = logσ(W_a x + 4)``;
        feature_map: ``φ`` on q and k before the L2 norm, a name of :data:`ttr_edu.layers.QK_FEATURE_MAPS`
            (``"silu"``, the convolution's SiLU, by default).
        solver: ``"auto"`` (as above), ``"recurrent"`` (:func:`~ttr_edu.ops.rls_recurrent` without gates) or
            ``"exact"`` (:func:`~ttr_edu.ops.rls_exact` without gates too): the same function, computed token by
            token or for every prefix at once. With gates every choice runs :func:`~ttr_edu.ops.rls_exact`.
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int = 1,
        *,
        ridge: float = 1.0,
        use_gate: bool = False,
        use_short_conv: bool = True,
        conv_size: int = 4,
        feature_map: str = "silu",
        solver: str = "auto",
    ) -> None:
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size, feature_map)
        self.solver = check_choice("solver", solver, ("auto", "recurrent", "exact"))
        self.ridge = check_positive_float("ridge", ridge)
        self.use_gate = check_bool("use_gate", use_gate)
        if self.use_gate:
            self.a_proj = nn.Linear(hidden_size, num_heads)
            nn.init.constant_(self.a_proj.bias, 4.0)  # σ(4) ≈ 0.98: remember almost everything at start
        self.o_norm = nn.RMSNorm(self.head_dim)

    def op_inputs(self, x: torch.Tensor, qkv: torch.Tensor) -> dict[str, torch.Tensor]:
        """``q, k`` ``l2(φ(·))`` and ``v`` ``(B, T, H, D)``; with the gate, ``g = logσ(W_a x + 4)`` ``(B, T, H)``."""
        q, k = self._normed_qk(qkv)
        inputs = {"q": q, "k": k, "v": self._heads(qkv[..., 2 * self.hidden_size :])}
        if self.use_gate:
            inputs["g"] = F.logsigmoid(self.a_proj(x))
        return inputs

    def mix(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor | None = None) -> torch.Tensor:
        """Woodbury (or Sherman–Morrison) without gates; with them the exact solve (a constant ridge is no low-rank
        update). ``(B, T, H, D)``."""
        if self.use_gate or self.solver == "exact":
            return self.o_norm(rls_exact(q, k, v, self.ridge, g=g)[0])
        form = rls_recurrent if self.solver == "recurrent" else rls_chunk
        return self.o_norm(form(q, k, v, self.ridge)[0])

    def mix_step(
        self, memory: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, Any]:
        """:func:`ttr_edu.ops.rls_recurrent` over one token, from and to ``memory`` ``(S, P)``."""
        o, memory = rls_recurrent(q, k, v, self.ridge, g=g, initial_state=memory, output_final_state=True)
        return self.o_norm(o), memory

    def state_size(self, seq_len: int) -> int:
        """``2 H D²`` floats: ``S`` and the (inverse) covariance."""
        check_positive_int("seq_len", seq_len)
        return self.num_heads * self.head_dim * (2 * self.head_dim)


register(
    MixerSpec(
        "linear_attention",
        "linear attention",
        LinearAttention,
        {"qk_norm": True},  # L2-normalised φ(q), φ(k) as every parametric memory's: only the optimiser differs
        named_layer="linear_attention",
        mqar=True,
        fuzz={
            "feature_map": feature_map_recipe("elu_plus_one"),
            "normalize": ("flag", False),
            "qk_norm": ("flag", False),
            "sum_norm": ("flag", False),
            "output_norm": ("flag", True),
            "chunk_size": ("int", 4),
            "feature_map_params": ("params", None),
        },
    )
)
# The language-modelling chapter's linear attention: ELU+1 on q and k after the convolution's SiLU, with and without
# Schlag et al.'s sum normalisation and the RMSNorm on the head outputs.
for _name, _options, _what in (
    ("linear_sumnorm", {"sum_norm": True}, "sum-normalised q and k"),
    ("linear", {}, "no sum normalisation"),
    (
        "linear_sumnorm_no_onorm",
        {"sum_norm": True, "output_norm": False},
        "sum-normalised q and k, no RMSNorm on the head outputs (as the paper)",
    ),
    ("linear_no_onorm", {"output_norm": False}, "no sum normalisation, no RMSNorm on the head outputs"),
):
    register(
        MixerSpec(
            _name,
            f"linear attention ({_name})",
            LinearAttention,
            {"feature_map": "elu_plus_one_after_silu", **_options},
            family="variant",
            lm=True,
            description=f"linear attention (sum rule), ELU+1 features after the convolution's SiLU, {_what}",
        )
    )
register(
    MixerSpec(
        "deltanet",
        "DeltaNet",
        DeltaNet,
        named_layer="deltanet",
        mqar=True,
        lm=True,
        description="DeltaNet (delta rule), SiLU + L2-normalised q and k, learned β",
        fuzz={"use_beta": ("flag", True), "chunk_size": ("int", 4), "feature_map": feature_map_recipe("silu")},
    )
)
register(
    MixerSpec(
        "gated_deltanet",
        "gated DeltaNet",
        GatedDeltaNet,
        named_layer="gated_deltanet",
        mqar=True,
        lm=True,
        description="gated DeltaNet: a learned decay, then the delta rule",
        fuzz={"chunk_size": ("int", 4), "feature_map": feature_map_recipe("silu")},
    )
)
register(
    MixerSpec(
        "rls",
        "RLS",
        MesaLayer,
        {"use_gate": False},  # the exact ridge solution in chunks (ops.rls_chunk), 3–6× faster than Sherman–Morrison
        named_layer="rls",
        mqar=True,
        fuzz={
            "ridge": ("positive", 1.0),
            "use_gate": ("flag", False),
            "solver": ("choice", "auto", ("recurrent", "exact")),
            "feature_map": feature_map_recipe("silu"),
        },
    )
)
register(
    MixerSpec(
        "mesa",
        "Mesa (gated RLS)",
        MesaLayer,
        {"use_gate": True, "solver": "exact"},
        named_layer="mesa",
        mqar=True,
    )
)


def _compute(x: torch.Tensor, rows: int) -> torch.Tensor:
    """A one-token ``(B, 1, H, ·)`` tensor as ``(B·H, 1, ·)`` rows, in the ops' compute dtype (fp32, or fp64)."""
    x = x.reshape(rows, 1, -1)
    return x if x.dtype is torch.float32 or x.dtype is torch.float64 else x.float()


def delta_step(
    memory: torch.Tensor | None,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of the (gated) delta rule for a layer, unchecked: its one-token inputs ``(B, 1, H, ·)`` and memory
    ``S`` ``(B, H, D_k, D_v)`` (``None``: zero) through :func:`ttr_edu.ops.delta_rule.recurrent_step`, at the op's
    default scale ``D_k ** -0.5``. Returns ``o`` as ``(B·H, 1, D_v)`` rows in the compute dtype, and the memory."""
    B, _, H, D_k = q.shape
    n = B * H
    k, v = _compute(k, n), _compute(v, n)
    S = k.new_zeros(n, D_k, v.shape[-1]) if memory is None else memory.reshape(n, D_k, -1)
    decay = None if g is None else _compute(g, n).exp()
    o, S = recurrent_step(S, _compute(q, n) * D_k**-0.5, k, v, _compute(beta, n), decay)
    return o, S.view(B, H, D_k, -1)

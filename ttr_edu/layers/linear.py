"""The parametric token mixers: linear attention, DeltaNet, gated DeltaNet and the RLS / Mesa layer.

Each keeps a fixed-size memory ``S`` ``(B, H, D_k, D_v)`` and is one point of test-time regression (Wang, Shi, Fox
2025). The template they share (projections, short convolution, heads, output projection) is
:class:`ttr_edu.layers.base._Mixer`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ttr_edu._internal.deprecation import renamed_arguments
from ttr_edu._internal.validation import check_bool, check_choice, check_positive_float, check_positive_int
from ttr_edu.layers.base import MixerState, _Mixer, _same_width_feature_map
from ttr_edu.ops import (
    delta_rule_chunk,
    delta_rule_recurrent,
    gated_delta_rule_chunk,
    gated_delta_rule_recurrent,
    get_feature_map,
    l2_norm,
    linear_attention_chunk,
    linear_attention_recurrent,
    rls_chunk,
    rls_exact,
    rls_recurrent,
    sum_norm,
)
from ttr_edu.ops.delta_rule import recurrent_step
from ttr_edu.ops.feature_maps import FEATURE_MAPS, d_dot
from ttr_edu.ops.linear_attention import recurrent_step as linear_attention_step

__all__ = [
    "LinearAttention",
    "DeltaNet",
    "GatedDeltaNet",
    "MesaLayer",
]


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
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size)
        self.chunk_size = check_positive_int("chunk_size", chunk_size)
        if feature_map_params is not None and not isinstance(feature_map_params, dict):
            raise TypeError(
                "feature_map_params: expected a dict such as {'nu': 2} or None, got "
                f"{type(feature_map_params).__name__}"
            )
        params = dict(feature_map_params or {})
        if feature_map == "favor_plus":
            params = {"d_k": self.head_dim, "m": self.head_dim, **params}
        check_choice("feature_map", feature_map, FEATURE_MAPS)
        try:  # an unknown or bad parameter is the caller's feature_map_params
            self.feature_map = get_feature_map(feature_map, **params)
            self.d_k = d_dot(feature_map, self.head_dim, **{n: p for n, p in params.items() if n != "d_k"})
        except (TypeError, ValueError) as error:
            raise type(error)(f"feature_map_params: {error}") from None
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
        o, _ = linear_attention_chunk(q, k, v, normalize=self.normalize, chunk_size=self.chunk_size)
        return self.o_norm(o)

    def mix_step(self, memory, q, k, v):
        q, k = self.features(q, k)
        o, memory = linear_attention_recurrent(
            q, k, v, normalize=self.normalize, initial_state=memory, output_final_state=True
        )
        return self.o_norm(o), memory

    def mix_step_unchecked(self, memory, q, k, v):
        if self.normalize:  # the pair (S, z): the op's checked step
            return self.mix_step(memory, q, k, v)
        q, k = self.features(q, k)
        B, _, H, D_k = q.shape
        n = B * H
        k, v = _compute(k, n), _compute(v, n)
        S = k.new_zeros(n, D_k, v.shape[-1]) if memory is None else memory.reshape(n, D_k, -1)
        o, S = linear_attention_step(S, _compute(q, n) * D_k**-0.5, k, v)
        return self.o_norm(o.view(B, 1, H, -1).to(q.dtype)), S.view(B, H, D_k, -1)

    def state_size(self, seq_len: int) -> int:
        check_positive_int("seq_len", seq_len)
        return self.num_heads * self.d_k * self.head_dim


class DeltaNet(_Mixer):
    """DeltaNet (Schlag et al. 2021; Yang et al. 2024): ``S_t = S_{t−1} + β_t k_t (v_t − S_{t−1}ᵀ k_t)ᵀ``.

    As fla's ``DeltaNet``: SiLU then L2 norm on q and k (so ``β ‖k‖² = β`` and ``β = σ(W_β x) ∈ (0, 1)`` is stable).
    Test-time regression: uniform weights, linear class, online SGD with step β (Wang et al. 2025 §3.3).

    Args:
        hidden_size, num_heads; use_beta: a learned β head (else β = 1); use_short_conv, conv_size;
        feature_map: a name of :data:`ttr_edu.ops.FEATURE_MAPS` that keeps the width (``"identity"``,
            ``"elu_plus_one"``, ``"relu"``), applied before the L2 norm instead of the SiLU (``None``).
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
        feature_map: str | None = None,
        chunk_size: int = 32,
    ) -> None:
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size)
        self.chunk_size = check_positive_int("chunk_size", chunk_size)
        self.feature_map = _same_width_feature_map(feature_map, self.head_dim)
        self.use_beta = check_bool("use_beta", use_beta)
        if self.use_beta:
            self.b_proj = nn.Linear(hidden_size, num_heads)
        self.o_norm = nn.RMSNorm(self.head_dim)

    def op_inputs(self, x, qkv):
        q, k = normed_qk(self.feature_map, qkv, self.num_heads, self.head_dim)
        v = self._heads(qkv[..., 2 * self.hidden_size :])
        beta = torch.sigmoid(self.b_proj(x)) if self.use_beta else x.new_ones(x.shape[:2] + (self.num_heads,))
        return {"q": q, "k": k, "v": v, "beta": beta}

    def mix(self, q, k, v, beta):
        return self.o_norm(delta_rule_chunk(q, k, v, beta, chunk_size=self.chunk_size, check_stability="ignore")[0])

    def mix_step(self, memory, q, k, v, beta):
        o, memory = delta_rule_recurrent(
            q, k, v, beta, initial_state=memory, output_final_state=True, check_stability="ignore"
        )
        return self.o_norm(o), memory

    def mix_step_unchecked(self, memory, q, k, v, beta, g=None):
        o, memory = delta_step(memory, q, k, v, beta, g)  # o: (B·H, 1, D_v) rows, compute dtype
        o = F.rms_norm(o.to(q.dtype), self.o_norm.normalized_shape, self.o_norm.weight, self.o_norm.eps)
        return o.view(q.shape[0], 1, self.num_heads, -1), memory

    def step_unchecked(self, x, state):
        # The template's step (project this token, op_inputs, mix_step_unchecked, o_proj) written out flat: the
        # same ops without the dict of inputs and the calls between them, a third of this step's time at d = 64.
        # Proven equal to the forward pass, as every mixer's step, by tests/layers/test_step.py.
        window, qkv = self._step_projection(x, state.window)  # qkv: (B, 3 hidden)
        B, H = x.shape[0], self.num_heads
        q, k = normed_qk(self.feature_map, qkv[:, None], H, self.head_dim)
        v = qkv[:, None, 2 * self.hidden_size :].view(B, 1, H, self.head_dim)
        if self.use_beta:
            beta = torch.sigmoid(F.linear(x, self.b_proj.weight, self.b_proj.bias))
        else:
            beta = x.new_ones(B, H)
        o, memory = delta_step(state.memory, q, k, v, beta, self._log_decay(x))
        if o.dtype != x.dtype:
            o = o.to(x.dtype)
        o = F.rms_norm(o, self.o_norm.normalized_shape, self.o_norm.weight, self.o_norm.eps)
        return F.linear(o.view(B, -1), self.o_proj.weight, self.o_proj.bias), MixerState(window, memory)

    def _log_decay(self, x):
        """The log decay ``g`` ``(B, H)`` of the token ``x`` ``(B, hidden_size)`` (``None``: none, the delta rule)."""
        return None

    def state_size(self, seq_len: int) -> int:
        check_positive_int("seq_len", seq_len)
        return self.num_heads * self.head_dim * self.head_dim


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
        feature_map: str | None = None,
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

    def op_inputs(self, x, qkv):
        inputs = super().op_inputs(x, qkv)
        inputs["g"] = self._log_decay(x)
        return inputs

    def _log_decay(self, x):
        return -self.A_log.exp() * F.softplus(F.linear(x, self.a_proj.weight, self.a_proj.bias) + self.dt_bias)

    def mix(self, q, k, v, beta, g):
        return self.o_norm(
            gated_delta_rule_chunk(q, k, v, g, beta, chunk_size=self.chunk_size, check_stability="ignore")[0]
        )

    def mix_step(self, memory, q, k, v, beta, g):
        o, memory = gated_delta_rule_recurrent(
            q, k, v, g, beta, initial_state=memory, output_final_state=True, check_stability="ignore"
        )
        return self.o_norm(o), memory


@renamed_arguments(lam="ridge")
class MesaLayer(_Mixer):
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
        feature_map: a width-keeping name of :data:`ttr_edu.ops.FEATURE_MAPS` applied before the L2 norm.
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
        feature_map: str = "identity",
        solver: str = "auto",
    ) -> None:
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size)
        self.feature_map = _same_width_feature_map(feature_map, self.head_dim)
        if solver not in ("auto", "recurrent", "exact"):
            raise ValueError(f"solver: expected 'auto', 'recurrent' or 'exact', got {solver!r}")
        self.ridge = check_positive_float("ridge", ridge)
        self.use_gate = check_bool("use_gate", use_gate)
        if self.use_gate:
            self.a_proj = nn.Linear(hidden_size, num_heads)
            nn.init.constant_(self.a_proj.bias, 4.0)  # σ(4) ≈ 0.98: remember almost everything at start
        self.solver = solver
        self.o_norm = nn.RMSNorm(self.head_dim)

    def op_inputs(self, x, qkv):
        q, k = normed_qk(self.feature_map, qkv, self.num_heads, self.head_dim)
        inputs = {"q": q, "k": k, "v": self._heads(qkv[..., 2 * self.hidden_size :])}
        if self.use_gate:
            inputs["g"] = F.logsigmoid(self.a_proj(x))
        return inputs

    def mix(self, q, k, v, g=None):
        # Woodbury (or Sherman–Morrison) without gates; with them the exact solve (a constant ridge is no low-rank
        # update)
        if self.use_gate or self.solver == "exact":
            return self.o_norm(rls_exact(q, k, v, self.ridge, g=g)[0])
        form = rls_recurrent if self.solver == "recurrent" else rls_chunk
        return self.o_norm(form(q, k, v, self.ridge)[0])

    def mix_step(self, memory, q, k, v, g=None):
        o, memory = rls_recurrent(q, k, v, self.ridge, g=g, initial_state=memory, output_final_state=True)
        return self.o_norm(o), memory

    def state_size(self, seq_len: int) -> int:
        check_positive_int("seq_len", seq_len)
        return self.num_heads * self.head_dim * (2 * self.head_dim)  # S and the (inverse) covariance


def normed_qk(feature_map, qkv: torch.Tensor, num_heads: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``l2_norm(φ(q)), l2_norm(φ(k))`` ``(B, T, H, D)`` from the projections ``qkv`` ``(B, T, 3 H D)``, in one pass
    over q and k side by side (``φ`` is elementwise and the norm is per head), as fla's DeltaNet normalises them.
    The normalisation is :func:`ttr_edu.ops.l2_norm`'s, ``x / max(‖x‖, 1e-12)``, without the op's scans for NaN/inf:
    ``qkv`` is the layer's own activation, made from an ``x`` that :meth:`project` or :meth:`step` checked, and a
    one-token step would pay two scans per token for nothing."""
    qk = qkv[..., : 2 * num_heads * head_dim]
    qk = feature_map(qk.view(*qk.shape[:-1], 2 * num_heads, head_dim))
    qk = qk / torch.linalg.vector_norm(qk, dim=-1, keepdim=True).clamp_min(1e-12)
    return qk[..., :num_heads, :], qk[..., num_heads:, :]


def _compute(x: torch.Tensor, rows: int) -> torch.Tensor:
    """A one-token ``(B, 1, H, ·)`` tensor as ``(B·H, 1, ·)`` rows, in the ops' compute dtype (fp32, or fp64)."""
    x = x.reshape(rows, 1, -1)
    return x if x.dtype is torch.float32 or x.dtype is torch.float64 else x.float()


def delta_step(memory, q, k, v, beta, g=None):
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

"""Token mixers for adaptive steps and deep memories: Longhorn, DeltaProduct, TTT-Linear, TTT-MLP, Titans' memory.

The conventions of :mod:`ttr_edu.layers` (a :class:`~ttr_edu.layers._Mixer` each: q, k, v projections, optional short
convolution, the op of :mod:`ttr_edu.ops` in the fla layout, a per-head RMSNorm, the output projection). Queries and
keys are SiLU'd and L2-normalised as in fla's DeltaNet, so ``‖k‖ = 1`` and a step ``β ∈ (0, 1)`` is stable for the
explicit (gradient) rules. These layers are also re-exported by :mod:`ttr_edu.layers`; :data:`MEMORY_MIXERS` names
them (apart from ``ttr_edu.layers.MIXERS``, whose every entry the main MQAR grid trains).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ttr_edu._validation import check_positive_int
from ttr_edu.layers import ShortConvolution, _Mixer
from ttr_edu.ops import (
    delta_product_chunk,
    l2_norm,
    longhorn_chunk,
    longhorn_diagonal_recurrent,
    titans_recurrent,
    ttt_linear_chunk,
    ttt_mlp_chunk,
)

__all__ = ["Longhorn", "DeltaProduct", "TTTLinear", "TTTMLP", "TitansMemory", "MEMORY_MIXERS"]


class _NormedQK(_Mixer):
    """q and k SiLU'd then L2-normalised; a per-head step ``σ(W_β x)``; an RMSNorm on each head's output."""

    def __init__(self, hidden_size, num_heads, use_short_conv, conv_size):
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size)
        self.b_proj = nn.Linear(hidden_size, num_heads)
        self.o_norm = nn.RMSNorm(self.head_dim)

    def project(self, x):
        inputs = super().project(x)
        inputs["q"], inputs["k"] = l2_norm(F.silu(inputs["q"])), l2_norm(F.silu(inputs["k"]))
        inputs["beta"] = torch.sigmoid(self.b_proj(x))
        return inputs

    def state_size(self, seq_len: int) -> int:
        check_positive_int("seq_len", seq_len)
        return self.num_heads * self.head_dim * self.head_dim


class Longhorn(_NormedQK):
    """Longhorn (Liu et al. 2024): the implicit online step ``ε = β/(1 + β‖k‖²)``, stable for every ``β ≥ 0``.

    ``β = softplus(W_β x)`` per head, unbounded, since the implicit step needs no bound.
    Test-time regression: uniform weights, linear class, the implicit (proximal) step.

    Args:
        hidden_size, num_heads; diagonal: run the published layer's diagonal approximation
        (:func:`ttr_edu.ops.longhorn_diagonal_recurrent`, a token loop) instead of the exact step
        (:func:`ttr_edu.ops.longhorn_chunk`); use_short_conv, conv_size.
    """

    def __init__(self, hidden_size: int, num_heads: int = 1, *, diagonal: bool = False,
                 use_short_conv: bool = True, conv_size: int = 4) -> None:
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size)
        self.diagonal = bool(diagonal)

    def project(self, x):
        inputs = super().project(x)
        inputs["beta"] = F.softplus(self.b_proj(x))
        return inputs

    def mix(self, q, k, v, beta):
        if self.diagonal:
            return self.o_norm(longhorn_diagonal_recurrent(q, k, v, beta)[0])
        return self.o_norm(longhorn_chunk(q, k, v, beta, chunk_size=32)[0])


class DeltaProduct(_NormedQK):
    """DeltaProduct (Siems et al. 2025): ``num_householder`` delta-rule steps per token, each its own k, v, β.

    The first key and value come from the shared q, k, v projection; the other ``n_h − 1`` from one more projection,
    each with its short convolution. Test-time regression: uniform weights, linear class, several SGD steps
    per token.

    Args:
        hidden_size, num_heads; num_householder: ``n_h ≥ 1`` (1 is DeltaNet); use_short_conv, conv_size.
    """

    def __init__(self, hidden_size: int, num_heads: int = 1, *, num_householder: int = 2,
                 use_short_conv: bool = True, conv_size: int = 4) -> None:
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size)
        self.num_householder = check_positive_int("num_householder", num_householder)
        n = self.num_householder
        self.b_proj = nn.Linear(hidden_size, n * num_heads)
        if n > 1:
            self.extra_kv_proj = nn.Linear(hidden_size, 2 * (n - 1) * hidden_size, bias=False)
            if self.use_short_conv:  # the extra keys need the previous token as much as the first (MQAR's shift)
                self.extra_kv_conv1d = ShortConvolution(2 * (n - 1) * hidden_size, conv_size)

    def project(self, x):
        inputs = super().project(x)
        n, (B, T) = self.num_householder, x.shape[:2]
        k, v = inputs["k"][:, :, None], inputs["v"][:, :, None]  # (B, T, 1, H, D)
        if n > 1:
            extra = self.extra_kv_proj(x)
            if self.use_short_conv:
                extra = self.extra_kv_conv1d(extra)
            extra_k, extra_v = extra.chunk(2, dim=-1)
            extra_k = l2_norm(F.silu(extra_k.unflatten(-1, (n - 1, self.num_heads, self.head_dim))))
            k = torch.cat([k, extra_k], dim=2)
            v = torch.cat([v, extra_v.unflatten(-1, (n - 1, self.num_heads, self.head_dim))], dim=2)
        inputs["k"], inputs["v"] = k.flatten(1, 2), v.flatten(1, 2)  # token t's j-th pair at row t·n + j
        inputs["beta"] = torch.sigmoid(self.b_proj(x)).unflatten(-1, (n, self.num_heads)).flatten(1, 2)
        return inputs

    def mix(self, q, k, v, beta):
        o, _ = delta_product_chunk(q, k, v, beta, self.num_householder, chunk_size=32, check_stability="ignore")
        return self.o_norm(o)


class TTTLinear(_NormedQK):
    """TTT-Linear (Sun et al. 2024): mini-batch gradient descent on a linear memory, ``f(x) = [x +] [LN](Sᵀx)``.

    The inner learning rate is ``η = σ(W_β x)`` per head and token. Test-time regression: uniform weights, linear
    class, mini-batch GD (gradients at the mini-batch's start).

    Args:
        hidden_size, num_heads; mini_batch_size: ``b`` (16 in the paper); layer_norm, residual: TTT's inner
        ``x + LN(·)`` (off by default); use_short_conv, conv_size.
    """

    def __init__(self, hidden_size: int, num_heads: int = 1, *, mini_batch_size: int = 16,
                 layer_norm: bool = False, residual: bool = False, use_short_conv: bool = True,
                 conv_size: int = 4) -> None:
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size)
        self.mini_batch_size = check_positive_int("mini_batch_size", mini_batch_size)
        self.layer_norm, self.residual = bool(layer_norm), bool(residual)

    def mix(self, q, k, v, beta):
        o, _ = ttt_linear_chunk(q, k, v, beta, self.mini_batch_size, layer_norm=self.layer_norm,
                                residual=self.residual)
        return self.o_norm(o)


class _MLPMemory(_NormedQK):
    """The learnable starting weights ``(W1_0, W2_0)`` of a two-layer MLP memory, one per head (outer parameters)."""

    def __init__(self, hidden_size, num_heads, expansion, use_short_conv, conv_size):
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size)
        self.expansion = check_positive_int("expansion", expansion)
        D, D_h = self.head_dim, self.expansion * self.head_dim
        self.W1 = nn.Parameter(torch.randn(num_heads, D, D_h) / D**0.5)
        self.W2 = nn.Parameter(torch.randn(num_heads, D_h, D) / D_h**0.5)

    def start(self, batch: int, dtype):
        return tuple(W.to(dtype)[None].expand(batch, *W.shape) for W in (self.W1, self.W2))

    def state_size(self, seq_len: int) -> int:
        check_positive_int("seq_len", seq_len)
        return self.W1.numel() + self.W2.numel()


class TTTMLP(_MLPMemory):
    """TTT-MLP (Sun et al. 2024): mini-batch GD on a two-layer GELU MLP memory with hidden size ``expansion · D``.

    Args:
        hidden_size, num_heads; mini_batch_size; expansion (4 in the paper); layer_norm, residual (off by
        default); use_short_conv, conv_size.
    """

    def __init__(self, hidden_size: int, num_heads: int = 1, *, mini_batch_size: int = 16, expansion: int = 4,
                 layer_norm: bool = False, residual: bool = False, use_short_conv: bool = True,
                 conv_size: int = 4) -> None:
        super().__init__(hidden_size, num_heads, expansion, use_short_conv, conv_size)
        self.mini_batch_size = check_positive_int("mini_batch_size", mini_batch_size)
        self.layer_norm, self.residual = bool(layer_norm), bool(residual)

    def mix(self, q, k, v, beta):
        o, _ = ttt_mlp_chunk(q, k, v, beta, self.mini_batch_size, initial_state=self.start(q.shape[0], q.dtype),
                             layer_norm=self.layer_norm, residual=self.residual)
        return self.o_norm(o)


class TitansMemory(_MLPMemory):
    """Titans' neural memory (Behrouz et al. 2024): an MLP memory trained online with momentum and weight decay.

    Per head and token: learning rate ``θ = σ(W_β x)``, momentum ``η = σ(W_η x)``, forgetting ``α = σ(W_α x − 4)``
    (``σ(−4) ≈ 0.02`` at start: remember almost everything). A token loop (:func:`ttr_edu.ops.titans_recurrent`).

    Args:
        hidden_size, num_heads; expansion: the MLP's hidden size over ``D`` (2); use_short_conv, conv_size.
    """

    def __init__(self, hidden_size: int, num_heads: int = 1, *, expansion: int = 2, use_short_conv: bool = True,
                 conv_size: int = 4) -> None:
        super().__init__(hidden_size, num_heads, expansion, use_short_conv, conv_size)
        self.eta_proj = nn.Linear(hidden_size, num_heads)
        self.alpha_proj = nn.Linear(hidden_size, num_heads)
        nn.init.constant_(self.alpha_proj.bias, -4.0)

    def project(self, x):
        inputs = super().project(x)
        inputs["eta"] = torch.sigmoid(self.eta_proj(x))
        inputs["alpha"] = torch.sigmoid(self.alpha_proj(x))
        return inputs

    def mix(self, q, k, v, beta, eta, alpha):
        o, _ = titans_recurrent(q, k, v, beta, eta, alpha, initial_state=self.start(q.shape[0], q.dtype))
        return self.o_norm(o)

    def state_size(self, seq_len: int) -> int:
        return 2 * super().state_size(seq_len)  # the memory and its momentum


#: name -> layer class; the names match :data:`ttr_edu.regression.NAMED_LAYERS`.
MEMORY_MIXERS: dict[str, type[_Mixer]] = {
    "longhorn": Longhorn,
    "deltaproduct": DeltaProduct,
    "ttt_linear": TTTLinear,
    "ttt_mlp": TTTMLP,
    "titans": TitansMemory,
}

"""Token mixers for adaptive steps and deep memories: Longhorn, DeltaProduct, TTT-Linear, TTT-MLP, Titans' memory.

The conventions of :mod:`ttr_edu.layers` (a :class:`~ttr_edu.layers.base.Mixer` each: q, k, v projections, an
optional short convolution, the op of :mod:`ttr_edu.ops` in the fla layout, a per-head RMSNorm, the output
projection). Queries and keys pass the feature map (the convolution's SiLU, once, by default) and the L2 norm as in
fla's DeltaNet, so ``‖k‖ = 1`` and a step ``β ∈ (0, 1)`` is stable for the explicit (gradient) rules.
:data:`ttr_edu.layers.MEMORY_MIXERS` names them: chapter 08's memories, apart from :data:`ttr_edu.layers.MIXERS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ttr_edu._internal.validation import check_bool, check_positive_int
from ttr_edu.layers.base import Mixer, _l2
from ttr_edu.layers.registry import MixerSpec, feature_map_recipe, register
from ttr_edu.ops import (
    delta_product_chunk,
    delta_product_recurrent,
    longhorn_chunk,
    longhorn_diagonal_recurrent,
    longhorn_recurrent,
    titans_recurrent,
    ttt_linear_chunk,
    ttt_mlp_chunk,
)

__all__ = ["Longhorn", "DeltaProduct", "TTTLinear", "TTTMLP", "TitansMemory", "MAX_STEPS_PER_TOKEN", "MAX_EXPANSION"]

#: The most Householder steps per token of :class:`DeltaProduct` (the paper uses 1 to 4; each step multiplies the
#: work per token, so a huge count is refused rather than run for hours).
MAX_STEPS_PER_TOKEN = 64
#: The widest MLP memory of :class:`TTTMLP` and :class:`TitansMemory`, as the hidden width over the head width.
MAX_EXPANSION = 64


class _NormedQK(Mixer):
    """q and k through ``φ`` then L2-normalised; a per-head step ``σ(W_β x)``; an RMSNorm on each head's output.

    ``extra_pairs`` more keys and values per token (DeltaProduct's Householder steps), each with its β head.
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        use_short_conv: bool,
        conv_size: int,
        feature_map: str,
        extra_pairs: int = 0,
    ) -> None:
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size, feature_map, extra_pairs=extra_pairs)
        self.b_proj = nn.Linear(hidden_size, (1 + extra_pairs) * num_heads)
        self.o_norm = nn.RMSNorm(self.head_dim)

    def op_inputs(self, x: torch.Tensor, qkv: torch.Tensor) -> dict[str, torch.Tensor]:
        """``q, k`` ``l2(φ(·))`` and ``v`` ``(B, T, H, D)``, ``beta = σ(W_β x)`` ``(B, T, H)``."""
        q, k = self._normed_qk(qkv)
        v = self._heads(qkv[..., 2 * self.hidden_size : 3 * self.hidden_size])
        return {"q": q, "k": k, "v": v, "beta": torch.sigmoid(self.b_proj(x))}


class Longhorn(_NormedQK):
    """Longhorn (Liu et al. 2024): the implicit online step ``ε = β/(1 + β‖k‖²)``, stable for every ``β ≥ 0``.

    ``β = softplus(W_β x)`` per head, unbounded, since the implicit step needs no bound.
    Test-time regression: uniform weights, linear class, the implicit (proximal) step.

    Args:
        hidden_size, num_heads; diagonal: run the published layer's diagonal approximation
        (:func:`ttr_edu.ops.longhorn_diagonal_recurrent`, a token loop) instead of the exact step
        (:func:`ttr_edu.ops.longhorn_chunk`); use_short_conv, conv_size; chunk_size: tokens per chunk of the chunk
        form (32; a speed setting).
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int = 1,
        *,
        diagonal: bool = False,
        use_short_conv: bool = True,
        conv_size: int = 4,
        feature_map: str = "silu",
        chunk_size: int = 32,
    ) -> None:
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size, feature_map)
        self.diagonal = check_bool("diagonal", diagonal)
        self.chunk_size = check_positive_int("chunk_size", chunk_size)

    def op_inputs(self, x: torch.Tensor, qkv: torch.Tensor) -> dict[str, torch.Tensor]:
        """As every normed memory's (``q, k, v`` ``(B, T, H, D)``), with the unbounded ``beta = softplus(W_β x)``
        ``(B, T, H)``."""
        inputs = super().op_inputs(x, qkv)
        inputs["beta"] = F.softplus(self.b_proj(x))
        return inputs

    def mix(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
        """:func:`ttr_edu.ops.longhorn_chunk` (or the diagonal token loop), then the RMSNorm: ``(B, T, H, D)``."""
        if self.diagonal:
            return self.o_norm(longhorn_diagonal_recurrent(q, k, v, beta)[0])
        return self.o_norm(longhorn_chunk(q, k, v, beta, chunk_size=self.chunk_size)[0])

    def mix_step(
        self, memory: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor
    ) -> tuple[torch.Tensor, Any]:
        """:func:`ttr_edu.ops.longhorn_recurrent` (or the diagonal one) over one token ``(B, 1, H, ·)``, from and to
        ``memory`` ``(B, H, D, D)``."""
        recurrent = longhorn_diagonal_recurrent if self.diagonal else longhorn_recurrent
        o, memory = recurrent(q, k, v, beta, initial_state=memory, output_final_state=True)
        return self.o_norm(o), memory


class DeltaProduct(_NormedQK):
    """DeltaProduct (Siems et al. 2025): ``num_householder`` delta-rule steps per token, each its own k, v, β.

    The keys and values come from one projection beside the query, each pair with its SiLU'd short convolution
    and its β head. Test-time regression: uniform weights, linear class, several SGD steps per token.

    Args:
        hidden_size, num_heads; num_householder: ``1 ≤ n_h ≤ 64`` (1 is DeltaNet); use_short_conv, conv_size;
        feature_map: ``φ`` on q and every key (:data:`ttr_edu.layers.QK_FEATURE_MAPS`); chunk_size: tokens per
        chunk of the chunk form (32; a speed setting).
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int = 1,
        *,
        num_householder: int = 2,
        use_short_conv: bool = True,
        conv_size: int = 4,
        feature_map: str = "silu",
        chunk_size: int = 32,
    ) -> None:
        n = check_positive_int(
            "num_householder", num_householder, maximum=MAX_STEPS_PER_TOKEN, why="each multiplies the work per token"
        )
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size, feature_map, extra_pairs=n - 1)
        self.num_householder = n
        self.chunk_size = check_positive_int("chunk_size", chunk_size)

    def op_inputs(self, x: torch.Tensor, qkv: torch.Tensor) -> dict[str, torch.Tensor]:
        """As every normed memory's, but ``k, v`` are ``(B, T, n_h, H, D)`` and ``beta`` ``(B, T, n_h, H)``:
        ``n_h`` pairs per token (the projection holds ``q, k_1, v_1, k_2 … k_n, v_2 … v_n``)."""
        d, n = self.hidden_size, self.num_householder
        heads = (n, self.num_heads, self.head_dim)
        keys = torch.cat([qkv[..., d : 2 * d], qkv[..., 3 * d : (2 + n) * d]], dim=-1).unflatten(-1, heads)
        values = torch.cat([qkv[..., 2 * d : 3 * d], qkv[..., (2 + n) * d :]], dim=-1).unflatten(-1, heads)
        q = self._heads(qkv[..., :d])
        if self.phi is not None:
            q, keys = self.phi(q), self.phi(keys)
        q, keys = _l2(q), _l2(keys)
        beta = torch.sigmoid(self.b_proj(x)).unflatten(-1, (n, self.num_heads))
        return {"q": q, "k": keys, "v": values, "beta": beta}

    def mix(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
        """:func:`ttr_edu.ops.delta_product_chunk` over the pairs (``k, v`` ``(B, T, n_h, H, D)``) in the op's row
        order, then the RMSNorm: ``(B, T, H, D)``."""
        k, v, beta = (x.flatten(1, 2) for x in (k, v, beta))  # the ops take token t's j-th pair at row t·n_h + j
        o, _ = delta_product_chunk(
            q, k, v, beta, self.num_householder, chunk_size=self.chunk_size, check_stability="ignore"
        )
        return self.o_norm(o)

    def mix_step(
        self, memory: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor
    ) -> tuple[torch.Tensor, Any]:
        """:func:`ttr_edu.ops.delta_product_recurrent` over one token's ``n_h`` pairs ``(B, 1, n_h, H, D)``, from
        and to ``memory`` ``(B, H, D, D)``."""
        k, v, beta = (x.flatten(1, 2) for x in (k, v, beta))
        o, memory = delta_product_recurrent(
            q,
            k,
            v,
            beta,
            self.num_householder,
            initial_state=memory,
            output_final_state=True,
            check_stability="ignore",
        )
        return self.o_norm(o), memory


class TTTLinear(_NormedQK):
    """TTT-Linear (Sun et al. 2024): mini-batch gradient descent on a linear memory, ``f(x) = [x +] [LN](Sᵀx)``.

    The inner learning rate is ``η = σ(W_β x)`` per head and token. Test-time regression: uniform weights, linear
    class, mini-batch GD (gradients at the mini-batch's start).

    Args:
        hidden_size, num_heads; mini_batch_size: ``b`` (16 in the paper); layer_norm, residual: TTT's inner
        ``x + LN(·)`` (off by default); use_short_conv, conv_size; feature_map: ``φ`` on q and k
        (:data:`ttr_edu.layers.QK_FEATURE_MAPS`).
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int = 1,
        *,
        mini_batch_size: int = 16,
        layer_norm: bool = False,
        residual: bool = False,
        use_short_conv: bool = True,
        conv_size: int = 4,
        feature_map: str = "silu",
    ) -> None:
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size, feature_map)
        self.mini_batch_size = check_positive_int("mini_batch_size", mini_batch_size)
        self.layer_norm, self.residual = check_bool("layer_norm", layer_norm), check_bool("residual", residual)

    def _op(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor, initial_state: Any = None
    ) -> tuple[torch.Tensor, Any]:
        return ttt_linear_chunk(
            q,
            k,
            v,
            beta,
            self.mini_batch_size,
            initial_state=initial_state,
            output_final_state=True,
            layer_norm=self.layer_norm,
            residual=self.residual,
        )

    def mix(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
        """:func:`ttr_edu.ops.ttt_linear_chunk`, then the RMSNorm: ``(B, T, H, D)``."""
        return self.o_norm(self._op(q, k, v, beta)[0])

    def initial_memory(self, batch_size: int) -> MiniBatchMemory:
        """An empty mini-batch from the zero memory."""
        return MiniBatchMemory()

    def mix_step(self, memory: MiniBatchMemory, **inputs: torch.Tensor) -> tuple[torch.Tensor, MiniBatchMemory]:
        """One token ``(B, 1, H, ·)`` of mini-batch gradient descent (:func:`_mini_batch_step`); the output
        ``(B, 1, H, D)``."""
        return _mini_batch_step(self, memory, inputs)


class _MLPMemory(_NormedQK):
    """The learnable starting weights ``(W1_0, W2_0)`` of a two-layer MLP memory, one per head (outer parameters)."""

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        expansion: int,
        use_short_conv: bool,
        conv_size: int,
        feature_map: str,
    ) -> None:
        super().__init__(hidden_size, num_heads, use_short_conv, conv_size, feature_map)
        self.expansion = check_positive_int(
            "expansion", expansion, maximum=MAX_EXPANSION, why="the hidden width over D; the papers use 2 to 4"
        )
        D, D_h = self.head_dim, self.expansion * self.head_dim
        self.W1 = nn.Parameter(torch.randn(num_heads, D, D_h) / D**0.5)
        self.W2 = nn.Parameter(torch.randn(num_heads, D_h, D) / D_h**0.5)

    def start_weights(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The learned starting weights, one copy per sequence: ``(W1, W2)`` ``(B, H, D, D_h)``, ``(B, H, D_h, D)``."""
        return (
            self.W1[None].expand(batch_size, *self.W1.shape),
            self.W2[None].expand(batch_size, *self.W2.shape),
        )

    def state_size(self, seq_len: int) -> int:
        """The MLP's weights: ``2 H D D_h`` floats."""
        check_positive_int("seq_len", seq_len)
        return self.W1.numel() + self.W2.numel()


class TTTMLP(_MLPMemory):
    """TTT-MLP (Sun et al. 2024): mini-batch GD on a two-layer GELU MLP memory with hidden size ``expansion · D``.

    Args:
        hidden_size, num_heads; mini_batch_size; expansion (4 in the paper); layer_norm, residual (off by
        default); use_short_conv, conv_size; feature_map: ``φ`` on q and k (:data:`ttr_edu.layers.QK_FEATURE_MAPS`).
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int = 1,
        *,
        mini_batch_size: int = 16,
        expansion: int = 4,
        layer_norm: bool = False,
        residual: bool = False,
        use_short_conv: bool = True,
        conv_size: int = 4,
        feature_map: str = "silu",
    ) -> None:
        super().__init__(hidden_size, num_heads, expansion, use_short_conv, conv_size, feature_map)
        self.mini_batch_size = check_positive_int("mini_batch_size", mini_batch_size)
        self.layer_norm, self.residual = check_bool("layer_norm", layer_norm), check_bool("residual", residual)

    def _op(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor, initial_state: Any
    ) -> tuple[torch.Tensor, Any]:
        return ttt_mlp_chunk(
            q,
            k,
            v,
            beta,
            self.mini_batch_size,
            initial_state=initial_state,
            output_final_state=True,
            layer_norm=self.layer_norm,
            residual=self.residual,
        )

    def mix(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
        """:func:`ttr_edu.ops.ttt_mlp_chunk` from the learned starting weights, then the RMSNorm: ``(B, T, H, D)``."""
        return self.o_norm(self._op(q, k, v, beta, self.start_weights(q.shape[0]))[0])

    def initial_memory(self, batch_size: int) -> MiniBatchMemory:
        """An empty mini-batch from the learned starting weights."""
        return MiniBatchMemory(self.start_weights(batch_size))

    def mix_step(self, memory: MiniBatchMemory, **inputs: torch.Tensor) -> tuple[torch.Tensor, MiniBatchMemory]:
        """One token ``(B, 1, H, ·)`` of mini-batch gradient descent (:func:`_mini_batch_step`); the output
        ``(B, 1, H, D)``."""
        return _mini_batch_step(self, memory, inputs)


class TitansMemory(_MLPMemory):
    """Titans' neural memory (Behrouz et al. 2024): an MLP memory trained online with momentum and weight decay.

    Per head and token: learning rate ``β = σ(W_β x)`` (the paper's ``θ``), momentum ``η = σ(W_η x)``, forgetting
    ``α = σ(W_α x − 4)`` (``σ(−4) ≈ 0.02`` at start: remember almost everything). A token loop
    (:func:`ttr_edu.ops.titans_recurrent`).

    Args:
        hidden_size, num_heads; expansion: the MLP's hidden size over ``D`` (2; at most 64); use_short_conv, conv_size;
        feature_map: ``φ`` on q and k (:data:`ttr_edu.layers.QK_FEATURE_MAPS`).
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int = 1,
        *,
        expansion: int = 2,
        use_short_conv: bool = True,
        conv_size: int = 4,
        feature_map: str = "silu",
    ) -> None:
        super().__init__(hidden_size, num_heads, expansion, use_short_conv, conv_size, feature_map)
        self.eta_proj = nn.Linear(hidden_size, num_heads)
        self.alpha_proj = nn.Linear(hidden_size, num_heads)
        nn.init.constant_(self.alpha_proj.bias, -4.0)

    def op_inputs(self, x: torch.Tensor, qkv: torch.Tensor) -> dict[str, torch.Tensor]:
        """As every normed memory's, with the momentum ``eta`` and the forgetting ``alpha`` ``(B, T, H)``."""
        inputs = super().op_inputs(x, qkv)
        inputs["eta"] = torch.sigmoid(self.eta_proj(x))
        inputs["alpha"] = torch.sigmoid(self.alpha_proj(x))
        return inputs

    def mix(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        beta: torch.Tensor,
        eta: torch.Tensor,
        alpha: torch.Tensor,
    ) -> torch.Tensor:
        """:func:`ttr_edu.ops.titans_recurrent` from the learned starting weights, then the RMSNorm:
        ``(B, T, H, D)``."""
        o, _ = titans_recurrent(q, k, v, beta, eta, alpha, initial_state=self.start_weights(q.shape[0]))
        return self.o_norm(o)

    def initial_memory(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The learned starting weights ``(W1, W2)`` ``(B, H, D, D_h)``, ``(B, H, D_h, D)`` (the momentum starts at
        zero in the op)."""
        return self.start_weights(batch_size)

    def mix_step(
        self,
        memory: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        beta: torch.Tensor,
        eta: torch.Tensor,
        alpha: torch.Tensor,
    ) -> tuple[torch.Tensor, Any]:
        """:func:`ttr_edu.ops.titans_recurrent` over one token ``(B, 1, H, ·)``, from and to ``memory`` (the
        :class:`~ttr_edu.ops.TitansState`)."""
        o, memory = titans_recurrent(q, k, v, beta, eta, alpha, initial_state=memory, output_final_state=True)
        return self.o_norm(o), memory

    def state_size(self, seq_len: int) -> int:
        """The MLP's weights and their momentum: ``4 H D D_h`` floats."""
        check_positive_int("seq_len", seq_len)
        return 2 * super().state_size(seq_len)


_FEATURE_MAP = {"feature_map": feature_map_recipe("silu")}
register(
    MixerSpec(
        "longhorn",
        "Longhorn",
        Longhorn,
        named_layer="longhorn",
        family="memory",
        fuzz={"diagonal": ("flag", False), "chunk_size": ("int", 4), **_FEATURE_MAP},
    )
)
register(
    MixerSpec(
        "deltaproduct",
        "DeltaProduct",
        DeltaProduct,
        named_layer="deltaproduct",
        family="memory",
        fuzz={"num_householder": ("int", 2, MAX_STEPS_PER_TOKEN), "chunk_size": ("int", 4), **_FEATURE_MAP},
    )
)
register(
    MixerSpec(
        "ttt_linear",
        "TTT-Linear",
        TTTLinear,
        named_layer="ttt_linear",
        family="memory",
        fuzz={
            "mini_batch_size": ("int", 2),
            "layer_norm": ("flag", False),
            "residual": ("flag", False),
            **_FEATURE_MAP,
        },
    )
)
register(
    MixerSpec(
        "ttt_mlp",
        "TTT-MLP",
        TTTMLP,
        named_layer="ttt_mlp",
        family="memory",
        fuzz={
            "mini_batch_size": ("int", 2),
            "expansion": ("int", 2, MAX_EXPANSION),
            "layer_norm": ("flag", False),
            "residual": ("flag", False),
            **_FEATURE_MAP,
        },
    )
)
register(
    MixerSpec(
        "titans",
        "Titans",
        TitansMemory,
        named_layer="titans",
        family="memory",
        fuzz={"expansion": ("int", 2, MAX_EXPANSION), **_FEATURE_MAP},
    )
)


@dataclass
class MiniBatchMemory:
    """TTT's memory between tokens: every gradient of a mini-batch is taken at the weights of its start (Sun et al.
    2024, §2.4), so a token-by-token reader keeps those weights and the mini-batch's inputs so far.

    Attributes:
        start: the weights at the mini-batch's start, as the op's ``initial_state`` takes them (``None``: zero).
        pending: this mini-batch's inputs so far (``q, k, v, beta``, each ``(B, n, H, ·)``), ``None`` when empty.
    """

    start: Any = None
    pending: dict | None = None


def _mini_batch_step(
    layer: TTTLinear | TTTMLP, memory: MiniBatchMemory, inputs: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, MiniBatchMemory]:
    """One token of mini-batch gradient descent through the chunk op: it reads the mini-batch so far from its
    starting weights (the output at the last token is this token's); once the mini-batch is full, its final weights
    start the next one. A step costs at most ``mini_batch_size`` tokens of the op."""
    if memory.pending is not None:
        inputs = {name: torch.cat([memory.pending[name], value], dim=1) for name, value in inputs.items()}
    o, final = layer._op(**inputs, initial_state=memory.start)
    full = inputs["q"].shape[1] == layer.mini_batch_size
    return layer.o_norm(o[:, -1:]), MiniBatchMemory(final, None) if full else MiniBatchMemory(memory.start, inputs)

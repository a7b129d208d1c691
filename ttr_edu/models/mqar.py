"""Tiny one-layer models for multi-query associative recall (chapter 09), small enough to train on a CPU.

    tokens -> embedding E -> x + mixer(x) -> LayerNorm -> readout Eᵀ/√d (logits over the vocabulary)

The mixer is one test-time-regression layer of :mod:`ttr_edu.layers`, with its short convolutions: the key of the
pair ``(k_i, v_i)`` is written at the position of ``v_i`` and must hold ``k_i``, the previous token, which the
convolution supplies. One layer with that shift is the smallest circuit that can solve MQAR (Arora et al. 2023
use two layers; with the convolution built into the layer one is enough). As in Zoology's language-model backbone
the readout is tied to the embedding (``lm_head.weight = word_embeddings.weight``, no bias), so a memory that
returns the embedding of the stored value already points the readout at it, whatever the vocabulary size.

:data:`MODELS` names the layers an MQAR grid can train. Every *linear memory* in it (linear attention, DeltaNet,
gated DeltaNet, RLS, Mesa) takes the same feature map ``φ`` on ``q`` and ``k`` followed by the same L2 norm, so
that two of them differ only in how they solve the regression (Wang, Shi, Fox 2025): the feature map is a setting
of the model, not a hidden difference between layers. Where ``φ`` sits follows flash-linear-attention's DeltaNet
(Yang et al. 2024): the short convolution on ``v`` ends in a SiLU; on ``q`` and ``k`` the SiLU *is* the feature map
(``φ = "silu"``, the DeltaNet and Gated DeltaNet papers' choice), and any other ``φ`` (``"identity"``,
``"elu_plus_one"``, ``"relu"``) replaces it, applied to the convolution's linear output. (Applying ELU+1 *after* a
SiLU, as an earlier version of this model did, squeezes every coordinate into ``[0.76, ∞)``: the keys start almost
collinear; chapter 09 measures it.) Names follow the course: ``rls`` is the ungated exact ridge regression
(recursive least squares), ``mesa`` the gated one (MesaNet, von Oswald et al. 2025).

The loss is the cross-entropy at the query positions only (labels ``-100`` elsewhere); the readout is applied only
there, which keeps a vocabulary-sized matrix product off every other position.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ttr_edu._internal.validation import check_allocation, check_bool, check_positive_int
from ttr_edu.layers import (
    DeltaNet,
    GatedDeltaNet,
    LinearAttention,
    LocalLinearAttention,
    MesaLayer,
    ShortConvolution,
    SoftmaxAttention,
    check_layer_input,
)
from ttr_edu.tasks.mqar import IGNORE_INDEX, MQARBatch

__all__ = ["MQARLayer", "MODELS", "LINEAR_MEMORIES", "FEATURE_MAPS", "MQARModel", "QKVConvolution"]

#: the feature maps a linear memory of :data:`MODELS` accepts (each keeps the width, then the L2 norm follows):
#: ``"silu"`` is the short convolution's own SiLU (DeltaNet's choice); ``"identity"``, ``"elu_plus_one"`` and ``"relu"``
#: replace it on ``q`` and ``k``; ``"elu_plus_one_after_silu"`` stacks ELU+1 on the SiLU (what an earlier version of
#: this model did for ``"elu_plus_one"``; chapter 09 measures what it does to the keys)
FEATURE_MAPS = ("silu", "identity", "elu_plus_one", "relu", "elu_plus_one_after_silu")


class _TiedReadoutCrossEntropy(torch.autograd.Function):
    """``mean_m (logsumexp(z_m) − z_m[y_m])`` with ``z = h Eᵀ``: the cross-entropy of the tied readout, fused.

    The same value and gradients as ``F.cross_entropy(F.linear(h, E), y)``; the backward turns the saved
    log-probabilities into ``softmax(z) − onehot(y)`` in place instead of allocating a zero gradient and running a
    log-softmax backward: 6 ms instead of 10 for the readout and loss of one step at ``V = 8192``, 256 queries,
    ``d = 16`` (about half of a training step of the grid's smallest models).
    """

    @staticmethod
    def forward(ctx, h, weight, labels):
        log_p = F.log_softmax(F.linear(h, weight), -1)  # (M, V)
        ctx.save_for_backward(h, weight, labels, log_p)
        return -log_p.gather(1, labels[:, None]).mean()

    @staticmethod
    def backward(ctx, grad):
        h, weight, labels, log_p = ctx.saved_tensors
        dz = log_p.exp_()  # the softmax, written over the saved log-probabilities (used once)
        dz[torch.arange(len(labels), device=labels.device), labels] -= 1
        dz.mul_(grad / len(labels))
        return dz @ weight, dz.T @ h, None


class QKVConvolution(ShortConvolution):
    """The short convolution over the ``q, k, v`` channels side by side, ``(B, T, 3 d) -> (B, T, 3 d)``, with the
    SiLU on the ``v`` channels always and on ``q, k`` only when ``qk_silu`` (flash-linear-attention's DeltaNet:
    ``activation='silu' if qk_activation == 'silu' else None`` for its q and k convolutions).

    Args:
        hidden_size: ``3 d``, the channels (q, k, v in that order, each ``d = hidden_size / 3``).
        conv_size: taps of the causal depthwise convolution; the last tap weighs the current token.
        qk_silu: apply the SiLU to the q and k channels as well.
    """

    def __init__(self, hidden_size: int, conv_size: int = 4, *, qk_silu: bool = True) -> None:
        super().__init__(hidden_size, conv_size)
        if hidden_size % 3:
            raise ValueError(f"hidden_size: expected 3 d channels (q, k, v side by side), got {hidden_size}")
        self.qk_silu = check_bool("qk_silu", qk_silu)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, 3 d) -> (B, T, 3 d)``: causal, the SiLU as configured. Raises as
        :func:`ttr_edu.layers.check_layer_input`."""
        if self.qk_silu:
            return super().forward(x)
        check_layer_input(self, x)
        T, d = x.shape[1], self.hidden_size // 3
        y = self.conv(x.transpose(1, 2))[..., :T].transpose(1, 2)  # (B, T, 3 d), causal
        return torch.cat([y[..., : 2 * d], F.silu(y[..., 2 * d :])], dim=-1)


def _elu_plus_one_after_silu(z: torch.Tensor) -> torch.Tensor:
    return F.elu(F.silu(z)) + 1


@dataclass(frozen=True)
class MQARLayer:
    """How to build one named mixer: its class, fixed keyword arguments, and whether it takes a feature map.

    Attributes:
        label: the name shown in tables and figures.
        layer: a :class:`ttr_edu.layers._Mixer` subclass (``layer(hidden_size, num_heads, **kwargs)``).
        kwargs: fixed keyword arguments (e.g. ``use_gate=True``).
        linear_memory: ``True`` for a fixed-size state ``S`` read through ``φ(q)``; it then takes
            ``feature_map=`` and L2-normalises ``φ(q), φ(k)``. ``False`` for the key-value-cache layers.
    """

    label: str
    layer: Callable[..., nn.Module]
    kwargs: dict = field(default_factory=dict)
    linear_memory: bool = True

    def __post_init__(self):
        """Raises ``TypeError`` naming the field: a label that is not a non-empty str, a layer that is not callable,
        kwargs that are not a dict with str keys, or a ``linear_memory`` that is not a bool."""
        if not isinstance(self.label, str) or not self.label:
            raise TypeError(f"label: expected a non-empty str, got {type(self.label).__name__} {self.label!r}")
        if not callable(self.layer):
            raise TypeError(f"layer: expected a mixer class (callable), got {type(self.layer).__name__}")
        if not isinstance(self.kwargs, dict) or not all(isinstance(k, str) for k in self.kwargs):
            raise TypeError(f"kwargs: expected a dict of keyword arguments, got {type(self.kwargs).__name__}")
        check_bool("linear_memory", self.linear_memory)

    def build(self, d_model: int, num_heads: int, feature_map: str | None, use_short_conv: bool) -> nn.Module:
        """The mixer, with ``φ`` placed as the module docstring says.

        Raises:
            ValueError: a linear memory given a feature map outside :data:`FEATURE_MAPS`, or a key-value-cache
                layer given one at all.
        """
        kwargs = dict(self.kwargs, use_short_conv=use_short_conv)
        if not self.linear_memory:
            if feature_map is not None:
                raise ValueError(
                    f"feature_map: {self.label} reads the key-value cache through its kernel and takes no "
                    f"feature map; pass None, got {feature_map!r}"
                )
            return self.layer(d_model, num_heads, **kwargs)
        if feature_map not in FEATURE_MAPS:
            raise ValueError(
                f"feature_map: a linear memory needs one of {', '.join(FEATURE_MAPS)}, got {feature_map!r}"
            )
        stacked = feature_map == "elu_plus_one_after_silu"
        silu = feature_map == "silu" or stacked  # the convolution's SiLU stays on q and k
        after = {"silu": "identity", "elu_plus_one_after_silu": "elu_plus_one"}.get(feature_map, feature_map)
        mixer = self.layer(d_model, num_heads, feature_map=after, **kwargs)
        if use_short_conv:
            conv = mixer.qkv_conv1d
            mixer.qkv_conv1d = QKVConvolution(conv.hidden_size, conv.conv_size, qk_silu=silu)
            mixer.qkv_conv1d.load_state_dict(conv.state_dict())  # the same initial weights as the plain one
        elif silu:  # no convolution to carry the SiLU: it is applied as (part of) the feature map
            mixer.feature_map = _elu_plus_one_after_silu if stacked else F.silu
        return mixer


#: name -> how to build it. To add a layer, add an entry (the grid and the chapter read names from here).
MODELS: dict[str, MQARLayer] = {
    "linear_attention": MQARLayer("linear attention", LinearAttention, {"qk_norm": True}),
    "deltanet": MQARLayer("DeltaNet", DeltaNet),
    "gated_deltanet": MQARLayer("gated DeltaNet", GatedDeltaNet),
    # the exact ridge solution in chunks (ops.rls_chunk): the function Sherman–Morrison computes, 3–6× faster
    "rls": MQARLayer("RLS", MesaLayer, {"use_gate": False}),
    "mesa": MQARLayer("Mesa (gated RLS)", MesaLayer, {"use_gate": True, "solver": "exact"}),
    "softmax_attention": MQARLayer("softmax attention", SoftmaxAttention, linear_memory=False),
    "local_linear_attention": MQARLayer("local linear attention", LocalLinearAttention, linear_memory=False),
}

#: the names of the linear memories, the layers that take a feature map
LINEAR_MEMORIES = tuple(name for name, entry in MODELS.items() if entry.linear_memory)


class MQARModel(nn.Module):
    """Embedding, one token mixer with short convolutions, a residual, LayerNorm and the tied readout.

    Args:
        mixer: a name in :data:`MODELS` (``"deltanet"``, ``"rls"``, ``"softmax_attention"``, ...).
        vocab_size: ``V``.
        d_model: the width (``hidden_size`` of the mixer); with one head the parametric state is ``d_model²``.
        num_heads: heads of the mixer.
        feature_map: for a linear memory, ``φ`` in :data:`FEATURE_MAPS` (default ``"silu"``, DeltaNet's); ``None``
            for softmax and local linear attention (for them the default is ignored).
        use_short_conv: the causal depthwise convolution on ``q, k, v`` (the ablation turns it off).

    The readout is the embedding's transpose (no bias), scaled by ``1/√d`` so that the logits start near unit size
    with the embedding's default ``N(0, 1)`` rows.

    Raises:
        ValueError: an unknown mixer name (the message lists the valid ones), a feature map the layer refuses, or a
            ``vocab_size`` or ``d_model`` too large for memory (refused before anything is allocated).
        TypeError: a size that is not an int.
    """

    def __init__(
        self,
        mixer: str,
        vocab_size: int,
        d_model: int,
        num_heads: int = 1,
        *,
        feature_map: str | None = "silu",
        use_short_conv: bool = True,
    ) -> None:
        super().__init__()
        if mixer not in MODELS:
            raise ValueError(f"mixer: unknown name {mixer!r}; valid names are {', '.join(MODELS)}")
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        check_positive_int("d_model", d_model)
        # refused by name before anything is allocated: the embedding (V, d) and the mixer's (d, d) matrices
        check_allocation("vocab_size" if vocab_size >= d_model else "d_model", (vocab_size, d_model), what="embedding")
        check_allocation("d_model", (4, d_model, d_model), what="the mixer's projections")
        self.mixer_name = mixer
        entry = MODELS[mixer]
        self.feature_map = feature_map if entry.linear_memory else None
        self.embed = nn.Embedding(vocab_size, d_model)
        self.mixer = entry.build(d_model, num_heads, self.feature_map, use_short_conv)
        self.norm = nn.LayerNorm(d_model)
        self.logit_scale = d_model**-0.5

    def readout(self, h: torch.Tensor) -> torch.Tensor:
        """``(..., d_model)`` features -> ``(..., V)`` logits: ``h Eᵀ / √d``, the readout tied to the embedding."""
        # scaled before the product: d_model multiplies per row instead of V (1.5× faster at V = 8192, same value)
        return F.linear(h * self.logit_scale, self.embed.weight)

    def hidden(self, inputs: torch.Tensor) -> torch.Tensor:
        """``(B, T)`` int64 tokens -> ``(B, T, d_model)`` features before the readout.

        Raises:
            TypeError: ``inputs`` is not an int64 tensor. ValueError: not ``(B, T)`` with ``B, T >= 1``, a token
                outside ``[0, V)``, or a meta tensor (the embedding looks its values up).
        """
        if not isinstance(inputs, torch.Tensor) or inputs.dtype != torch.long:
            raise TypeError(f"inputs: expected an int64 tensor (B, T), got {getattr(inputs, 'dtype', type(inputs))}")
        if inputs.dim() != 2 or 0 in inputs.shape:
            raise ValueError(f"inputs: expected shape (B, T) with B, T >= 1, got {tuple(inputs.shape)}")
        if inputs.device.type == "meta":
            raise ValueError("inputs: a meta tensor carries no values, and the embedding looks up each token")
        low, high = inputs.min().item(), inputs.max().item()
        if low < 0 or high >= self.vocab_size:
            raise ValueError(
                f"inputs: expected tokens in [0, V) = [0, {self.vocab_size}), got values from {low} to {high}"
            )
        x = self.embed(inputs)  # (B, T, d_model)
        return self.norm(x + self.mixer(x))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """``(B, T)`` int64 tokens -> ``(B, T, V)`` logits."""
        return self.readout(self.hidden(inputs))

    def _hidden_at_queries(self, batch: MQARBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """The features ``(M, d_model)`` and labels ``(M,)`` at the ``M`` labelled positions of ``batch``."""
        asked = batch.labels != IGNORE_INDEX
        return self.hidden(batch.inputs)[asked], batch.labels[asked]

    def logits_at_queries(self, batch: MQARBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """The logits ``(M, V)`` and labels ``(M,)`` at the ``M`` labelled positions of ``batch``."""
        h, labels = self._hidden_at_queries(batch)
        return self.readout(h), labels

    def loss(self, batch: MQARBatch) -> torch.Tensor:
        """Mean cross-entropy over the query positions (``F.cross_entropy`` of :meth:`logits_at_queries`, fused)."""
        h, labels = self._hidden_at_queries(batch)
        return _TiedReadoutCrossEntropy.apply(h * self.logit_scale, self.embed.weight, labels)

    @torch.no_grad()
    def accuracy(self, batch: MQARBatch) -> float:
        """Fraction of query positions where the argmax is the stored value (Zoology's metric)."""
        was_training = self.training
        self.eval()
        try:
            logits, labels = self.logits_at_queries(batch)
        finally:
            self.train(was_training)
        return (logits.argmax(-1) == labels).double().mean().item()

    def state_size(self, seq_len: int) -> int:
        """Floats the mixer keeps per sequence (see :meth:`ttr_edu.layers._Mixer.state_size`)."""
        return self.mixer.state_size(seq_len)

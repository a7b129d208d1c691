"""Tiny one-layer models for multi-query associative recall (chapter 09), small enough to train on a CPU.

    tokens -> embedding E -> x + mixer(x) -> LayerNorm -> readout Eᵀ/√d (logits over the vocabulary)

The mixer is one test-time-regression layer of :mod:`ttr_edu.layers`, with its short convolutions: the key of the
pair ``(k_i, v_i)`` is written at the position of ``v_i`` and must hold ``k_i``, the previous token, which the
convolution supplies. One layer with that shift is the smallest circuit that can solve MQAR (Arora et al. 2023
use two layers; with the convolution built into the layer one is enough). As in Zoology's language-model backbone
the readout is tied to the embedding (``lm_head.weight = word_embeddings.weight``, no bias), so a memory that
returns the embedding of the stored value already points the readout at it, whatever the vocabulary size.

:data:`MODELS` names the layers the main MQAR grid trains; :class:`MQARModel` takes any registered mixer
(:data:`ttr_edu.layers.REGISTRY`). Every *parametric* memory (linear attention, DeltaNet, gated DeltaNet, RLS, Mesa,
and chapter 08's memories) takes the same feature map ``φ`` on ``q`` and ``k`` followed by the same L2 norm, so that
two of them differ only in how they solve the regression (Wang, Shi, Fox 2025): the feature map is a setting of the
model, passed to the layer, which owns where ``φ`` sits (:data:`ttr_edu.layers.QK_FEATURE_MAPS`, as
flash-linear-attention's DeltaNet places it: ``φ = "silu"`` is the short convolution's SiLU, applied once; any other
``φ`` replaces it). (Applying ELU+1 *after* the SiLU, ``"elu_plus_one_after_silu"``, squeezes every coordinate into
``[0.76, ∞)``: the keys start almost collinear; chapter 09 measures it.) Names follow the course: ``rls`` is the
ungated exact ridge regression (recursive least squares), ``mesa`` the gated one (MesaNet, von Oswald et al. 2025).

The loss is the cross-entropy at the query positions only (labels ``-100`` elsewhere); the readout is applied only
there, which keeps a vocabulary-sized matrix product off every other position.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ttr_edu._internal.validation import check_allocation, check_positive_int
from ttr_edu.layers import REGISTRY, MixerSpec, SpecView
from ttr_edu.tasks.mqar import IGNORE_INDEX, MQARBatch

__all__ = ["MODELS", "LINEAR_MEMORIES", "MQARModel"]

#: name -> :class:`~ttr_edu.layers.MixerSpec` of the layers the main grid trains (a view of the registry: a spec with
#: ``mqar=True`` adds an arm; the grid and the chapter read names and labels from here)
MODELS: SpecView[MixerSpec] = SpecView(lambda spec: spec.mqar)
#: the names in :data:`MODELS` of the parametric memories, the layers that take a feature map
LINEAR_MEMORIES: SpecView[MixerSpec] = SpecView(lambda spec: spec.mqar and spec.parametric)


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


class MQARModel(nn.Module):
    """Embedding, one token mixer with short convolutions, a residual, LayerNorm and the tied readout (``n_layers``
    such mixer layers in turn, and learned positions, when asked).

    Args:
        mixer: the name of a registered mixer (:data:`ttr_edu.layers.REGISTRY`: the grid's :data:`MODELS`,
            ``"deltanet"``, ``"rls"``, ``"softmax_attention"``, ..., or chapter 08's ``"longhorn"``, ...).
        vocab_size: ``V``.
        d_model: the width (``hidden_size`` of the mixer); with one head the parametric state is ``d_model²``.
        num_heads: heads of the mixer.
        feature_map: for a parametric memory, ``φ`` in :data:`ttr_edu.layers.QK_FEATURE_MAPS` (default ``"silu"``,
            DeltaNet's); ignored by softmax and local linear attention, which take none.
        use_short_conv: the causal depthwise convolution on ``q, k, v`` (the ablation turns it off).
        n_layers: mixer layers, each with its residual connection and LayerNorm (Zoology's models have two).
        max_positions: learned absolute positions added to the embedding, for sequences up to this length; 0 (the
            default) adds none.
        options: more options of the mixer, over its spec's (``mini_batch_size=8`` for ``"ttt_linear"``).

    The readout is the embedding's transpose (no bias), scaled by ``1/√d`` so that the logits start near unit size
    with the embedding's default ``N(0, 1)`` rows.

    Raises:
        ValueError: an unknown mixer name (the message lists the valid ones), a feature map the layer refuses, or a
            ``vocab_size`` or ``d_model`` too large for memory (refused before anything is allocated).
        TypeError: a size that is not an int; an option the mixer does not take.
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
        n_layers: int = 1,
        max_positions: int = 0,
        **options: object,
    ) -> None:
        super().__init__()
        if mixer not in REGISTRY:
            raise ValueError(f"mixer: unknown name {mixer!r}; valid names are {', '.join(REGISTRY)}")
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        check_positive_int("d_model", d_model)
        # refused by name before anything is allocated: the embedding (V, d) and the mixer's (d, d) matrices
        check_allocation("vocab_size" if vocab_size >= d_model else "d_model", (vocab_size, d_model), what="embedding")
        check_allocation("d_model", (4, d_model, d_model), what="the mixer's projections")
        self.mixer_name = mixer
        spec = REGISTRY[mixer]
        self.feature_map = feature_map if spec.parametric else None
        if spec.parametric:  # the layer places φ itself (a name the layer refuses is refused by it, by name)
            options = {"feature_map": feature_map, **options}
        check_positive_int("n_layers", n_layers)
        if isinstance(max_positions, bool) or not isinstance(max_positions, int) or max_positions < 0:
            raise ValueError(f"max_positions: expected an int >= 0 (0: no positions), got {max_positions!r}")
        self.embed = nn.Embedding(vocab_size, d_model)
        self.mixer = spec(d_model, num_heads, use_short_conv=use_short_conv, **options)
        self.norm = nn.LayerNorm(d_model)
        # more layers, each a residual mixer and its LayerNorm (as the first); none by default, so that a one-layer
        # model keeps its parameter names and its initial weights
        self.more = nn.ModuleList(
            nn.ModuleDict(
                {
                    "mixer": spec(d_model, num_heads, use_short_conv=use_short_conv, **options),
                    "norm": nn.LayerNorm(d_model),
                }
            )
            for _ in range(n_layers - 1)
        )
        # learned absolute positions, added to the embedding (Zoology's attention in its figure 2 has them)
        self.positions = nn.Embedding(max_positions, d_model) if max_positions else None
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
        if self.positions is not None:
            if inputs.shape[1] > self.positions.num_embeddings:
                raise ValueError(
                    f"inputs: {inputs.shape[1]} tokens, but the model has {self.positions.num_embeddings} positions"
                )
            x = x + self.positions.weight[: inputs.shape[1]]
        x = self.norm(x + self.mixer(x))
        for layer in self.more:
            x = layer["norm"](x + layer["mixer"](x))
        return x

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
        """Floats the mixers keep per sequence, summed over the layers (see
        :meth:`ttr_edu.layers.base.Mixer.state_size`)."""
        return self.mixer.state_size(seq_len) + sum(layer["mixer"].state_size(seq_len) for layer in self.more)

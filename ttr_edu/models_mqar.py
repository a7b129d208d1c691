"""Tiny one-layer models for multi-query associative recall (chapter 8), small enough to train on a CPU.

    tokens -> embedding -> x + mixer(x) -> LayerNorm -> readout (logits over the vocabulary)

The mixer is one test-time-regression layer of :mod:`ttr_edu.layers`, with its short convolutions: the key of the
pair ``(k_i, v_i)`` is written at the position of ``v_i`` and must hold ``k_i``, the previous token, which the
convolution supplies. One layer with that shift is the smallest circuit that can solve MQAR (Arora et al. 2023
use two layers; with the convolution built into the layer one is enough).

The loss is the cross-entropy at the query positions only (labels ``-100`` elsewhere); the readout is applied only
there, which keeps a vocabulary-sized matrix product off every other position.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ttr_edu._validation import check_positive_int
from ttr_edu.layers import MIXERS
from ttr_edu.mqar import IGNORE_INDEX, MQARBatch

__all__ = ["MQARModel"]


class MQARModel(nn.Module):
    """Embedding, one token mixer with short convolutions, a residual, LayerNorm and a linear readout.

    Args:
        mixer: a name in :data:`ttr_edu.layers.MIXERS` (``"deltanet"``, ``"softmax_attention"``, ...).
        vocab_size: ``V``.
        d_model: the width (``hidden_size`` of the mixer); with one head the parametric state is ``d_model²``.
        num_heads: heads of the mixer.
        **mixer_kwargs: passed to the mixer's constructor (e.g. ``feature_map=``, ``lam=``, ``ridge=``).

    Raises:
        ValueError: an unknown mixer name (the message lists the valid ones).
    """

    def __init__(self, mixer: str, vocab_size: int, d_model: int, num_heads: int = 1, **mixer_kwargs) -> None:
        super().__init__()
        if mixer not in MIXERS:
            raise ValueError(f"mixer: unknown name {mixer!r}; valid names are {', '.join(MIXERS)}")
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        self.mixer_name = mixer
        self.embed = nn.Embedding(vocab_size, d_model)
        self.mixer = MIXERS[mixer](d_model, num_heads, **mixer_kwargs)
        self.norm = nn.LayerNorm(d_model)
        self.readout = nn.Linear(d_model, vocab_size)

    def hidden(self, inputs: torch.Tensor) -> torch.Tensor:
        """``(B, T)`` int64 tokens -> ``(B, T, d_model)`` features before the readout."""
        if not isinstance(inputs, torch.Tensor) or inputs.dtype != torch.long or inputs.dim() != 2:
            raise TypeError(f"inputs: expected an int64 tensor (B, T), got {getattr(inputs, 'dtype', type(inputs))}")
        x = self.embed(inputs)  # (B, T, d_model)
        return self.norm(x + self.mixer(x))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """``(B, T)`` int64 tokens -> ``(B, T, V)`` logits."""
        return self.readout(self.hidden(inputs))

    def logits_at_queries(self, batch: MQARBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """The logits ``(M, V)`` and labels ``(M,)`` at the ``M`` labelled positions of ``batch``."""
        asked = batch.labels != IGNORE_INDEX
        return self.readout(self.hidden(batch.inputs)[asked]), batch.labels[asked]

    def loss(self, batch: MQARBatch) -> torch.Tensor:
        """Mean cross-entropy over the query positions."""
        logits, labels = self.logits_at_queries(batch)
        return F.cross_entropy(logits, labels)

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

"""Tiny byte-level language models built from the course's token mixers, as a reader would in nanoGPT.

``TinyLM`` = byte embedding → ``n_layers`` pre-norm blocks (``x + mixer(RMSNorm(x))``, then
``x + MLP(RMSNorm(x))``) → RMSNorm → logits through the *tied* embedding. Only the mixer changes between models
(:data:`LM_MIXERS`), so a comparison changes one thing. No position embedding: the recurrent memories and the
short convolution know the order, and causal softmax attention infers positions from its mask ("NoPE");
all models have the same short convolution on q, k, v.

Two ways to run one model, proven equal by the tests:

* :meth:`TinyLM.forward` reads a whole sequence with the mixers' chunkwise forms (training, evaluation);
* :meth:`TinyLM.step` reads one token and carries a :class:`LMState`: each fast-weight layer keeps its state
  ``S`` ``(B, H, D_k, D_v)`` and the last ``conv_size`` inputs of its short convolution, so a token costs the same at
  any context length; softmax attention keeps its key-value cache, so a token costs ``O(t)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ttr_edu._validation import check_positive_int
from ttr_edu.layers import DeltaNet, GatedDeltaNet, LinearAttention, SoftmaxAttention
from ttr_edu.ops import (
    delta_rule_recurrent,
    gated_delta_rule_recurrent,
    linear_attention_recurrent,
)

__all__ = ["LMConfig", "LM_MIXERS", "TinyLM", "LMState", "lm_loss", "causal_lm_loss", "bits_per_byte", "generate"]

#: name -> (description, constructor ``(hidden_size, num_heads) -> mixer``). Every mixer has the short convolution.
LM_MIXERS = {
    "linear_sumnorm": ("linear attention (sum rule), ELU+1 features, sum-normalised q and k",
                       lambda d, h: LinearAttention(d, h, "elu_plus_one", sum_norm=True)),
    "linear": ("linear attention (sum rule), ELU+1 features, no sum normalisation",
               lambda d, h: LinearAttention(d, h, "elu_plus_one", sum_norm=False)),
    "linear_sumnorm_no_onorm": ("linear attention, sum-normalised q and k, no RMSNorm on the head outputs (as the paper)",
                                lambda d, h: LinearAttention(d, h, "elu_plus_one", sum_norm=True, output_norm=False)),
    "linear_no_onorm": ("linear attention, no sum normalisation, no RMSNorm on the head outputs",
                        lambda d, h: LinearAttention(d, h, "elu_plus_one", sum_norm=False, output_norm=False)),
    "deltanet": ("DeltaNet (delta rule), SiLU + L2-normalised q and k, learned β",
                 lambda d, h: DeltaNet(d, h)),
    "gated_deltanet": ("gated DeltaNet: a learned decay, then the delta rule",
                       lambda d, h: GatedDeltaNet(d, h)),
    "softmax": ("softmax attention (causal, no position embedding)",
                lambda d, h: SoftmaxAttention(d, h)),
}


@dataclass(frozen=True)
class LMConfig:
    """Every hyperparameter of a :class:`TinyLM`.

    Attributes:
        mixer: a key of :data:`LM_MIXERS`.
        d_model: width (64–128 in the chapter). num_heads: heads of each mixer (``D = d_model / num_heads``).
        n_layers: blocks. mlp_ratio: hidden width of the MLP over ``d_model``. vocab_size: 256 bytes.
    """

    mixer: str = "deltanet"
    d_model: int = 64
    num_heads: int = 2
    n_layers: int = 2
    mlp_ratio: int = 4
    vocab_size: int = 256

    def __post_init__(self) -> None:
        if self.mixer not in LM_MIXERS:
            raise ValueError(f"mixer: expected one of {', '.join(LM_MIXERS)}, got {self.mixer!r}")
        for name in ("d_model", "num_heads", "n_layers", "mlp_ratio", "vocab_size"):
            check_positive_int(name, getattr(self, name))


class Block(nn.Module):
    """One pre-norm block: ``x + mixer(RMSNorm(x))``, then ``x + MLP(RMSNorm(x))``."""

    def __init__(self, config: LMConfig) -> None:
        super().__init__()
        d = config.d_model
        self.mixer_norm = nn.RMSNorm(d)
        self.mixer = LM_MIXERS[config.mixer][1](d, config.num_heads)
        self.mlp_norm = nn.RMSNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, config.mlp_ratio * d), nn.GELU(), nn.Linear(config.mlp_ratio * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.mixer(self.mixer_norm(x))  # (B, T, d_model)
        return x + self.mlp(self.mlp_norm(x))


@dataclass
class LMState:
    """What :meth:`TinyLM.step` carries from token to token, one entry per block.

    Attributes:
        window: each block's last ``conv_size`` mixer inputs ``(B, ≤ conv_size, d_model)`` (the short convolution's
            receptive field).
        memory: each block's fast weight ``S`` ``(B, H, D_k, D_v)`` (fp32), or for softmax attention its key-value
            cache ``(k, v)``, each ``(B, t, H, D)``.
        position: tokens read so far.
    """

    window: list[torch.Tensor | None] = field(default_factory=list)
    memory: list = field(default_factory=list)
    position: int = 0


class TinyLM(nn.Module):
    """A byte-level language model: embedding, pre-norm blocks, tied output (see the module docstring).

    Args:
        config: an :class:`LMConfig`.

    Shapes: ``forward(tokens)`` maps int64 ``(B, T)`` to logits ``(B, T, vocab_size)`` (fp32).
    """

    def __init__(self, config: LMConfig) -> None:
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(config.vocab_size, config.d_model)
        nn.init.normal_(self.embedding.weight, std=config.d_model ** -0.5)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.final_norm = nn.RMSNorm(config.d_model)

    def _check_tokens(self, tokens: torch.Tensor, name: str = "tokens") -> None:
        if not isinstance(tokens, torch.Tensor) or tokens.dtype != torch.int64:
            raise TypeError(f"{name}: expected an int64 tensor (B, T), got {getattr(tokens, 'dtype', type(tokens))}")
        if tokens.dim() != 2 or tokens.shape[1] == 0:
            raise ValueError(f"{name}: expected shape (B, T) with T ≥ 1, got {tuple(tokens.shape)}")
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.config.vocab_size):
            raise ValueError(f"{name}: expected values in [0, {self.config.vocab_size}), got range "
                             f"[{int(tokens.min())}, {int(tokens.max())}]")

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.final_norm(x) @ self.embedding.weight.T  # tied: the input embedding reads the output

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, T, vocab_size)`` for int64 ``tokens`` ``(B, T)``, through the chunkwise forms.

        Raises:
            TypeError: ``tokens`` not int64. ValueError: not ``(B, T)``, ``T = 0`` or a value outside the vocabulary.
        """
        self._check_tokens(tokens)
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x)
        return self._logits(x)

    def num_parameters(self) -> int:
        """Trainable parameters (the tied embedding counted once)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    # ---- one token at a time -------------------------------------------------------------------------------
    def init_state(self) -> LMState:
        """An empty :class:`LMState` (no token read)."""
        return LMState([None] * len(self.blocks), [None] * len(self.blocks), 0)

    @torch.no_grad()
    def step(self, token: torch.Tensor, state: LMState) -> tuple[torch.Tensor, LMState]:
        """Read one token per sequence with the recurrent forms.

        Args:
            token: int64 ``(B,)``, the next token of each sequence.
            state: from :meth:`init_state` or the previous step; it is updated in place and returned.

        Returns:
            ``(logits, state)``: the next-token logits ``(B, vocab_size)`` and the carried state.
        """
        self._check_tokens(token.unsqueeze(-1) if isinstance(token, torch.Tensor) else token, "token")
        x = self.embedding(token.unsqueeze(1))  # (B, 1, d_model)
        for i, block in enumerate(self.blocks):
            u = block.mixer_norm(x)
            x = x + self._mixer_step(block.mixer, u, state, i)
            x = x + block.mlp(block.mlp_norm(x))
        state.position += 1
        return self._logits(x)[:, 0], state

    @staticmethod
    def _mixer_step(mixer: nn.Module, u: torch.Tensor, state: LMState, i: int) -> torch.Tensor:
        # The short convolution sees the last conv_size inputs only, so projecting that window and keeping its
        # last position gives exactly the full-sequence projection at this token, at a cost independent of t.
        window = u if state.window[i] is None else torch.cat([state.window[i], u], dim=1)
        conv_size = mixer.qkv_conv1d.conv_size if mixer.use_short_conv else 1
        state.window[i] = window[:, -conv_size:]
        inputs = {name: value[:, -1:] for name, value in mixer.project(state.window[i]).items()}  # T = 1
        S = state.memory[i]
        if isinstance(mixer, SoftmaxAttention):
            k = inputs["k"] if S is None else torch.cat([S[0], inputs["k"]], dim=1)  # the cache grows with t
            v = inputs["v"] if S is None else torch.cat([S[1], inputs["v"]], dim=1)
            state.memory[i] = (k, v)
            scores = torch.einsum("b h d, b t h d -> b h t", inputs["q"][:, 0], k) * mixer.head_dim ** -0.5
            o = torch.einsum("b h t, b t h d -> b h d", scores.softmax(-1), v).unsqueeze(1)
        elif isinstance(mixer, LinearAttention):
            q, k = mixer.features(inputs["q"], inputs["k"])
            o, state.memory[i] = linear_attention_recurrent(q, k, inputs["v"], normalize=mixer.normalize,
                                                            initial_state=S, output_final_state=True)
            o = mixer.o_norm(o)
        elif isinstance(mixer, GatedDeltaNet):
            o, state.memory[i] = gated_delta_rule_recurrent(
                inputs["q"], inputs["k"], inputs["v"], inputs["g"], inputs["beta"], initial_state=S,
                output_final_state=True, check_stability="ignore")
            o = mixer.o_norm(o)
        elif isinstance(mixer, DeltaNet):
            o, state.memory[i] = delta_rule_recurrent(
                inputs["q"], inputs["k"], inputs["v"], inputs["beta"], initial_state=S, output_final_state=True,
                check_stability="ignore")
            o = mixer.o_norm(o)
        else:  # pragma: no cover - LM_MIXERS holds only the types above
            raise TypeError(f"mixer: no recurrent step for {type(mixer).__name__}")
        return mixer.o_proj(o.flatten(-2))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy in nats: ``logits`` ``(B, T, V)`` against int64 ``targets`` ``(B, T)``.

    The caller shifts: ``logits = model(window[:, :-1])``, ``targets = window[:, 1:]`` (position t predicts t + 1).

    Raises:
        ValueError: shapes that do not match.
    """
    if logits.dim() != 3 or targets.shape != logits.shape[:2]:
        raise ValueError(f"logits, targets: expected (B, T, V) and (B, T), got {tuple(logits.shape)} and "
                         f"{tuple(targets.shape)}")
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def causal_lm_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """The causal LM loss of ``logits = model(tokens)``: position t is scored on byte t + 1 (the last has no target).

    Args:
        logits: ``(B, T, V)``, the model's output on ``tokens``.
        tokens: int64 ``(B, T)`` with ``T ≥ 2``.

    Returns:
        The mean cross-entropy in nats over the ``B (T − 1)`` predicted positions (a scalar tensor).
    """
    return lm_loss(logits[:, :-1], tokens[:, 1:])


def bits_per_byte(loss_nats: float) -> float:
    """A byte-level loss in nats converted to bits per byte (``loss / ln 2``)."""
    return float(loss_nats) / math.log(2)


@torch.no_grad()
def generate(model: TinyLM, prompt: torch.Tensor, num_tokens: int, *, temperature: float = 1.0,
             generator: torch.Generator | None = None) -> torch.Tensor:
    """Sample ``num_tokens`` bytes after ``prompt`` with the recurrent form: each token costs one :meth:`TinyLM.step`.

    Args:
        model: a :class:`TinyLM`.
        prompt: int64 ``(B, T_prompt)``, ``T_prompt ≥ 1``.
        num_tokens: how many tokens to sample.
        temperature: > 0 divides the logits; 0 takes the argmax (greedy).
        generator: for reproducible sampling.

    Returns:
        int64 ``(B, T_prompt + num_tokens)``: the prompt and the sample.
    """
    model._check_tokens(prompt, "prompt")
    check_positive_int("num_tokens", num_tokens)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature >= 0:
        raise ValueError(f"temperature: expected a number ≥ 0, got {temperature!r}")
    was_training = model.training
    model.eval()
    try:
        state, tokens = model.init_state(), [prompt]
        for t in range(prompt.shape[1]):
            logits, state = model.step(prompt[:, t], state)
        for _ in range(num_tokens):
            if temperature == 0:
                nxt = logits.argmax(-1)
            else:
                nxt = torch.multinomial((logits / temperature).softmax(-1), 1, generator=generator)[:, 0]
            tokens.append(nxt[:, None])
            logits, state = model.step(nxt, state)
        return torch.cat(tokens, dim=1)
    finally:
        model.train(was_training)

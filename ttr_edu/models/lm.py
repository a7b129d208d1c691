"""Tiny byte-level language models built from the course's token mixers, as a reader would in nanoGPT.

``TinyLM`` = byte embedding → ``n_layers`` pre-norm blocks (``x + mixer(RMSNorm(x))``, then
``x + MLP(RMSNorm(x))``) → RMSNorm → logits through the *tied* embedding. Only the mixer changes between models
(:data:`LM_MIXERS`), so a comparison changes one thing. No position embedding: the recurrent memories and the
short convolution know the order, and causal softmax attention infers positions from its mask ("NoPE");
all models have the same short convolution on q, k, v.

Two ways to run one model, proven equal by the tests:

* :meth:`TinyLM.forward` reads a whole sequence with the mixers' chunkwise forms (training, evaluation);
* :meth:`TinyLM.step` reads one token and carries a :class:`LMState`: each block's mixer steps through its own
  recurrent form (:meth:`ttr_edu.layers.base.Mixer.step`), keeping its memory and the last ``conv_size`` inputs of
  its short convolution. A fast-weight layer's token costs the same at any context length; softmax attention keeps
  its key-value cache, so a token costs ``O(t)``.

Any registered mixer (:data:`ttr_edu.layers.REGISTRY`) can be named in :class:`LMConfig`, with its spec's options;
:data:`LM_MIXERS` lists the ones the chapter compares.
"""

from __future__ import annotations

import math
import os
import pickle
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ttr_edu._internal.validation import (
    Dims,
    check_allocation,
    check_generator,
    check_positive_int,
    check_real,
    guarded,
)
from ttr_edu.layers import REGISTRY, Mixer, MixerSpec, MixerState, SpecView

__all__ = [
    "LMConfig",
    "LM_MIXERS",
    "TinyLM",
    "LMState",
    "lm_loss",
    "causal_lm_loss",
    "bits_per_byte",
    "generate",
    "SHIPPED_CHECKPOINT",
    "save_checkpoint",
    "load_checkpoint",
]

#: name -> (description, the :class:`~ttr_edu.layers.MixerSpec` that builds the mixer as ``spec(hidden_size,
#: num_heads)``) of the models the chapter compares: a view of the registry's specs with ``lm=True``. Every mixer
#: has the short convolution.
LM_MIXERS: SpecView[tuple[str, MixerSpec]] = SpecView(
    lambda spec: spec.lm, lambda spec: (spec.description or spec.label, spec)
)


@dataclass(frozen=True)
class LMConfig:
    """Every hyperparameter of a :class:`TinyLM`.

    Attributes:
        mixer: the name of a registered mixer (:data:`ttr_edu.layers.REGISTRY`), e.g. a key of :data:`LM_MIXERS`.
        d_model: width (64–128 in the chapter). num_heads: heads of each mixer (``D = d_model / num_heads``).
        n_layers: blocks. mlp_ratio: hidden width of the MLP over ``d_model``. vocab_size: 256 bytes.

    Raises:
        ValueError: an unknown mixer, a size < 1, ``num_heads`` that does not divide ``d_model``, or sizes whose
            weights could not fit in memory. TypeError: a size that is not an int.
    """

    mixer: str = "deltanet"
    d_model: int = 64
    num_heads: int = 2
    n_layers: int = 2
    mlp_ratio: int = 4
    vocab_size: int = 256

    def __post_init__(self) -> None:
        if self.mixer not in REGISTRY:
            raise ValueError(f"mixer: expected one of {', '.join(REGISTRY)}, got {self.mixer!r}")
        for name in ("d_model", "num_heads", "n_layers", "mlp_ratio", "vocab_size"):
            check_positive_int(name, getattr(self, name))
        if self.d_model % self.num_heads:
            raise ValueError(f"num_heads: must divide d_model={self.d_model}, got {self.num_heads}")
        # every weight matrix is allocated when TinyLM is built: refuse here what could never fit
        d = self.d_model
        check_allocation("vocab_size", (self.vocab_size, d), what="the embedding")
        check_allocation("d_model", (4 * d, d), what="a mixer's projections")
        check_allocation("mlp_ratio", (2 * self.mlp_ratio * d, d), what="a block's MLP")
        check_allocation("n_layers", (self.n_layers, (4 + 2 * self.mlp_ratio) * d * d), what="the blocks")


class Block(nn.Module):
    """One pre-norm block: ``x + mixer(RMSNorm(x))``, then ``x + MLP(RMSNorm(x))``."""

    def __init__(self, config: LMConfig) -> None:
        super().__init__()
        d = config.d_model
        self.mixer_norm = nn.RMSNorm(d)
        self.mixer: Mixer = REGISTRY[config.mixer](d, config.num_heads)
        self.mlp_norm = nn.RMSNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, config.mlp_ratio * d), nn.GELU(), nn.Linear(config.mlp_ratio * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.mixer(self.mixer_norm(x))  # (B, T, d_model)
        return x + self.mlp(self.mlp_norm(x))

    def step_unchecked(self, x: torch.Tensor, state: MixerState) -> tuple[torch.Tensor, MixerState]:
        """:meth:`forward` for one token ``x`` ``(B, d_model)``, the mixer stepping from ``state``; unchecked, with
        the norms and the MLP called as functions on their weights (a module call costs as much as a small op)."""
        o, state = self.mixer.step_unchecked(_rms_norm(self.mixer_norm, x), state)
        x = x + o
        up, act, down = self.mlp
        hidden = F.gelu(F.linear(_rms_norm(self.mlp_norm, x), up.weight, up.bias), approximate=act.approximate)
        return x + F.linear(hidden, down.weight, down.bias), state


@dataclass
class LMState:
    """What :meth:`TinyLM.step` carries from token to token, one entry per block.

    Attributes:
        mixers: each block's :class:`~ttr_edu.layers.base.MixerState` (its short convolution's window and its
            memory: the fast weight ``S`` ``(B, H, D_k, D_v)``, or softmax attention's key-value cache).
        batch_size: the number of sequences ``B``.
        position: tokens read so far.
        config: the :class:`LMConfig` of the model that made the state (set at its first token), so that a state
            is never carried into another model.
    """

    mixers: list[MixerState] = field(default_factory=list)
    batch_size: int = 1
    position: int = 0
    config: LMConfig | None = None


class TinyLM(nn.Module):
    """A byte-level language model: embedding, pre-norm blocks, tied output (see the module docstring).

    Args:
        config: an :class:`LMConfig`.

    Shapes: ``forward(tokens)`` maps int64 ``(B, T)`` to logits ``(B, T, vocab_size)`` (fp32).
    """

    def __init__(self, config: LMConfig) -> None:
        super().__init__()
        if not isinstance(config, LMConfig):
            raise TypeError(f"config: expected an LMConfig, got {type(config).__name__}")
        self.config = config
        self.embedding = nn.Embedding(config.vocab_size, config.d_model)
        nn.init.normal_(self.embedding.weight, std=config.d_model**-0.5)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.final_norm = nn.RMSNorm(config.d_model)

    def _check_tokens(self, tokens: torch.Tensor, name: str = "tokens") -> None:
        if not isinstance(tokens, torch.Tensor) or tokens.dtype != torch.int64:
            raise TypeError(f"{name}: expected an int64 tensor (B, T), got {getattr(tokens, 'dtype', type(tokens))}")
        if tokens.dim() != 2 or 0 in tokens.shape:
            raise ValueError(f"{name}: expected shape (B, T) with B, T ≥ 1, got {tuple(tokens.shape)}")
        device = self.embedding.weight.device
        if tokens.device != device:
            raise ValueError(f"{name}: expected a tensor on {device} (the model's device), got one on {tokens.device}")
        _check_vocabulary(name, tokens, self.config.vocab_size)

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
        """An empty :class:`LMState` (no token read); each mixer's state is made at the first token, for its batch."""
        return LMState([], 0, 0)

    @torch.no_grad()
    def step(self, token: torch.Tensor, state: LMState) -> tuple[torch.Tensor, LMState]:
        """Read one token per sequence with the recurrent forms (each mixer's own step).

        Args:
            token: int64 ``(B,)``, the next token of each sequence.
            state: from :meth:`init_state` or the previous step; it is updated in place and returned.

        Returns:
            ``(logits, state)``: the next-token logits ``(B, vocab_size)`` and the carried state.

        Raises:
            TypeError: ``token`` not int64, ``state`` not an :class:`LMState`. ValueError: ``token`` not ``(B,)``,
                a value outside the vocabulary, another device, another batch size than the state's, or a state
                carried by a model of another config.
        """
        if not isinstance(state, LMState):
            raise TypeError(f"state: expected an LMState (from init_state), got {type(state).__name__}")
        if isinstance(token, torch.Tensor) and token.dim() != 1:
            raise ValueError(f"token: expected one token per sequence, shape (B,), got {tuple(token.shape)}")
        self._check_tokens(token.unsqueeze(-1) if isinstance(token, torch.Tensor) else token, "token")
        if state.mixers and state.config is not None and state.config != self.config:
            raise ValueError(
                f"state: carried by another model ({state.config}), not by this one ({self.config}); start a new "
                "state with init_state()"
            )
        if not state.mixers:
            state.mixers = [block.mixer.initial_state(token.shape[0]) for block in self.blocks]
            state.batch_size, state.config = token.shape[0], self.config
        elif token.shape[0] != state.batch_size:
            raise ValueError(
                f"token: expected the batch size of the state (B = {state.batch_size}), got B = {token.shape[0]}; "
                "start a new state with init_state() for another batch"
            )
        return self.step_unchecked(token, state)

    def step_unchecked(self, token: torch.Tensor, state: LMState) -> tuple[torch.Tensor, LMState]:
        """:meth:`step` without its argument checks, for a caller that checked once (:func:`generate` checks the
        prompt, then runs every token through here): each mixer's :meth:`~ttr_edu.layers.base.Mixer.step_unchecked`
        and no scan of any tensor. ``state`` must already hold one :class:`~ttr_edu.layers.base.MixerState` per
        block (:meth:`init_state` then one checked :meth:`step`, or :meth:`init_state_for`). Call it under
        ``torch.no_grad()``. Same result as :meth:`step`."""
        x = F.embedding(token, self.embedding.weight)  # (B, d_model)
        mixers = state.mixers
        for i, block in enumerate(self.blocks):
            x, mixers[i] = block.step_unchecked(x, mixers[i])
        state.position += 1
        return _rms_norm(self.final_norm, x) @ self.embedding.weight.T, state

    def init_state_for(self, batch_size: int) -> LMState:
        """An :class:`LMState` for ``batch_size`` sequences with every mixer's state made, ready for
        :meth:`step_unchecked` (:meth:`step` makes them at the first token)."""
        check_positive_int("batch_size", batch_size)
        return LMState([block.mixer.initial_state(batch_size) for block in self.blocks], batch_size, 0)


def _rms_norm(norm: nn.RMSNorm, x: torch.Tensor) -> torch.Tensor:
    """``norm(x)`` without the module call (a one-token step calls seven of them per token)."""
    return F.rms_norm(x, norm.normalized_shape, norm.weight, norm.eps)


def _check_vocabulary(name: str, tokens: torch.Tensor, vocab_size: int) -> None:
    """Refuse, naming ``name``, token ids outside ``[0, vocab_size)`` (a scan: skipped for meta tensors)."""
    if tokens.device.type == "meta" or not tokens.numel():
        return
    low, high = int(tokens.min()), int(tokens.max())
    if low < 0 or high >= vocab_size:
        hint = " (-100, PyTorch's ignore_index, is not skipped here: every position is scored)" if low == -100 else ""
        raise ValueError(f"{name}: expected values in [0, {vocab_size}), got range [{low}, {high}]{hint}")


def _check_loss_inputs(logits, targets, logits_name: str, targets_name: str) -> None:
    """``logits`` floating ``(B, T, V)``, ``targets`` int64 ``(B, T)`` in ``[0, V)``, one device, no empty dim."""
    dims = Dims()
    dims.bind(logits_name, logits, ("B", "T", "V"))
    if not isinstance(targets, torch.Tensor) or targets.dtype != torch.int64:
        raise TypeError(
            f"{targets_name}: expected an int64 tensor (B, T) of token ids, got "
            f"{getattr(targets, 'dtype', type(targets))}"
        )
    if tuple(targets.shape) != (dims["B"], dims["T"]):
        raise ValueError(
            f"{targets_name}: expected shape (B, T) = ({dims['B']}, {dims['T']}) (set by {logits_name}), got "
            f"{tuple(targets.shape)}"
        )
    empty = [d for d in ("B", "T", "V") if dims[d] == 0]
    if empty:
        raise ValueError(f"{logits_name}: expected {', '.join(empty)} >= 1, got shape {tuple(logits.shape)}")
    if targets.device != logits.device:
        raise ValueError(
            f"{targets_name}: expected a tensor on {logits.device} (the device of {logits_name}), got {targets.device}"
        )
    _check_vocabulary(targets_name, targets, dims["V"])


@guarded
def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy in nats: ``logits`` ``(B, T, V)`` against int64 ``targets`` ``(B, T)``.

    The caller shifts: ``logits = model(window[:, :-1])``, ``targets = window[:, 1:]`` (position t predicts t + 1).
    Every position is scored: unlike ``F.cross_entropy``, a target of ``-100`` is not skipped but refused.

    Raises:
        TypeError: ``logits`` not floating, ``targets`` not int64.
        ValueError: shapes that do not match (named dims), an empty dim, another device, a target outside
            ``[0, V)``, NaN/inf logits.
    """
    _check_loss_inputs(logits, targets, "logits", "targets")
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


@guarded
def causal_lm_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """The causal LM loss of ``logits = model(tokens)``: position t is scored on byte t + 1 (the last has no target).

    Args:
        logits: ``(B, T, V)``, the model's output on ``tokens``.
        tokens: int64 ``(B, T)`` with ``T ≥ 2``.

    Returns:
        The mean cross-entropy in nats over the ``B (T − 1)`` predicted positions (a scalar tensor).

    Raises:
        TypeError, ValueError: as :func:`lm_loss`, naming ``logits`` and ``tokens``; ``T < 2`` (no position has a
            target: the mean would be NaN).
    """
    _check_loss_inputs(logits, tokens, "logits", "tokens")
    if tokens.shape[1] < 2:
        raise ValueError(
            f"tokens: expected T >= 2 (position t is scored on token t + 1, so T = 1 scores nothing), got shape "
            f"{tuple(tokens.shape)}"
        )
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), tokens[:, 1:].flatten())


def bits_per_byte(loss_nats: float) -> float:
    """A byte-level loss in nats converted to bits per byte (``loss / ln 2``).

    ``loss_nats`` is a finite number ``≥ 0`` (a Python number or a one-element floating tensor, e.g. from
    :func:`lm_loss`).

    Raises:
        TypeError: not a number (a bool, a str). ValueError: NaN, inf (a diverged run) or negative.
    """
    if isinstance(loss_nats, torch.Tensor) and loss_nats.numel() == 1 and loss_nats.is_floating_point():
        loss_nats = loss_nats.item()
    return check_real("loss_nats", loss_nats, low=0.0) / math.log(2)


@torch.no_grad()
def generate(
    model: TinyLM,
    prompt: torch.Tensor,
    num_tokens: int,
    *,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Sample ``num_tokens`` bytes after ``prompt`` with the recurrent form: each token costs one step of the model
    (:meth:`TinyLM.step_unchecked`: the arguments are checked once, here, not once per token).

    Args:
        model: a :class:`TinyLM`.
        prompt: int64 ``(B, T_prompt)``, ``T_prompt ≥ 1``.
        num_tokens: how many tokens to sample.
        temperature: > 0 divides the logits; 0 takes the argmax (greedy).
        generator: for reproducible sampling.

    Returns:
        int64 ``(B, T_prompt + num_tokens)``: the prompt and the sample.

    Raises:
        TypeError: ``model`` not a :class:`TinyLM`, ``prompt`` not int64, ``num_tokens`` not an int,
            ``temperature`` not a number, ``generator`` not a ``torch.Generator``.
        ValueError: ``prompt`` not ``(B, T_prompt)`` of ids in the vocabulary, on the model's device;
            ``num_tokens < 1`` or too many to hold; ``temperature`` negative, NaN or inf.
    """
    if not isinstance(model, TinyLM):
        raise TypeError(f"model: expected a TinyLM, got {type(model).__name__}")
    model._check_tokens(prompt, "prompt")
    check_positive_int("num_tokens", num_tokens)
    check_allocation("num_tokens", (prompt.shape[0], prompt.shape[1] + num_tokens), dtype=torch.int64)
    temperature = check_real("temperature", temperature, low=0.0)
    check_generator("generator", generator)
    was_training = model.training
    model.eval()
    try:
        # checked once, above: every token, prompt or sampled, then takes the unchecked step
        state, tokens = model.init_state_for(prompt.shape[0]), [prompt]
        for t in range(prompt.shape[1]):
            logits, state = model.step_unchecked(prompt[:, t], state)
        for _ in range(num_tokens):
            if temperature == 0:
                nxt = logits.argmax(-1)
            else:
                # shifted by the max and divided in fp64: at a tiny temperature the scaled logits are 0 and -inf
                # (the argmax), never 0/0 = NaN (in fp32 a temperature of 1e-300 would round to 0)
                scaled = (logits - logits.amax(-1, keepdim=True)).double() / temperature
                nxt = torch.multinomial(scaled.softmax(-1), 1, generator=generator)[:, 0]
            tokens.append(nxt[:, None])
            logits, state = model.step_unchecked(nxt, state)
        return torch.cat(tokens, dim=1)
    finally:
        model.train(was_training)


#: The trained model the package ships (< 1 MB): a DeltaNet TinyLM; its recipe is
#: :mod:`ttr_edu.experiments.lm_checkpoint`, and its metadata say how it was trained and how well it does.
SHIPPED_CHECKPOINT = Path(__file__).resolve().parent / "checkpoints" / "deltanet_stdlib.pt"


def save_checkpoint(model: TinyLM, path: str | Path, metadata: dict) -> None:
    """Save ``model`` (its :class:`LMConfig` and weights) with ``metadata`` (plain numbers, strings, dicts) to ``path``.

    Raises:
        TypeError: ``model`` is not a :class:`TinyLM`, ``path`` not a str or path, or ``metadata`` not a dict of
            numbers, strings, lists and dicts.
        FileNotFoundError: the folder of ``path`` does not exist. IsADirectoryError: ``path`` is a folder.
    """
    if not isinstance(model, TinyLM):
        raise TypeError(f"model: expected a TinyLM, got {type(model).__name__}")
    path = _as_path(path)
    if path.is_dir():
        raise IsADirectoryError(f"path: {path} is a folder; give the checkpoint's file name, e.g. {path / 'lm.pt'}")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"path: the folder {path.parent} does not exist")
    if not isinstance(metadata, dict):
        raise TypeError(
            f"metadata: expected a dict of numbers, strings, lists and dicts, got {type(metadata).__name__}"
        )
    state = {name: tensor.detach().cpu().clone() for name, tensor in model.state_dict().items()}
    plain = {key: _plain(value) for key, value in metadata.items()}  # loadable with weights_only=True
    torch.save({"config": asdict(model.config), "state_dict": state, "metadata": plain}, path)


def _plain(value):
    """``value`` as built-in types only (a ``TorchVersion`` is a ``str`` subclass that ``weights_only`` refuses)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    for kind in (int, float, str):
        if isinstance(value, kind):
            return kind(value)
    raise TypeError(f"metadata: expected numbers, strings, lists and dicts, got {type(value).__name__} {value!r}")


def _as_path(path) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path: expected a str or a path, got {type(path).__name__}")
    return Path(path)


def load_checkpoint(path: str | Path = SHIPPED_CHECKPOINT) -> tuple[TinyLM, dict]:
    """Load a model written by :func:`save_checkpoint` (default: the shipped one), in eval mode, on the CPU.

    Returns:
        ``(model, metadata)``: the :class:`TinyLM` and what :func:`save_checkpoint` recorded (for the shipped one:
        mixer, seed, the recipe, ``valid_bpb`` and ``test_bpb`` on the whole splits, ``corpus_sha256``,
        ``python_version``, ``torch_version``, ``train_seconds``).

    Raises:
        TypeError: ``path`` not a str or path. FileNotFoundError: no file at ``path``. ValueError: the file is not a
        checkpoint of this module.
    """
    path = _as_path(path)
    if not path.is_file():
        raise FileNotFoundError(f"path: no checkpoint at {path}")
    try:  # tensors and plain data only: no code runs
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as error:
        raise ValueError(f"path: {path} is not a TinyLM checkpoint ({str(error).splitlines()[0][:120]})") from None
    if not isinstance(saved, dict) or not {"config", "state_dict", "metadata"} <= set(saved):
        raise ValueError(f"path: {path} is not a TinyLM checkpoint (expected config, state_dict and metadata)")
    model = TinyLM(LMConfig(**saved["config"]))
    model.load_state_dict(saved["state_dict"])
    return model.eval(), saved["metadata"]

"""What every token mixer shares: the short convolution, the input policy for ``x``, and the :class:`_Mixer` template.

Every mixer maps ``x`` of shape ``(B, T, hidden_size)`` to the same shape, in four steps that read top to bottom:

1. project ``x`` to ``q, k, v`` (and the per-head ``beta`` and log decay ``g`` where the layer has them);
2. optionally pass ``q, k, v`` through a causal depthwise *short convolution* (``use_short_conv``, ``conv_size``),
   which lets a key see the previous token: the one-layer associative-recall circuit needs exactly that;
3. mix with the reference op of :mod:`ttr_edu.ops` in the fla layout ``(B, T, H, D)``;
4. normalise each head's output (RMSNorm, for the parametric layers) and project back.

Every mixer also reads one token at a time: :meth:`_Mixer.step` carries a :class:`MixerState` from
:meth:`_Mixer.initial_state`, and each layer supplies the recurrent form of its op next to its chunk form
(``mix_step`` beside ``mix``). A parametric memory's step costs the same at any position; a nonparametric one's grows
with its key-value cache. The tests prove, for every registered mixer, that stepping through a sequence gives the
outputs of the whole-sequence forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ttr_edu._internal.validation import (
    Dims,
    check_allocation,
    check_bool,
    check_choice,
    check_finite,
    check_positive_int,
)
from ttr_edu.ops import get_feature_map
from ttr_edu.ops.feature_maps import FEATURE_MAPS, d_dot

__all__ = [
    "ShortConvolution",
    "MAX_CONV_SIZE",
    "check_layer_input",
    "MixerState",
]


class ShortConvolution(nn.Module):
    """A causal depthwise convolution over time with a SiLU, ``(B, T, C) -> (B, T, C)`` (as fla's ``ShortConvolution``).

    Each channel mixes its own last ``conv_size`` time steps, so a key can hold the previous token.
    """

    def __init__(self, hidden_size: int, conv_size: int = 4) -> None:
        super().__init__()
        self.hidden_size = check_positive_int("hidden_size", hidden_size)
        self.conv_size = check_positive_int("conv_size", conv_size)
        check_allocation("hidden_size", (hidden_size, conv_size), what="the convolution's weights")
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
    """The input policy for a layer's ``x`` (``ttr_edu._internal.validation``): a floating ``(B, T, hidden_size)``
    tensor with ``B, T ≥ 1``, finite, and of the dtype and device of the module's parameters.

    Raises:
        TypeError: ``module`` is no layer with a ``hidden_size``; ``x`` not a floating tensor, or of a dtype other
            than the module's (``module.to(dtype)`` converts it).
        ValueError: a wrong shape, an empty batch or sequence, NaN/inf entries, another device.
    """
    _check_input(module, x, ("B", "T", "hidden_size"))


def _check_input(module: nn.Module, x, shape: tuple[str, ...]) -> None:
    """:func:`check_layer_input` for ``x`` of the named ``shape``: ``(B, T, hidden_size)``, or one token's
    ``(B, hidden_size)`` in :meth:`_Mixer.step`."""
    if not isinstance(module, nn.Module) or not isinstance(getattr(module, "hidden_size", None), int):
        raise TypeError(
            f"module: expected a layer of ttr_edu.layers (an nn.Module with an int hidden_size), got "
            f"{type(module).__name__}"
        )
    dims = Dims(hidden_size=module.hidden_size)
    dims.bind("x", x, shape)
    if any(dims[d] == 0 for d in shape[:-1]):
        raise ValueError(f"x: expected {' and '.join(f'{d} >= 1' for d in shape[:-1])}, got shape {tuple(x.shape)}")
    weight = next(module.parameters(), None)
    if weight is not None and x.dtype != weight.dtype:
        raise TypeError(
            f"x: expected the dtype of the module's parameters ({weight.dtype}), got {x.dtype}; convert one of them "
            f"(x.to({weight.dtype}) or module.to({x.dtype}))"
        )
    if weight is not None and x.device != weight.device:
        raise ValueError(f"x: expected a tensor on {weight.device} (the module's device), got one on {x.device}")
    check_finite("x", x)


@dataclass
class MixerState:
    """What :meth:`_Mixer.step` carries from one token to the next.

    Attributes:
        window: the last ``conv_size`` inputs ``(B, ≤ conv_size, hidden_size)`` (the short convolution's receptive
            field), ``None`` before the first token.
        memory: the layer's recurrent state, as its op's ``initial_state`` takes it: ``S`` ``(B, H, D_k, D_v)`` for
            a linear memory, a pair for RLS / Mesa (``(S, P)``) and for the key-value cache (``(k, v)``, each
            ``(B, t, H, D)``), the MLP weights for TTT-MLP and Titans. ``None``: the op's zero state.
    """

    window: torch.Tensor | None = None
    memory: Any = None


class _Mixer(nn.Module):
    """What every mixer shares: q, k, v projections, optional short convolutions, heads, the output projection.

    A subclass defines ``mix`` (the chunk form of its op over a whole sequence) and ``mix_step`` (the recurrent
    form over one token, from and to its memory); it overrides ``project`` to add ``beta``, ``g`` or feature maps,
    ``initial_memory`` when its memory does not start at the op's zero state, and ``state_size``.
    """

    parametric = True  # a fixed-size memory S (else: the key-value cache)

    def __init__(self, hidden_size: int, num_heads: int, use_short_conv: bool, conv_size: int) -> None:
        super().__init__()
        self.hidden_size = check_positive_int("hidden_size", hidden_size)
        self.num_heads = check_positive_int("num_heads", num_heads)
        check_allocation("hidden_size", (4 * hidden_size, hidden_size), what="the q, k, v and output projections")
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

    def mix_step(self, memory, **inputs: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """The recurrent form over one token: inputs ``(B, 1, H, D)`` and the memory -> ``(o, memory)``."""
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, hidden_size) -> (B, T, hidden_size)``, through the chunk form of the layer's op.

        Raises:
            TypeError: ``x`` not a floating tensor, or not of the module's dtype.
            ValueError: ``x`` not ``(B, T, hidden_size)`` with ``B, T ≥ 1``, not finite, or on another device.
        """
        o = self.mix(**self.project(x))
        return self.o_proj(o.flatten(-2))

    # ---- one token at a time ---------------------------------------------------------------------------------
    @property
    def receptive_field(self) -> int:
        """How many past inputs the projections see: the short convolution's width (1 without it)."""
        return self.qkv_conv1d.conv_size if self.use_short_conv else 1

    def initial_memory(self, batch_size: int):
        """The memory before the first token (``None``: the op's zero state)."""
        return None

    def initial_state(self, batch_size: int) -> MixerState:
        """The state before the first token of ``batch_size`` sequences, for :meth:`step`.

        Raises:
            ValueError: ``batch_size`` not an integer ≥ 1, or so large that the batch's memory could not fit in the
                device's memory (the state of ``batch_size`` sequences is made here or at the first token).
        """
        check_positive_int("batch_size", batch_size)
        weight = next(self.parameters(), None)
        check_allocation(
            "batch_size",
            (batch_size, self.state_size(1)),
            dtype=torch.float32 if weight is None else weight.dtype,
            device=None if weight is None else weight.device,
            what="the memory of the batch",
        )
        return MixerState(None, self.initial_memory(batch_size))

    def step(self, x: torch.Tensor, state: MixerState) -> tuple[torch.Tensor, MixerState]:
        """Read one token per sequence with the recurrent form of the layer's op.

        The short convolution sees the last ``conv_size`` inputs only, so projecting that window and keeping its
        last position gives exactly the whole-sequence projection at this token, at a cost independent of the
        position.

        Args:
            x: ``(B, hidden_size)``, the token's input, of the module's dtype and device.
            state: from :meth:`initial_state` or the previous step (not modified).

        Returns:
            ``(o, state)``: the output ``(B, hidden_size)``, equal to ``forward``'s at this position, and the new
            state.

        Raises:
            TypeError: ``x`` not a floating tensor of the module's dtype; ``state`` not a :class:`MixerState`.
            ValueError: ``x`` not ``(B, hidden_size)``, not finite, on another device, or of another batch size
                than ``state``.
        """
        if not isinstance(state, MixerState):
            raise TypeError(f"state: expected a MixerState (from initial_state), got {type(state).__name__}")
        if isinstance(x, torch.Tensor) and x.dim() != 2:
            raise ValueError(f"x: expected one token per sequence, shape (B, hidden_size), got {tuple(x.shape)}")
        _check_input(self, x, ("B", "hidden_size"))  # one token per sequence: dtype, device and values as forward's
        if state.window is not None and state.window.shape[0] != x.shape[0]:
            raise ValueError(
                f"x: expected the batch size of the state (B = {state.window.shape[0]}), got B = {x.shape[0]}; "
                "start a new state with initial_state(B) for another batch"
            )
        window = x[:, None] if state.window is None else torch.cat([state.window, x[:, None]], dim=1)
        window = window[:, -self.receptive_field :]
        inputs = {name: value[:, -1:] for name, value in self.project(window).items()}  # this token's, T = 1
        o, memory = self.mix_step(state.memory, **inputs)
        return self.o_proj(o.flatten(-2))[:, 0], MixerState(window, memory)

    def state_size(self, seq_len: int) -> int:
        """Floats kept per sequence to produce the next output (see the module docstring)."""
        check_positive_int("seq_len", seq_len)
        return 2 * seq_len * self.hidden_size


def _same_width_feature_map(feature_map: str | None, head_dim: int):
    """``feature_map`` by name for a layer whose state is ``D × D`` (``None``: fla's SiLU); ``dpfp`` etc. refused."""
    if feature_map is None:
        return F.silu
    check_choice("feature_map", feature_map, FEATURE_MAPS)
    if d_dot(feature_map, head_dim) != head_dim:
        raise ValueError(
            f"feature_map: this layer needs a map that keeps the head width {head_dim}, "
            f"got {feature_map!r} with d_dot {d_dot(feature_map, head_dim)}"
        )
    return get_feature_map(feature_map)

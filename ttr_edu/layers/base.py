"""What every token mixer shares: its input pipeline, the short convolution, the input policy for ``x``, the template.

A mixer owns its whole input pipeline. It maps ``x`` of shape ``(B, T, hidden_size)`` to the same shape in four steps
that read top to bottom:

1. project ``x`` to ``q, k, v`` side by side (one matrix, ``qkv_proj``);
2. optionally pass them through a causal depthwise *short convolution* (``use_short_conv``, ``conv_size``), which
   lets a key see the previous token (the one-layer associative-recall circuit needs exactly that). The
   convolution ends in an activation per group of channels, as flash-linear-attention's three convolutions do: a
   SiLU on ``v`` always, on ``q`` and ``k`` only when the feature map is the SiLU (:data:`QK_FEATURE_MAPS`);
3. :meth:`Mixer.op_inputs`: split the heads, apply the feature map ``φ`` to ``q`` and ``k`` (when it is not the
   convolution's SiLU), the norms, and compute ``beta`` or the log decay ``g``: the op's inputs in the fla layout
   ``(B, T, H, D)``;
4. mix with the op of :mod:`ttr_edu.ops` (its chunk form, :meth:`Mixer.mix`), normalise each head's output where
   the layer does, and project back.

Every mixer also reads one token at a time: :meth:`Mixer.step` carries a :class:`MixerState` from
:meth:`Mixer.initial_state` through the same pipeline: this token's projection, the convolution's
:meth:`ShortConvolution.step` from its cache of the previous inputs, the same :meth:`Mixer.op_inputs`, and the
recurrent form of the op (``mix_step`` beside ``mix``). A parametric memory's step costs the same at any position; a
nonparametric one's grows with its key-value cache. The tests prove, for every registered mixer, feature map and
convolution setting, that stepping through a sequence gives the outputs of the whole-sequence forward pass.

A step checks its arguments, then runs :meth:`Mixer.step_unchecked`, which a caller that checked once (a language
model's generation) runs directly: at a few dozen tensor ops per token, a check per token would cost as much as the
step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

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
    finite_checks,
)
from ttr_edu.ops import get_feature_map
from ttr_edu.ops.feature_maps import FEATURE_MAPS, d_dot

__all__ = [
    "Mixer",
    "ShortConvolution",
    "MixerState",
    "QK_FEATURE_MAPS",
]

#: The longest short convolution: fla's layers use 4; a huge kernel would only run (for minutes) over padding.
MAX_CONV_SIZE = 64

#: The feature maps ``φ`` a parametric mixer takes on ``q`` and ``k`` (its ``feature_map`` option), each followed by
#: the layer's norm. name -> (whether the short convolution's SiLU stays on ``q`` and ``k``, the map of
#: :data:`ttr_edu.ops.FEATURE_MAPS` applied after the convolution, ``None`` for none). ``"silu"`` is the
#: convolution's own SiLU, applied once (fla's DeltaNet, ``qk_activation='silu'``); ``"identity"``,
#: ``"elu_plus_one"`` and ``"relu"`` replace it (fla's ``'identity'``, ``'elu'`` and ``'relu'``);
#: ``"elu_plus_one_after_silu"`` keeps the SiLU and stacks ELU+1 on it. Without the convolution, the SiLU of
#: ``"silu"`` (and of the stacked map) is applied as part of ``φ``.
QK_FEATURE_MAPS: dict[str, tuple[bool, str | None]] = {
    "silu": (True, None),
    "identity": (False, None),
    "elu_plus_one": (False, "elu_plus_one"),
    "relu": (False, "relu"),
    "elu_plus_one_after_silu": (True, "elu_plus_one"),
}

#: The activations a short convolution ends in (besides ``None``, none), as fla's ``ShortConvolution``.
_ACTIVATIONS = ("silu",)


class ShortConvolution(nn.Module):
    """A causal depthwise convolution over time, then an activation per group of channels, ``(B, T, C) -> (B, T, C)``.

    Each channel mixes its own last ``conv_size`` time steps, so a key can hold the previous token. As fla's
    ``ShortConvolution`` (whose ``activation`` is ``'silu'`` or ``None``), with several of fla's convolutions side by
    side in one: ``activation=(None, None, "silu")`` over ``q, k, v`` is fla's DeltaNet with a feature map other
    than the SiLU. :meth:`forward` reads a whole sequence, :meth:`step` one token from a cache of the previous
    inputs; the tests prove them equal.

    Args:
        hidden_size: the channels ``C``.
        conv_size: the taps; the last one weighs the current token. ``1 ≤ conv_size ≤ 64``.
        activation: ``"silu"`` or ``None`` for every channel, or a tuple with one of them per group: the channels
            split into ``len(activation)`` groups of equal width, in order.

    Raises:
        TypeError, ValueError: a size that is not a positive int, a ``conv_size`` above 64, an activation other than
            ``"silu"`` or ``None``, or groups that do not divide ``hidden_size``.
    """

    def __init__(
        self, hidden_size: int, conv_size: int = 4, activation: str | None | Sequence[str | None] = "silu"
    ) -> None:
        super().__init__()
        self.hidden_size = check_positive_int("hidden_size", hidden_size)
        self.conv_size = check_positive_int("conv_size", conv_size)
        check_allocation("hidden_size", (hidden_size, conv_size), what="the convolution's weights")
        if conv_size > MAX_CONV_SIZE:
            raise ValueError(
                f"conv_size: a short convolution mixes a few neighbouring tokens; expected 1 to {MAX_CONV_SIZE}, "
                f"got {conv_size}"
            )
        groups = (activation,) if activation is None or isinstance(activation, str) else tuple(activation)
        for act in groups:
            if act is not None:
                check_choice("activation", act, _ACTIVATIONS)
        if not groups or hidden_size % len(groups):
            raise ValueError(
                f"activation: expected one activation or one per group of equal width; {len(groups)} groups do not "
                f"divide hidden_size={hidden_size}"
            )
        self.activation = groups[0] if len(set(groups)) == 1 else groups
        width = hidden_size // len(groups)
        self._runs = _runs(groups, width)  # (start, stop, activation) of each run of channels
        self.conv = nn.Conv1d(hidden_size, hidden_size, conv_size, groups=hidden_size, padding=conv_size - 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, hidden_size) -> (B, T, hidden_size)``. Raises as :func:`check_layer_input`."""
        check_layer_input(self, x)
        return self.convolve(x)

    def convolve(self, x: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` without the check of ``x`` ``(B, T, hidden_size)``, for a layer whose input was checked."""
        T = x.shape[1]
        y = self.conv(x.transpose(1, 2))[..., :T]  # (B, C, T); padding both sides, the right end cut: causal
        return self._activate(y.transpose(1, 2))

    def step(self, x: torch.Tensor, cache: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One token: ``x`` ``(B, hidden_size)`` and the ``cache`` of the previous inputs (``(B, L, hidden_size)``,
        ``L < conv_size``; ``None`` before the first token, where the convolution sees zeros) -> ``(y, cache)``:
        :meth:`forward`'s output at this position ``(B, hidden_size)`` and the cache for the next token. Two
        elementwise ops and a sum, where the padded convolution over the window would cost a dozen. Unchecked: for
        a layer's one-token step, whose caller checked ``x``."""
        window = x[:, None] if cache is None else torch.cat([cache, x[:, None]], dim=1)  # (B, L + 1, C)
        taps = self.conv.weight[:, 0, -window.shape[1] :]  # (C, L + 1): the taps that meet these inputs
        y = self._activate((window * taps.T).sum(1) + cast(torch.Tensor, self.conv.bias))
        keep = self.conv_size - 1
        return y, (window[:, -keep:] if keep else None)

    def _activate(self, y: torch.Tensor) -> torch.Tensor:
        """The activation of each group of channels (the last axis) of the convolution's output ``y``."""
        if len(self._runs) == 1:
            return F.silu(y) if self._runs[0][2] else y
        return torch.cat([F.silu(y[..., a:b]) if act else y[..., a:b] for a, b, act in self._runs], dim=-1)


def _runs(groups: tuple[str | None, ...], width: int) -> list[tuple[int, int, str | None]]:
    """Consecutive groups with the same activation merged: ``(first channel, end, activation)`` of each run."""
    runs: list[tuple[int, int, str | None]] = []
    for i, act in enumerate(groups):
        if runs and runs[-1][2] == act:
            runs[-1] = (runs[-1][0], (i + 1) * width, act)
        else:
            runs.append((i * width, (i + 1) * width, act))
    return runs


def check_layer_input(module: nn.Module, x: Any) -> None:
    """The input policy for a layer's ``x`` (``ttr_edu._internal.validation``): a floating ``(B, T, hidden_size)``
    tensor with ``B, T ≥ 1``, finite, and of the dtype and device of the module's parameters.

    Raises:
        TypeError: ``module`` is no layer with a ``hidden_size``; ``x`` not a floating tensor, or of a dtype other
            than the module's (``module.to(dtype)`` converts it).
        ValueError: a wrong shape, an empty batch or sequence, NaN/inf entries, another device.
    """
    _check_input(module, x, ("B", "T", "hidden_size"))


def _check_input(module: nn.Module, x: Any, shape: tuple[str, ...]) -> None:
    """:func:`check_layer_input` for ``x`` of the named ``shape``: ``(B, T, hidden_size)``, or one token's
    ``(B, hidden_size)`` in :meth:`Mixer.step`."""
    if not isinstance(module, nn.Module) or not isinstance(getattr(module, "hidden_size", None), int):
        raise TypeError(
            f"module: expected a layer of ttr_edu.layers (an nn.Module with an int hidden_size), got "
            f"{type(module).__name__}"
        )
    dims = Dims(hidden_size=cast(int, module.hidden_size))
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
    """What :meth:`Mixer.step` carries from one token to the next.

    Attributes:
        conv: the short convolution's cache, the projected inputs of the previous ``conv_size − 1`` tokens
            ``(B, ≤ conv_size − 1, channels)`` (:meth:`ShortConvolution.step`); ``None`` before the first token or
            without the convolution.
        memory: the layer's recurrent state, as its op's ``initial_state`` takes it: ``S`` ``(B, H, D_k, D_v)`` for
            a linear memory, a pair for RLS / Mesa (``(S, P)``) and for the key-value cache (``(k, v)``, each
            ``(B, t, H, D)``), the MLP weights for TTT-MLP and Titans. ``None``: the op's zero state.
        batch_size: the number of sequences ``B`` the state was made for.
    """

    conv: torch.Tensor | None = None
    memory: Any = None
    batch_size: int = 1


class Mixer(nn.Module):
    """What every mixer shares: its input pipeline (the module docstring), heads, the output projection.

    A subclass defines :meth:`mix` (the chunk form of its op over a whole sequence) and :meth:`mix_step` (the
    recurrent form over one token, from and to its memory); it overrides :meth:`op_inputs` to add ``beta``, ``g`` or
    norms, :meth:`initial_memory` when its memory does not start at the op's zero state, and :meth:`state_size`
    when its memory is not one ``D_k × D_v`` matrix per head. For a one-token step cheaper than the checked op's it
    may also define :meth:`mix_step_unchecked`.

    Args:
        hidden_size, num_heads: the width and the heads (``D = hidden_size / num_heads``).
        use_short_conv, conv_size: the causal depthwise convolution over the projected channels.
        feature_map: ``φ`` on ``q`` and ``k``, a name of :data:`QK_FEATURE_MAPS` (a parametric memory; with
            ``any_width`` any name of :data:`ttr_edu.ops.FEATURE_MAPS` too, ``d_k`` then being its ``d_dot``).
            ``None``: a key-value-cache layer, whose convolution ends in the SiLU on every channel and whose ``q``
            and ``k`` take no feature map.
        feature_map_params: the map's parameters (``{"nu": 2}`` for ``"dpfp"``).
        extra_pairs: key-value pairs per token beyond the first (DeltaNet's Householder products): the projection
            then holds ``q``, ``k``, ``v``, the extra keys, the extra values, each ``hidden_size`` wide.
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        use_short_conv: bool = True,
        conv_size: int = 4,
        feature_map: str | None = None,
        *,
        feature_map_params: dict | None = None,
        any_width: bool = False,
        extra_pairs: int = 0,
    ) -> None:
        super().__init__()
        self.hidden_size = check_positive_int("hidden_size", hidden_size)
        self.num_heads = check_positive_int("num_heads", num_heads)
        channels = (3 + 2 * extra_pairs) * hidden_size
        check_allocation("hidden_size", (channels + hidden_size, hidden_size), what="the projections")
        if hidden_size % num_heads:
            raise ValueError(f"num_heads: must divide hidden_size={hidden_size}, got {num_heads}")
        self.head_dim = hidden_size // num_heads
        self.extra_pairs = extra_pairs
        self.qkv_proj = nn.Linear(hidden_size, channels, bias=False)  # q, k, v (and the extra pairs) side by side
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.use_short_conv = check_bool("use_short_conv", use_short_conv)
        self.feature_map = feature_map
        silu_on_qk, self.phi, self.d_k = _resolve_feature_map(
            feature_map, self.head_dim, self.use_short_conv, feature_map_params, any_width
        )
        if self.use_short_conv:  # depthwise, so one convolution over the channels is one per q, k, v
            qk = "silu" if silu_on_qk else None
            groups = (qk, qk, "silu") + (qk,) * extra_pairs + ("silu",) * extra_pairs
            self.qkv_conv1d = ShortConvolution(channels, conv_size, activation=groups)

    # ---- the input pipeline ----------------------------------------------------------------------------------
    def project(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """``x`` ``(B, T, hidden_size)`` -> the op's inputs: ``q, k`` ``(B, T, H, D_k)``, ``v`` ``(B, T, H, D)``
        (+ ``beta``, ``g``, ...), as :meth:`forward` passes them to :meth:`mix`. Raises as :meth:`forward`."""
        check_layer_input(self, x)
        return self._pipeline(x)

    def _pipeline(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        qkv = self.qkv_proj(x)
        if self.use_short_conv:
            qkv = self.qkv_conv1d.convolve(qkv)
        return self.op_inputs(x, qkv)

    def op_inputs(self, x: torch.Tensor, qkv: torch.Tensor) -> dict[str, torch.Tensor]:
        """The op's inputs from ``x`` ``(B, T, hidden_size)`` and its projected (and convolved) channels ``qkv``
        ``(B, T, channels)``: ``q, k`` through ``φ`` ``(B, T, H, D_k)`` and ``v`` ``(B, T, H, D)``. A subclass
        adds ``beta``, ``g`` or norms. Unchecked: :meth:`forward` and :meth:`step` check ``x`` first; the one path
        of both, for a whole sequence and for one token (``T = 1``)."""
        q, k = self._qk(qkv)
        return {"q": q, "k": k, "v": self._heads(qkv[..., 2 * self.hidden_size : 3 * self.hidden_size])}

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(*x.shape[:-1], -1, self.head_dim)  # (B, T, hidden) -> (B, T, H, D)

    def _qk(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``φ(q), φ(k)`` ``(B, T, H, D_k)`` from the channels ``qkv``."""
        q, k = self._heads(qkv[..., : self.hidden_size]), self._heads(qkv[..., self.hidden_size : 2 * self.hidden_size])
        return (q, k) if self.phi is None else (self.phi(q), self.phi(k))

    def _normed_qk(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``l2(φ(q)), l2(φ(k))`` ``(B, T, H, D)``, in one pass over q and k side by side (``φ`` is elementwise
        and the norm is per head), as fla's DeltaNet normalises them. The normalisation is
        :func:`ttr_edu.ops.l2_norm`'s, ``x / max(‖x‖, 1e-12)``, without the op's scans for NaN/inf: ``qkv`` is the
        layer's own activation, made from an ``x`` that :meth:`forward` or :meth:`step` checked."""
        qk = qkv[..., : 2 * self.hidden_size]
        qk = qk.view(*qk.shape[:-1], 2 * self.num_heads, self.head_dim)
        if self.phi is not None:
            qk = self.phi(qk)
        qk = _l2(qk)
        return qk[..., : self.num_heads, :], qk[..., self.num_heads :, :]

    # ---- the op ------------------------------------------------------------------------------------------------
    def mix(self, *args: Any, **inputs: Any) -> torch.Tensor:
        """The op's chunk form: the inputs of :meth:`op_inputs` -> ``o`` ``(B, T, H, D_v)``."""
        raise NotImplementedError(f"{type(self).__name__}: a mixer defines mix, its op's chunk form")

    def mix_step(self, *args: Any, **inputs: Any) -> tuple[torch.Tensor, Any]:
        """The recurrent form over one token: inputs ``(B, 1, H, ·)`` and the memory -> ``(o, memory)``."""
        raise NotImplementedError(f"{type(self).__name__}: a mixer defines mix_step, its op's recurrent form")

    def mix_step_unchecked(self, *args: Any, **inputs: Any) -> tuple[torch.Tensor, Any]:
        """:meth:`mix_step` for inputs ``(B, 1, H, ·)`` this layer made (a step of :meth:`step_unchecked`, which
        switches the scans for NaN/inf off around it). By default :meth:`mix_step` itself; a layer may override it
        with its op's one-token maths (e.g. :func:`ttr_edu.ops.delta_rule.recurrent_step`)."""
        return self.mix_step(*args, **inputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, hidden_size) -> (B, T, hidden_size)``, through the chunk form of the layer's op.

        Raises:
            TypeError: ``x`` not a floating tensor, or not of the module's dtype.
            ValueError: ``x`` not ``(B, T, hidden_size)`` with ``B, T ≥ 1``, not finite, or on another device.
        """
        o = self.mix(**self.project(x))
        return self.o_proj(o.flatten(-2))

    # ---- one token at a time ---------------------------------------------------------------------------------
    def initial_memory(self, batch_size: int) -> Any:
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
        return MixerState(None, self.initial_memory(batch_size), batch_size)

    def step(self, x: torch.Tensor, state: MixerState) -> tuple[torch.Tensor, MixerState]:
        """Read one token per sequence with the recurrent form of the layer's op.

        The short convolution sees the last ``conv_size`` inputs only, so its output at this token is exactly the
        whole-sequence projection here, at a cost independent of the position. Checks its arguments, then runs
        :meth:`step_unchecked`.

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
        if x.shape[0] != state.batch_size:
            raise ValueError(
                f"x: expected the batch size of the state (B = {state.batch_size}), got B = {x.shape[0]}; "
                "start a new state with initial_state(B) for another batch"
            )
        return self.step_unchecked(x, state)

    def step_unchecked(self, x: torch.Tensor, state: MixerState) -> tuple[torch.Tensor, MixerState]:
        """:meth:`step` without its argument checks (``x`` ``(B, hidden_size)``), for a caller that checked its
        arguments once: a language
        model's generation checks the prompt, then steps token by token through here
        (:func:`ttr_edu.models.lm.generate`). Same arguments and result as :meth:`step`; a wrong argument fails
        deep inside, or not at all. The pipeline of :meth:`forward` on this token alone, with the scans for NaN/inf
        of the ops it calls switched off (:func:`ttr_edu.finite_checks`)."""
        with finite_checks(False):
            qkv, conv = F.linear(x, self.qkv_proj.weight), state.conv  # (B, channels)
            if self.use_short_conv:
                qkv, conv = self.qkv_conv1d.step(qkv, conv)
            o, memory = self.mix_step_unchecked(state.memory, **self.op_inputs(x[:, None], qkv[:, None]))
        o = F.linear(o.reshape(x.shape[0], -1), self.o_proj.weight)
        return o, MixerState(conv, memory, state.batch_size)

    def state_size(self, seq_len: int) -> int:
        """Floats kept per sequence to produce the next output: ``H · D_k · D`` for a memory read through a feature
        map (one matrix per head), the key-value cache ``2 · T · hidden_size`` without one."""
        check_positive_int("seq_len", seq_len)
        if self.feature_map is None:
            return 2 * seq_len * self.hidden_size
        return self.num_heads * self.d_k * self.head_dim


def _l2(x: torch.Tensor) -> torch.Tensor:
    """``x / max(‖x‖, 1e-12)`` over the last axis: :func:`ttr_edu.ops.l2_norm` without its scans, for a layer's own
    activations."""
    return x / torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min(1e-12)


def _resolve_feature_map(
    name: str | None, head_dim: int, use_short_conv: bool, params: dict | None, any_width: bool
) -> tuple[bool, Callable[[torch.Tensor], torch.Tensor] | None, int]:
    """``(whether the convolution's SiLU stays on q and k, φ applied after it or None, d_k)`` for the feature map
    ``name`` (the rule of :data:`QK_FEATURE_MAPS`); ``None``: a key-value-cache layer (SiLU on q and k, no φ)."""
    if name is None:
        return True, None, head_dim
    names = {**QK_FEATURE_MAPS, **dict.fromkeys(FEATURE_MAPS)} if any_width else QK_FEATURE_MAPS
    check_choice("feature_map", name, names)
    if params is not None and not isinstance(params, dict):
        raise TypeError(f"feature_map_params: expected a dict such as {{'nu': 2}} or None, got {type(params).__name__}")
    silu, after = QK_FEATURE_MAPS.get(name, (False, name))
    phi, d_k = None, head_dim
    if after is not None:
        params = dict(params or {})
        if after == "favor_plus":
            params = {"d_k": head_dim, "m": head_dim, **params}
        try:  # an unknown or bad parameter is the caller's feature_map_params
            phi = get_feature_map(after, **params)
            d_k = d_dot(after, head_dim, **{n: p for n, p in params.items() if n != "d_k"})
        except (TypeError, ValueError) as error:
            raise type(error)(f"feature_map_params: {error}") from None
    elif params:
        raise TypeError(f"feature_map_params: {name!r} takes no parameters, got {sorted(params)}")
    if silu and not use_short_conv:  # no convolution to carry the SiLU: it becomes part of φ
        phi = F.silu if phi is None else _after_silu(phi)
        silu = False
    return silu, phi, d_k


def _after_silu(phi: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    def stacked(z: torch.Tensor) -> torch.Tensor:
        return phi(F.silu(z))

    return stacked

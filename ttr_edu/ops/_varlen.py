"""Variable-length batches in fla's ``cu_seqlens`` convention, for every recurrent and chunk op.

flash-linear-attention (like FlashAttention's varlen API) packs N sequences one after another along the time axis
of a batch of one: ``q`` is ``(1, T, H, D_k)`` and sequence ``n`` is the tokens ``cu_seqlens[n] : cu_seqlens[n+1]``.
Each sequence starts from its own initial state and ends in its own final state, both ``(N, H, D_k, D_v)``.

Here the sequences are unpacked into padded batches and run through the op's ordinary batched code, so no state can
cross a boundary: each sequence is its own batch row. Zero padding at the end of a row changes nothing (a zero key
or ``beta`` writes nothing, a zero log decay keeps the state) and the padded outputs are dropped. To keep memory
linear in T when lengths differ a lot, the sequences are grouped by length so that no group holds more padding than
tokens (:func:`length_groups`): at most ``2 T`` tokens are materialised in all, in a few batched calls.
"""

from __future__ import annotations

import functools
import inspect
import operator
from collections.abc import Callable
from typing import Any, TypeVar

import torch
import torch.nn.functional as F

from ttr_edu._internal.validation import check_cu_seqlens, check_tensor

__all__ = ["varlen", "run_varlen", "length_groups"]

Op = TypeVar("Op", bound=Callable[..., Any])


def varlen(*tensors: str) -> Callable[[Op], Op]:
    """Give an op fla's ``cu_seqlens``: the one place where a packed call is told from a batched one.

    ``@varlen("q", "k", "v", "beta")`` above an op whose signature has those tensors, ``initial_state``,
    ``output_final_state`` and ``cu_seqlens``: a call with ``cu_seqlens`` runs the op on each packed sequence
    (:func:`run_varlen`, its other arguments passed on), any other call runs the op as written."""

    def decorate(op: Op) -> Op:
        signature = inspect.signature(op)

        @functools.wraps(op)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            arguments = signature.bind(*args, **kwargs).arguments
            cu_seqlens = arguments.pop("cu_seqlens", None)
            if cu_seqlens is None:
                return op(*args, **kwargs)
            named = {name: arguments.pop(name) for name in tensors}
            initial_state = arguments.pop("initial_state", None)
            output_final_state = arguments.pop("output_final_state", False)
            return run_varlen(op, cu_seqlens, named, initial_state, output_final_state, **arguments)

        return wrapper  # type: ignore[return-value]

    return decorate


def length_groups(lengths: list[int]) -> list[list[int]]:
    """Sequence indices grouped for padded batches: longest first, a group closed before its padding (the group's
    longest length times its size, minus its tokens) would exceed its tokens. The total padded size is then at most
    twice the packed length, and equal lengths make one group."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups: list[list[int]] = []
    tokens = 0
    for i in order:
        if groups and (len(groups[-1]) + 1) * lengths[groups[-1][0]] <= 2 * (tokens + lengths[i]):
            groups[-1].append(i)
            tokens += lengths[i]
        else:
            groups.append([i])
            tokens = lengths[i]
    return groups


def _map_state(fn: Callable[[torch.Tensor], torch.Tensor], state):
    """Apply ``fn`` to the state, a tensor or a tuple of tensors (e.g. ``(S, z)``), keeping its structure."""
    if isinstance(state, (tuple, list)):
        return tuple(fn(part) for part in state)
    return fn(state)


def _check_states(initial_state, n_seq: int) -> None:
    parts = initial_state if isinstance(initial_state, (tuple, list)) else (initial_state,)
    for index, part in enumerate(parts):
        name = (
            "initial_state"
            if len(parts) == 1 and not isinstance(initial_state, (tuple, list))
            else (f"initial_state[{index}]")
        )
        check_tensor(name, part)
        if part.dim() == 0 or part.shape[0] != n_seq:
            raise ValueError(
                f"{name}: with cu_seqlens expected one state per sequence, (N, H, ...) with N = len(cu_seqlens) - 1 "
                f"= {n_seq}, got shape {tuple(part.shape)}"
            )


def run_varlen(op: Callable, cu_seqlens, tensors: dict, initial_state, output_final_state: bool, **options):
    """Run ``op`` on each packed sequence of ``tensors`` (by padded batches of similar lengths) and pack the results.

    Args:
        op: a batched op ``op(*tensors, initial_state=..., output_final_state=True, **options) -> (o, state)``.
        cu_seqlens: the offsets ``(N + 1,)``, checked by :func:`ttr_edu._internal.validation.check_cu_seqlens`.
        tensors: the op's positional tensors by name, in its order, each ``(1, T, ...)``; the first is ``q``.
        initial_state: ``None`` or the per-sequence state(s), each with leading dim N.
        output_final_state: return the N final states (stacked like ``initial_state``).

    Returns:
        ``(o, final_state)``: ``o`` ``(1, T, H, D_v)`` packed as the inputs; ``final_state`` with leading dim N, or
        ``None``.

    Raises:
        TypeError, ValueError: bad offsets (see ``check_cu_seqlens``), a tensor whose first two dims are not
        ``(1, T)``, or an ``initial_state`` without one state per sequence; the op's own errors otherwise.
    """
    offsets = check_cu_seqlens(cu_seqlens, next(iter(tensors.values())))
    T = offsets[-1]
    for name, x in tensors.items():
        check_tensor(name, x)
        if x.dim() < 2 or x.shape[:2] != (1, T):
            raise ValueError(
                f"{name}: with cu_seqlens every input is packed as (1, T, ...) with T = {T}, got {tuple(x.shape)}"
            )
    lengths = [b - a for a, b in zip(offsets, offsets[1:])]
    if initial_state is not None:
        _check_states(initial_state, len(lengths))

    outputs: list = [None] * len(lengths)
    finals: list = [None] * len(lengths)
    for group in length_groups(lengths):
        longest = lengths[group[0]]
        # (n, L, ...): each sequence of the group, zero-padded at its end to the group's longest
        batch = [
            torch.stack([_pad_end(x[0, offsets[i] : offsets[i + 1]], longest) for i in group]) for x in tensors.values()
        ]
        rows = torch.tensor(group, device=batch[0].device)
        start = (
            None
            if initial_state is None
            else _map_state(functools.partial(torch.index_select, dim=0, index=rows), initial_state)
        )
        o, final = op(*batch, initial_state=start, output_final_state=True, **options)
        for row, i in enumerate(group):
            outputs[i] = o[row, : lengths[i]]
            finals[i] = _map_state(operator.itemgetter(row), final)
    o = torch.cat(outputs).unsqueeze(0)
    if not output_final_state:
        return o, None
    if isinstance(finals[0], tuple):
        return o, tuple(torch.stack(parts) for parts in zip(*finals))
    return o, torch.stack(finals)


def _pad_end(x: torch.Tensor, length: int) -> torch.Tensor:
    """Zero-pad the first (time) axis of ``x`` up to ``length``."""
    return F.pad(x, [0, 0] * (x.dim() - 1) + [0, length - x.shape[0]])

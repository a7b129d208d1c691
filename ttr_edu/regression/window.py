"""Sliding-window weights for any function class and optimiser: the layer run over each window of pairs.

With :class:`~ttr_edu.regression.SlidingWindow` weights the memory at step ``t`` fits the pairs ``t − w < i ≤ t`` only.
For the first ``w − 1`` tokens the window is the whole prefix, so the causal uniform-weight layer answers them in one
run. Every later token ``t`` gets its own sequence, the ``w`` tokens of its window (``Tensor.unfold``), all of them run
as one batch; token ``t``'s answer is the last output of its window. The cost is ``O(T · w)`` pairs where a
recursive weighting costs ``O(T)``: the price of weights that no per-token decay can express.
"""

from __future__ import annotations

from typing import Any

import torch

__all__: list[str] = []  # the windowed evaluation behind TestTimeRegression, on its checked inputs


def _windows(x: torch.Tensor, window: int, rows: int) -> torch.Tensor:
    """``x`` ``(B, T·rows, *F)`` cut into its ``T − window + 1`` full windows of ``window`` tokens: each is a sequence
    of the batch, ``(B·(T − window + 1), window·rows, *F)``; windows of one batch row are consecutive."""
    B = x.shape[0]
    cut = x.unfold(1, window * rows, rows)  # (B, n_windows, *F, window·rows): the window's rows moved last
    cut = cut.movedim(-1, 2)  # (B, n_windows, window·rows, *F)
    return cut.reshape(B * cut.shape[1], *cut.shape[2:])


def _repeat(state: Any, times: int) -> Any:
    """A per-sequence initial state (a tensor ``(B, ...)`` or a tuple of them) repeated for each window of its row."""
    if state is None:
        return None
    if isinstance(state, tuple):
        return tuple(s.repeat_interleave(times, dim=0) for s in state)
    return state.repeat_interleave(times, dim=0)


def _last_window(state: Any, B: int) -> Any:
    """The final state of each batch row's last window, from the states of all windows."""
    if isinstance(state, tuple):
        return tuple(_last_window(s, B) for s in state)
    return state.reshape(B, -1, *state.shape[1:])[:, -1]


def windowed(
    inner: Any,
    window: int,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    rows: int = 1,
    per_token: dict[str, torch.Tensor] | None = None,
    per_pair: dict[str, torch.Tensor] | None = None,
    **options: Any,
) -> tuple[torch.Tensor, Any]:
    """``inner`` (the same choices with :class:`Uniform` weights) evaluated with sliding-window weights of ``window``.

    Args:
        inner: a :class:`~ttr_edu.regression.TestTimeRegression` with uniform weights.
        window: ``w``, the number of tokens a memory fits.
        q: ``(B, T, H, D_k)``; k, v: ``(B, T·rows, H, D)`` (``rows`` pairs per token, as DeltaProduct's).
        per_token: tensors ``(B, T, H)`` cut like ``q`` (``eta``, ``alpha``); per_pair: ``(B, T·rows, H)`` (``beta``).
        options: passed to ``inner`` unchanged (``scale``, ``initial_state``, ``output_final_state``); an initial state
            is where every window starts.
    Returns:
        ``(o, S_T)`` as ``inner`` returns them: ``S_T`` is the state of each sequence's last window.
    """
    per_token, per_pair = dict(per_token or {}), dict(per_pair or {})
    B, T = q.shape[:2]
    if T <= window:  # the window holds every pair: the uniform layer itself
        return inner(q, k, v, **per_token, **per_pair, **options)
    prefix = window - 1  # tokens whose window is the whole prefix
    first = None
    if prefix:
        first, _ = inner(
            q[:, :prefix],
            k[:, : prefix * rows],
            v[:, : prefix * rows],
            **{name: x[:, :prefix] for name, x in per_token.items()},
            **{name: x[:, : prefix * rows] for name, x in per_pair.items()},
            **{**options, "output_final_state": False},
        )
    n_windows = T - prefix
    options = dict(options)
    options["initial_state"] = _repeat(options.get("initial_state"), n_windows)
    o, S = inner(
        _windows(q, window, 1),
        _windows(k, window, rows),
        _windows(v, window, rows),
        **{name: _windows(x, window, 1) for name, x in per_token.items()},
        **{name: _windows(x, window, rows) for name, x in per_pair.items()},
        **options,
    )
    o = o[:, -1].reshape(B, n_windows, *o.shape[2:])  # each window's answer at its last token
    o = o if first is None else torch.cat([first, o], dim=1)
    return o, (None if S is None else _last_window(S, B))

"""Synthetic retrieval tasks of Schlag, Irie and Schmidhuber (2021), section 6.1.

Both settings show the model a sequence of (key, value) symbol pairs and then one query key; the target is the
value stored under that key. Keys and values are integer symbols; the model embeds the keys and uses one-hot
values, so the loss ``½‖y − onehot(target)‖²`` is 0.5 for the all-zero answer ("chance").

* **Setting 1, capacity** (:func:`capacity_batch`): the sequence holds ``num_keys`` *distinct* keys (a random
  permutation of the key vocabulary) paired with a random permutation of ``num_values`` values; its length is
  ``num_keys``. The query is one of the stored keys. Nothing is ever overwritten, so the only difficulty is to
  store ``S = num_keys`` associations in one fast-weight matrix.
* **Setting 2, overwrite** (:func:`overwrite_batch`): keys are drawn *with replacement* from the vocabulary,
  values at random; the length is ``2 S``. The query is a key that occurs in the sequence and the target is the
  *latest* value written under it, so a memory must replace old associations instead of adding to them.

A third generator, :func:`switching_regression`, is a continuous regression stream whose rule changes every few
steps (Wang, Shi and Fox 2025 motivate forgetting with such nonstationary streams); chapter 07 compares the
test-time-regression layers on it.

Generators are seeded by a ``torch.Generator`` (drawn on the CPU, then moved to ``device``), so a batch is the
same on every device for a given seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ttr_edu._internal.validation import (
    check_allocation,
    check_positive_float,
    check_positive_int,
    check_scalar_fits,
    guarded,
)

__all__ = ["RetrievalBatch", "capacity_batch", "overwrite_batch", "SwitchingStream", "switching_regression"]


@dataclass(frozen=True)
class RetrievalBatch:
    """One batch of a retrieval task; every field is an int64 tensor.

    Attributes:
        keys: ``(B, T)`` key symbols in ``[0, num_keys)``.
        values: ``(B, T)`` value symbols in ``[0, num_values)``, ``values[b, t]`` stored under ``keys[b, t]``.
        query: ``(B,)`` the key asked for; it occurs in ``keys[b]``.
        target: ``(B,)`` the value to retrieve: the latest value stored under ``query[b]``.
        num_keys: size of the key vocabulary.
        num_values: size of the value vocabulary (the one-hot dimension ``D_v``).
    """

    keys: torch.Tensor
    values: torch.Tensor
    query: torch.Tensor
    target: torch.Tensor
    num_keys: int
    num_values: int

    def to(self, device: torch.device | str) -> RetrievalBatch:
        """The same batch on ``device``."""
        return RetrievalBatch(
            self.keys.to(device),
            self.values.to(device),
            self.query.to(device),
            self.target.to(device),
            self.num_keys,
            self.num_values,
        )


def _check_common(batch_size, num_keys, num_values, generator) -> int:
    check_positive_int("batch_size", batch_size)
    check_positive_int("num_keys", num_keys)
    num_values = num_keys if num_values is None else check_positive_int("num_values", num_values)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator: expected a torch.Generator or None, got {type(generator).__name__}")
    return num_values


@guarded
def capacity_batch(
    batch_size: int,
    num_keys: int,
    *,
    seq_len: int | None = None,
    num_values: int | None = None,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> RetrievalBatch:
    """Setting 1 of Schlag et al. (2021, §6.1): ``seq_len`` distinct keys, each stored once, one query.

    Args:
        batch_size: ``B``.
        num_keys: size of the key vocabulary. The paper's ``S``: by default the sequence holds every key once.
        seq_len: ``T``, the number of pairs shown (default ``num_keys``). At most ``num_keys``: the keys are unique.
        num_values: size of the value vocabulary ``D_v`` (default ``num_keys``), at least ``seq_len`` so that the
            values of one sequence are distinct, as in the paper ("S unique keys and S values").
        generator: CPU ``torch.Generator`` for reproducible batches (default: the global RNG).
        device: where the returned tensors live.

    Returns:
        A :class:`RetrievalBatch` with ``keys`` and ``values`` of shape ``(B, T)``.

    Raises:
        TypeError: a size is not an int, or ``generator`` is not a ``torch.Generator``.
        ValueError: a size is < 1 or too large for memory, an unknown ``device``, ``seq_len > num_keys`` (more
            unique keys than the vocabulary holds) or ``seq_len > num_values``.
    """
    num_values = _check_common(batch_size, num_keys, num_values, generator)
    seq_len = num_keys if seq_len is None else check_positive_int("seq_len", seq_len)
    if seq_len > num_keys:
        raise ValueError(
            f"seq_len: setting 1 stores unique keys, so seq_len must be <= num_keys = {num_keys}; got {seq_len} "
            f"(more unique keys than the vocabulary holds)"
        )
    if seq_len > num_values:
        raise ValueError(
            f"num_values: setting 1 pairs each key with a distinct value, so num_values must be >= seq_len = "
            f"{seq_len}; got {num_values}"
        )
    check_allocation("batch_size" if batch_size >= num_keys else "num_keys", (batch_size, num_keys), what="the keys")
    check_allocation("num_values", (batch_size, num_values), what="the values")
    # Random permutations, one per row: argsort of uniform noise.
    keys = torch.rand(batch_size, num_keys, generator=generator).argsort(dim=1)[:, :seq_len]
    values = torch.rand(batch_size, num_values, generator=generator).argsort(dim=1)[:, :seq_len]
    position = torch.randint(seq_len, (batch_size,), generator=generator)
    rows = torch.arange(batch_size)
    batch = RetrievalBatch(keys, values, keys[rows, position], values[rows, position], num_keys, num_values)
    return batch.to(device)


@guarded
def overwrite_batch(
    batch_size: int,
    num_keys: int,
    *,
    seq_len: int | None = None,
    num_values: int | None = None,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> RetrievalBatch:
    """Setting 2 of Schlag et al. (2021, §6.1): keys drawn with replacement; the query asks for the latest value.

    Args:
        batch_size: ``B``.
        num_keys: the paper's ``S``, the size of the key vocabulary.
        seq_len: ``T`` (default ``2 * num_keys``, as in the paper).
        num_values: size of the value vocabulary ``D_v`` (default ``num_keys``); values are drawn with replacement.
        generator: CPU ``torch.Generator`` for reproducible batches (default: the global RNG).
        device: where the returned tensors live.

    Returns:
        A :class:`RetrievalBatch`; ``target[b]`` is the value at the *last* position where ``query[b]`` occurs.

    Raises:
        TypeError: a size is not an int, or ``generator`` is not a ``torch.Generator``.
        ValueError: a size is < 1 or too large for memory, an unknown ``device``.
    """
    num_values = _check_common(batch_size, num_keys, num_values, generator)
    seq_len = 2 * num_keys if seq_len is None else check_positive_int("seq_len", seq_len)
    check_allocation("batch_size" if batch_size >= seq_len else "seq_len", (batch_size, seq_len), what="the pairs")
    keys = torch.randint(num_keys, (batch_size, seq_len), generator=generator)
    values = torch.randint(num_values, (batch_size, seq_len), generator=generator)
    # Query a key that occurs: the key at a random position; its answer is its last occurrence's value.
    rows = torch.arange(batch_size)
    query = keys[rows, torch.randint(seq_len, (batch_size,), generator=generator)]
    positions = torch.arange(seq_len).expand(batch_size, seq_len)
    last = torch.where(keys == query[:, None], positions, -1).amax(dim=1)
    batch = RetrievalBatch(keys, values, query, values[rows, last], num_keys, num_values)
    return batch.to(device)


@dataclass(frozen=True)
class SwitchingStream:
    """A regression stream ``v = W_r^T k + noise`` whose map ``W_r`` is redrawn every ``switch_every`` steps.

    Tensors follow the fla layout ``(B, T, H, D)``. Step ``t`` stores the pair ``(k[:, t], v[:, t])``; the query
    ``q[:, t]`` is the *next* key and ``target[:, t]`` the *next* value, so a causal layer that answers
    ``y_t = m_t(q_t)`` from the pairs ``0..t`` makes a one-step-ahead prediction of ``target[:, t]``.

    Attributes:
        q: ``(B, T, H, D_k)`` the next key, ``q[:, t] = k[:, t + 1]`` (and a fresh key at ``t = T − 1``).
        k: ``(B, T, H, D_k)`` unit-norm keys.
        v: ``(B, T, H, D_v)`` values ``W_{r(t)}^T k_t + noise``.
        target: ``(B, T, H, D_v)`` the next value, ``target[:, t] = v[:, t + 1]``.
        regime: ``(T,)`` int64, the index ``r`` of the map that drew ``target[:, t]``; it is the same for every
            sequence and head. ``regime[t] = (t + 1) // switch_every``.
        switch_steps: ``(R − 1,)`` int64, the steps ``t`` where ``target[:, t]`` is the first value of a new map
            (``t = r · switch_every − 1`` for ``r = 1 … R − 1``): the predictions right after a switch.
        maps: ``(B, R, H, D_k, D_v)`` the maps ``W_r``, with standard normal entries.
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    target: torch.Tensor
    regime: torch.Tensor
    switch_steps: torch.Tensor
    maps: torch.Tensor


@guarded
def switching_regression(
    batch_size: int,
    seq_len: int,
    d_k: int,
    d_v: int | None = None,
    *,
    switch_every: int,
    num_heads: int = 1,
    noise: float = 0.05,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> SwitchingStream:
    """A nonstationary regression stream for one-step-ahead prediction (chapter 07, §4).

    Keys are uniform on the unit sphere of ``R^{D_k}``; the value of step ``s`` (counting the ``T + 1`` drawn
    pairs) is ``v_s = W_{r(s)}^T k_s + noise · ε_s`` with ``r(s) = s // switch_every``, a fresh standard normal map
    ``W_r`` per regime, sequence and head, and ``ε_s`` standard normal. The first ``T`` pairs are the stream;
    queries and targets are the pairs shifted by one step. Random numbers are drawn in float64 on the CPU, then
    cast to ``dtype`` and moved to ``device``, so a seed gives the same stream everywhere.

    Args:
        batch_size: ``B``.
        seq_len: ``T``, the number of stored pairs (and of predictions).
        d_k: ``D_k``, the key dimension.
        d_v: ``D_v``, the value dimension (default ``d_k``).
        switch_every: steps per regime; a value ``> T`` gives one stationary regime.
        num_heads: ``H``, independent streams per sequence.
        noise: standard deviation of the value noise, ``>= 0``.
        generator: CPU ``torch.Generator`` for reproducible streams (default: the global RNG).
        device: where the returned tensors live.
        dtype: floating dtype of ``q, k, v, target, maps``.

    Returns:
        A :class:`SwitchingStream`.

    Raises:
        TypeError: a size is not an int, ``noise`` is not a number, ``dtype`` is not a floating dtype, or
            ``generator`` is not a ``torch.Generator``.
        ValueError: a size is < 1 or too large for memory, an unknown ``device``, or ``noise`` negative, not finite
            or too large for ``dtype``.
    """
    check_positive_int("batch_size", batch_size)
    check_positive_int("seq_len", seq_len)
    check_positive_int("d_k", d_k)
    d_v = d_k if d_v is None else check_positive_int("d_v", d_v)
    check_positive_int("switch_every", switch_every)
    check_positive_int("num_heads", num_heads)
    noise = check_positive_float("noise", noise, allow_zero=True)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype: expected a floating torch.dtype such as torch.float32, got {dtype!r}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator: expected a torch.Generator or None, got {type(generator).__name__}")

    check_scalar_fits("noise", noise, dtype)
    B, H, steps = batch_size, num_heads, seq_len + 1  # one extra pair: the last query and target
    num_regimes = seq_len // switch_every + 1  # the regime of the last drawn pair, seq_len // switch_every, plus one
    sizes = {"batch_size": B, "seq_len": steps, "num_heads": H, "d_k": d_k, "d_v": d_v}
    largest = max(sizes, key=sizes.get)  # the size to blame when the stream cannot fit
    check_allocation(largest, (B, steps, H, max(d_k, d_v)), dtype=torch.float64, what="the keys and values")
    check_allocation(largest, (B, num_regimes, H, d_k, d_v), dtype=torch.float64, what="the maps")
    keys = torch.randn(B, steps, H, d_k, generator=generator, dtype=torch.float64)
    keys = keys / keys.norm(dim=-1, keepdim=True)  # unit keys: a Gaussian vector's direction is uniform
    maps = torch.randn(B, num_regimes, H, d_k, d_v, generator=generator, dtype=torch.float64)
    regime_of_pair = torch.arange(steps) // switch_every
    values = torch.einsum("bshd,bshde->bshe", keys, maps[:, regime_of_pair])  # v = W^T k
    values = values + noise * torch.randn(B, steps, H, d_v, generator=generator, dtype=torch.float64)

    def out(x: torch.Tensor) -> torch.Tensor:
        return x.to(device=device, dtype=dtype)

    return SwitchingStream(
        q=out(keys[:, 1:]),
        k=out(keys[:, :-1]),
        v=out(values[:, :-1]),
        target=out(values[:, 1:]),
        regime=regime_of_pair[1:].to(device),
        switch_steps=(torch.arange(1, num_regimes) * switch_every - 1).to(device),
        maps=out(maps),
    )

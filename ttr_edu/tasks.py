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

Generators are seeded by a ``torch.Generator`` (drawn on the CPU, then moved to ``device``), so a batch is the
same on every device for a given seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ttr_edu._validation import check_positive_int

__all__ = ["RetrievalBatch", "capacity_batch", "overwrite_batch"]


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
            self.keys.to(device), self.values.to(device), self.query.to(device), self.target.to(device),
            self.num_keys, self.num_values,
        )


def _check_common(batch_size, num_keys, num_values, generator) -> int:
    check_positive_int("batch_size", batch_size)
    check_positive_int("num_keys", num_keys)
    num_values = num_keys if num_values is None else check_positive_int("num_values", num_values)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator: expected a torch.Generator or None, got {type(generator).__name__}")
    return num_values


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
        ValueError: a size is < 1, ``seq_len > num_keys`` (more unique keys than the vocabulary holds) or
            ``seq_len > num_values``.
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
    # Random permutations, one per row: argsort of uniform noise.
    keys = torch.rand(batch_size, num_keys, generator=generator).argsort(dim=1)[:, :seq_len]
    values = torch.rand(batch_size, num_values, generator=generator).argsort(dim=1)[:, :seq_len]
    position = torch.randint(seq_len, (batch_size,), generator=generator)
    rows = torch.arange(batch_size)
    batch = RetrievalBatch(keys, values, keys[rows, position], values[rows, position], num_keys, num_values)
    return batch.to(device)


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
        ValueError: a size is < 1.
    """
    num_values = _check_common(batch_size, num_keys, num_values, generator)
    seq_len = 2 * num_keys if seq_len is None else check_positive_int("seq_len", seq_len)
    keys = torch.randint(num_keys, (batch_size, seq_len), generator=generator)
    values = torch.randint(num_values, (batch_size, seq_len), generator=generator)
    # Query a key that occurs: the key at a random position; its answer is its last occurrence's value.
    rows = torch.arange(batch_size)
    query = keys[rows, torch.randint(seq_len, (batch_size,), generator=generator)]
    positions = torch.arange(seq_len).expand(batch_size, seq_len)
    last = torch.where(keys == query[:, None], positions, -1).amax(dim=1)
    batch = RetrievalBatch(keys, values, query, values[rows, last], num_keys, num_values)
    return batch.to(device)

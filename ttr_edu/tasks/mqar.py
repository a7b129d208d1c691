"""Multi-query associative recall (MQAR), the synthetic task of Zoology (Arora et al. 2023, §3).

An example shows ``num_pairs`` key-value pairs, then asks for every key again, later, among filler tokens::

    k1 v1 k2 v2 … kN vN  ·  · k2 ·  ·  · k1 ·  · …        inputs
    -100 … (context) …      ·  · v2 ·  ·  · v1 ·  · …     labels (−100 everywhere else)

* keys are drawn from ``[1, V/2)`` and values from ``[V/2, V)``, distinct within an example, so a key token is never
  a value token and the model must *retrieve* rather than guess from the token itself;
* each query repeats one key at an even offset after the context, the offsets drawn without replacement with the
  power law ``p(i) ∝ a · i^(a−1)`` (``a = 0.01``, close to ``1/i``): most queries come soon after the context,
  some far away;
* the label of a query position is its key's value (next-token prediction), ``−100`` (ignored by
  ``torch.nn.functional.cross_entropy``) everywhere else; accuracy is ``argmax == label`` over labelled positions;
* the other positions hold filler tokens, drawn uniformly from the vocabulary (Zoology's ``random_non_queries``).

The sequence must leave room. After the context there are ``(T − 2N) / 2`` query slots (:func:`query_slots`), the
even offsets of the tail, for ``N`` queries. At ``T = 4N`` every slot is asked: the queries are then a random
permutation of the keys and no gap is drawn; only the odd positions of the tail still hold filler (half the tail).
Zoology's figure 2 trains and tests at ``T = 16 N`` (64 tokens for 4 pairs, 256 for 16), while its example
configurations (``original_mqar_configs.py``) also test at ``T = 4N``. :func:`mqar_batch` accepts any ``T >= 4N``
(Zoology too); the course's grids keep :func:`free_slot_fraction` at one half or more (``T >= 6 N``), so that every
cell keeps its power-law gaps.

**Filler copies of a key.** Filler is uniform over the whole vocabulary (Zoology's ``random_non_queries``), so it
sometimes repeats one of the example's own keys, unlabelled, and a memory then stores a second value under that key.
The rate falls with ``V``: at ``T = 64, N = 8`` about 4 % of the sequences hold such a copy with ``V = 8192`` and
over 90 % with ``V = 128`` (:func:`filler_key_copies` measures it).

This is our own generator written from that description (paper_facts.md). Batches are drawn on the CPU from a
``torch.Generator``, so a seed gives the same batch everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ttr_edu._internal.validation import (
    check_allocation,
    check_bool,
    check_finite,
    check_generator,
    check_positive_float,
    check_positive_int,
)

__all__ = [
    "MQARBatch",
    "mqar_batch",
    "mqar_layout",
    "mqar_accuracy",
    "query_slots",
    "free_slot_fraction",
    "filler_key_copies",
    "IGNORE_INDEX",
]

IGNORE_INDEX = -100  # the label of every position that is not a query (cross_entropy's default ignore_index)


@dataclass(frozen=True)
class MQARBatch:
    """One batch of MQAR examples.

    Attributes:
        inputs: ``(B, T)`` int64 tokens in ``[0, vocab_size)``.
        labels: ``(B, T)`` int64: the value asked for at each query position, ``-100`` elsewhere.
        num_pairs: key-value pairs per example (``N``); each example has exactly ``N`` labelled positions.
        vocab_size: the vocabulary size ``V``.
    """

    inputs: torch.Tensor
    labels: torch.Tensor
    num_pairs: int
    vocab_size: int

    def to(self, device: torch.device | str) -> MQARBatch:
        """The same batch on ``device``."""
        return MQARBatch(self.inputs.to(device), self.labels.to(device), self.num_pairs, self.vocab_size)


def query_slots(seq_len: int, num_pairs: int) -> int:
    """The query slots after the context of ``num_pairs`` pairs: ``(seq_len − 2 · num_pairs) // 2``.

    Raises:
        TypeError / ValueError: a size that is not a positive int, or a sequence too short for the context
            (``seq_len < 2 · num_pairs``).
    """
    check_positive_int("seq_len", seq_len)
    check_positive_int("num_pairs", num_pairs)
    if seq_len < 2 * num_pairs:
        raise ValueError(
            f"seq_len: the context of {num_pairs} pairs alone needs 2 * num_pairs = {2 * num_pairs} tokens, got "
            f"{seq_len} (and MQAR needs seq_len >= 4 * num_pairs = {4 * num_pairs})"
        )
    return (seq_len - 2 * num_pairs) // 2


def free_slot_fraction(seq_len: int, num_pairs: int) -> float:
    """The fraction of query slots that hold filler, not a query: 0 when every slot is asked (``T = 4N``).

    Raises:
        ValueError: fewer slots than pairs (``seq_len < 4 · num_pairs``).
    """
    slots = query_slots(seq_len, num_pairs)
    if slots < num_pairs:
        raise ValueError(f"seq_len: {num_pairs} pairs need seq_len >= 4 * num_pairs = {4 * num_pairs}, got {seq_len}")
    return 1 - num_pairs / slots


def filler_key_copies(batch: MQARBatch) -> dict[str, float]:
    """How often the filler repeats one of the example's own keys (an unlabelled copy of a key).

    Args:
        batch: an :class:`MQARBatch`.

    Returns:
        ``{"sequences": ..., "queries": ...}``: the fraction of examples whose tail holds a key of their context
        outside its query positions, and the fraction of queries whose key appears in the filler *before* the query
        (the copies that can overwrite or blur the stored pair before it is asked).
    """
    if not isinstance(batch, MQARBatch):
        raise TypeError(f"batch: expected an MQARBatch, got {type(batch).__name__}")
    inputs, labels = batch.inputs, batch.labels
    context = 2 * batch.num_pairs
    keys = inputs[:, 0:context:2]  # (B, N)
    tail, asked = inputs[:, context:], labels[:, context:] != IGNORE_INDEX
    is_key = (tail[:, :, None] == keys[:, None, :]) & ~asked[:, :, None]  # (B, T - 2N, N): a filler copy of key j
    sequences = is_key.any(-1).any(-1).double().mean().item()
    position = torch.arange(tail.shape[1])
    query_at = torch.where(
        asked[:, :, None] & (tail[:, :, None] == keys[:, None, :]), position[None, :, None], tail.shape[1]
    ).amin(1)  # (B, N): where key j is asked
    before = (is_key & (position[None, :, None] < query_at[:, None, :])).any(1)  # (B, N)
    return {"sequences": sequences, "queries": before.double().mean().item()}


def mqar_batch(
    batch_size: int,
    seq_len: int,
    num_pairs: int,
    vocab_size: int,
    *,
    power_a: float = 0.01,
    random_non_queries: bool = True,
    generator: torch.Generator | None = None,
) -> MQARBatch:
    """Draw a batch of MQAR examples (Arora et al. 2023, §3 and App. E).

    Args:
        batch_size: examples ``B``.
        seq_len: tokens per example ``T``; at least ``4 · num_pairs`` (the context and one query slot per key).
        num_pairs: key-value pairs ``N`` per example, at most ``vocab_size // 2 − 1`` (the number of key tokens).
        vocab_size: ``V``; keys come from ``[1, V/2)``, values from ``[V/2, V)``, token 0 marks nothing special.
        power_a: the exponent ``a`` of the gap law ``p(i) ∝ a · i^(a−1)``, in ``(0, 1]`` (1 is uniform).
        random_non_queries: fill the positions after the context that are not queries with uniform random tokens
            (Zoology's default); otherwise with token 0.
        generator: a CPU ``torch.Generator`` for reproducible draws (``None``: the global RNG).

    Returns:
        An :class:`MQARBatch` with ``inputs`` and ``labels`` of shape ``(B, T)``.

    Raises:
        TypeError / ValueError: a size that is not a positive int, a vocabulary too small for ``num_pairs``
            distinct keys, a sequence too short for the context and its queries, ``power_a`` outside (0, 1], a flag
            that is not a bool, a ``generator`` that is not a ``torch.Generator``, or a batch too large for memory
            (named by the size that makes it so).
    """
    check_positive_int("batch_size", batch_size)
    check_positive_int("seq_len", seq_len)
    check_positive_int("num_pairs", num_pairs)
    check_positive_int("vocab_size", vocab_size)
    check_positive_float("power_a", power_a)
    if power_a > 1:
        raise ValueError(f"power_a: expected an exponent in (0, 1], got {power_a}")
    check_bool("random_non_queries", random_non_queries)
    check_generator("generator", generator)
    half = vocab_size // 2
    if num_pairs > half - 1:
        raise ValueError(
            f"num_pairs: {num_pairs} distinct keys need vocab_size >= 2 * (num_pairs + 1) = {2 * (num_pairs + 1)}, "
            f"got vocab_size={vocab_size} (keys come from [1, V/2))"
        )
    context = 2 * num_pairs
    slots = query_slots(seq_len, num_pairs)  # query slots at even offsets after the context
    if slots < num_pairs:
        raise ValueError(
            f"seq_len: {num_pairs} pairs need seq_len >= 4 * num_pairs = {4 * num_pairs} (the context and one query "
            f"slot per key), got {seq_len}"
        )
    # the largest tensors drawn: (B, V/2) uniform draws for the keys and values, (B, T) tokens and slot weights
    check_allocation(
        "batch_size" if batch_size > half else "vocab_size", (batch_size, half), what="the key and value draws"
    )
    check_allocation(
        "batch_size" if batch_size > seq_len else "seq_len", (batch_size, seq_len), dtype=torch.float64, what="a batch"
    )

    def distinct(low: int, high: int) -> torch.Tensor:  # num_pairs distinct tokens from [low, high) per example
        # the indices of the num_pairs smallest of (high - low) uniform draws: a uniformly random ordered subset
        # (argsort(-1)[:, :num_pairs] gives the same tensor; topk skips sorting the rest, 20x faster at V = 8192)
        draws = torch.rand(batch_size, high - low, generator=generator)
        return draws.topk(num_pairs, dim=-1, largest=False, sorted=True).indices + low

    keys, values = distinct(1, half), distinct(half, vocab_size)  # (B, N) each
    offsets = torch.arange(1, slots + 1, dtype=torch.float64)
    law = power_a * offsets ** (power_a - 1)  # p(i) ∝ a i^(a−1), normalised by multinomial
    slot = torch.multinomial(law.expand(batch_size, slots), num_pairs, replacement=False, generator=generator)
    filler = (
        torch.randint(vocab_size, (batch_size, seq_len - context), generator=generator) if random_non_queries else None
    )
    inputs, labels = mqar_layout(keys, values, slot, seq_len, filler)
    return MQARBatch(inputs, labels, num_pairs, vocab_size)


def mqar_layout(
    keys: torch.Tensor, values: torch.Tensor, slots: torch.Tensor, seq_len: int, filler: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Place drawn pairs, query slots and filler into MQAR inputs and labels (Arora et al. 2023, App. E).

    The context is ``k_1 v_1 k_2 v_2 … k_N v_N`` (positions ``0 … 2N − 1``). Key ``j`` is asked again at position
    ``2N + 2 · slots[:, j]`` (an even offset after the context), and the label *at that same position* is its value
    (next-token prediction: the model reads the key and must emit the value). Every other label is ``-100``; every
    other position after the context holds ``filler`` (or 0).

    Args:
        keys, values: ``(B, N)`` int64 tokens.
        slots: ``(B, N)`` int64 distinct query slots in ``[0, (seq_len − 2N) // 2)``; slot ``s`` is tail position
            ``2s``.
        seq_len: ``T``.
        filler: ``(B, T − 2N)`` int64 tokens for the positions after the context that are not queries, or ``None``.

    Returns:
        ``(inputs, labels)``, each ``(B, T)`` int64.

    Raises:
        TypeError: a tensor that is not int64, or a ``seq_len`` that is not an int. ValueError: shapes or devices that
            disagree (named), a negative token, a slot out of range or repeated, a meta tensor (it has no values to
            place), or a sequence too short for the context.
    """
    for name, x in (("keys", keys), ("values", values), ("slots", slots)):
        if not isinstance(x, torch.Tensor) or x.dtype != torch.long:
            raise TypeError(f"{name}: expected an int64 tensor (B, N), got {getattr(x, 'dtype', type(x).__name__)}")
        if x.dim() != 2:
            raise ValueError(f"{name}: expected 2 dims (B, N), got shape {tuple(x.shape)}")
        if x.device.type == "meta":
            raise ValueError(f"{name}: a meta tensor carries no values, and mqar_layout places them; pass real tokens")
    B, N = keys.shape
    for name, x in (("values", values), ("slots", slots)):
        if x.shape != (B, N):
            raise ValueError(f"{name}: expected shape (B, N) = {(B, N)} (set by keys), got {tuple(x.shape)}")
        if x.device != keys.device:
            raise ValueError(f"{name}: expected the device of keys ({keys.device}), got {x.device}")
    for name, x in (("keys", keys), ("values", values)):
        if x.numel() and x.min() < 0:
            raise ValueError(f"{name}: expected tokens >= 0, got {x.min().item()}")
    check_positive_int("seq_len", seq_len)
    context = 2 * N
    tail_len = seq_len - context
    if tail_len < 0:
        raise ValueError(f"seq_len: the context of N = {N} pairs needs 2 N = {context} tokens, got seq_len={seq_len}")
    check_allocation("seq_len", (B, seq_len), dtype=torch.long, what="the inputs")
    if N and (slots.min() < 0 or slots.max() >= query_slots(seq_len, N)):
        raise ValueError(
            f"slots: expected values in [0, (seq_len - 2 N) // 2) = [0, {query_slots(seq_len, N)}) for "
            f"T={seq_len}, N={N}, got values from {slots.min().item()} to {slots.max().item()}"
        )
    if N > 1:
        repeated = (slots.sort(dim=-1).values.diff(dim=-1) == 0).any(dim=-1)  # (B,)
        if repeated.any():
            b = int(repeated.nonzero()[0, 0])
            raise ValueError(
                f"slots: expected N = {N} distinct slots per example (one query per key); example {b} repeats a slot "
                f"in {slots[b].tolist()}"
            )
    if filler is not None:
        if not isinstance(filler, torch.Tensor) or filler.dtype != torch.long:
            raise TypeError(
                f"filler: expected an int64 tensor (B, T - 2N) or None, got {getattr(filler, 'dtype', type(filler))}"
            )
        if filler.shape != (B, tail_len):
            fits = f"; it fits seq_len={filler.shape[1] + context}" if filler.dim() == 2 else ""
            raise ValueError(
                f"filler: expected shape (B, T - 2N) = {(B, tail_len)} for seq_len={seq_len} and N={N}, got "
                f"{tuple(filler.shape)}{fits}: filler and seq_len disagree"
            )
        if filler.device != keys.device:
            raise ValueError(f"filler: expected the device of keys ({keys.device}), got {filler.device}")
    pairs = torch.stack([keys, values], dim=-1).reshape(B, context)  # k1 v1 k2 v2 …
    tail = torch.zeros(B, tail_len, dtype=torch.long, device=keys.device) if filler is None else filler.clone()
    tail_labels = torch.full((B, tail_len), IGNORE_INDEX, dtype=torch.long, device=keys.device)
    tail.scatter_(1, 2 * slots, keys)  # the key asked for, at its query position ...
    tail_labels.scatter_(1, 2 * slots, values)  # ... and the value to predict there
    inputs = torch.cat([pairs, tail], dim=1)
    labels = torch.cat([torch.full((B, context), IGNORE_INDEX, dtype=torch.long, device=keys.device), tail_labels], 1)
    return inputs, labels


def mqar_accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """The fraction of labelled positions where ``argmax(logits) == label`` (Zoology's metric).

    Args:
        logits: ``(B, T, V)`` floating scores, or ``(M, V)`` scores already gathered at the labelled positions.
        labels: ``(B, T)`` int64 with ``-100`` where nothing is asked (or ``(M,)`` matching gathered logits).
    Returns:
        A float in ``[0, 1]``.
    Raises:
        TypeError: integer logits or non-integer labels. ValueError: shapes or devices that disagree, no labelled
            position, a label outside ``[0, V)`` other than ``-100``, NaN or inf logits (:class:`NonFiniteError`,
            also a ``FloatingPointError``: an argmax over NaN means nothing), or a meta tensor (no values to score).
    """
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        raise TypeError(f"logits: expected a floating-point tensor, got {getattr(logits, 'dtype', type(logits))}")
    if (
        not isinstance(labels, torch.Tensor)
        or labels.is_floating_point()
        or labels.is_complex()
        or labels.dtype == torch.bool
    ):
        raise TypeError(f"labels: expected an int64 tensor, got {getattr(labels, 'dtype', type(labels))}")
    if logits.shape[:-1] != labels.shape:
        raise ValueError(
            f"labels: expected shape {tuple(logits.shape[:-1])} (the leading dims of logits (..., V)), "
            f"got {tuple(labels.shape)}"
        )
    for name, x in (("logits", logits), ("labels", labels)):
        if x.device.type == "meta":
            raise ValueError(f"{name}: a meta tensor carries no values, and mqar_accuracy scores them")
    if labels.device != logits.device:
        raise ValueError(f"labels: expected the device of logits ({logits.device}), got {labels.device}")
    check_finite("logits", logits)
    asked = labels != IGNORE_INDEX
    if not asked.any():
        raise ValueError("labels: no labelled position (every label is -100)")
    vocab = logits.shape[-1]
    bad = asked & ((labels < 0) | (labels >= vocab))
    if bad.any():
        raise ValueError(
            f"labels: expected a token in [0, V) = [0, {vocab}) or -100 (ignored) at each position, got "
            f"{labels[bad][0].item()}"
        )
    return (logits.argmax(-1)[asked] == labels[asked]).double().mean().item()

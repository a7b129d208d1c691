"""Checks for chapter 09, associative recall. The references are :func:`ttr_edu.tasks.mqar.mqar_accuracy` and
:func:`ttr_edu.tasks.mqar.mqar_layout`.

``mqar_accuracy``: the cases are real MQAR label layouts from :func:`ttr_edu.tasks.mqar.mqar_batch` (labels ``-100``
except at the queries) with random logits in which a known fraction of the queries is answered right, so accuracies
lie strictly between chance and 1 and an answer that also counts the ``-100`` positions, or reads the logits one step
off, gives another number. The exercise asks for a Python float, and the check requires one.

``mqar_layout``: random keys, values, query slots and filler, with more slots than queries (so a query placed at
the wrong offset lands on filler, not on another query) and slots beyond the first (so ``2 · slot`` and ``slot``
differ).

``wire_recall_circuit``: the student sets, by hand and without training, the weights of a fresh one-layer linear
attention model (:class:`ttr_edu.models.mqar.MQARModel`, ``d_model = V``, ``φ = identity``). The check builds such
models at several vocabularies (seeded, so their untouched weights differ from case to case), lets the function wire
each in place, and scores it on MQAR batches whose filler is token 0 (Zoology's ``random_non_queries=False``): the
circuit must recall every query, at several numbers of pairs and sequence lengths.

Each exercise is declared once (:func:`ttr_edu.checks._rules.exercise`); the package's own functions are refused as
answers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from ttr_edu.checks._core import CheckFailed, describe
from ttr_edu.checks._rules import Rules, exercise
from ttr_edu.models.mqar import MQARModel
from ttr_edu.tasks.mqar import IGNORE_INDEX, mqar_accuracy, mqar_batch, mqar_layout, query_slots

__all__ = ["check_mqar_accuracy", "check_mqar_layout", "check_wire_recall_circuit"]

# (B, T, N pairs, V, fraction of the queries whose logits favour the right value, dtype)
CASES = [
    (1, 16, 2, 8, 1.0, torch.float64),
    (3, 32, 4, 32, 0.5, torch.float64),
    (4, 64, 8, 64, 0.3, torch.float32),
    (8, 48, 6, 40, 0.7, torch.float64),
]


def _accuracy_cases() -> Iterator[dict]:
    for i, (B, T, n, V, right, dtype) in enumerate(CASES):
        gen = torch.Generator().manual_seed(800 + i)
        labels = mqar_batch(B, T, n, V, generator=gen).labels
        logits = torch.randn(B, T, V, generator=gen, dtype=torch.float64)
        asked = (labels != IGNORE_INDEX).nonzero()  # (M, 2): the query positions
        favoured = asked[torch.rand(len(asked), generator=gen) < right]
        logits[favoured[:, 0], favoured[:, 1], labels[favoured[:, 0], favoured[:, 1]]] += 10.0
        yield {"logits": logits.to(dtype), "labels": labels}


def _as_a_float(mqar_accuracy: Callable, case: dict) -> float:
    """Call the answer on ``case``; refuse anything but a Python float (a 0-d tensor or an int is not what the text
    asks)."""
    got = mqar_accuracy(**case)
    if isinstance(got, bool) or not isinstance(got, float):
        inputs = ", ".join(f"{k}={describe(v)}" for k, v in case.items())
        raise CheckFailed(
            f"mqar_accuracy: expected a Python float, got {describe(got)} ({type(got).__name__}); "
            f"a tensor becomes a float with .item()\n  inputs: {inputs}"
        )
    return got


@exercise(reference=mqar_accuracy, cases=_accuracy_cases, rules=Rules(inputs_unchanged=True), call=_as_a_float)
def check_mqar_accuracy(mqar_accuracy: Callable) -> bool:
    """Check ``mqar_accuracy(logits, labels)``: the fraction of labelled positions where the argmax is the label,
    returned as a Python float, ``labels`` left as they were (float64 and float32 logits)."""


# (B, N pairs, T, with filler)
LAYOUT_CASES = [(1, 2, 16, True), (3, 4, 40, True), (2, 5, 64, False), (4, 8, 96, True)]


def _layout_cases() -> Iterator[dict]:
    for i, (B, n, T, with_filler) in enumerate(LAYOUT_CASES):
        gen = torch.Generator().manual_seed(900 + i)
        V = 4 * n + 8
        keys = torch.rand(B, V // 2 - 1, generator=gen).argsort(-1)[:, :n] + 1
        values = torch.rand(B, V // 2, generator=gen).argsort(-1)[:, :n] + V // 2
        # distinct slots, at least one beyond the first half, so that 2·slot and slot land on different positions
        slots = torch.rand(B, query_slots(T, n), generator=gen).argsort(-1)[:, :n]
        filler = torch.randint(V, (B, T - 2 * n), generator=gen) if with_filler else None
        yield {"keys": keys, "values": values, "slots": slots, "seq_len": T, "filler": filler}


@exercise(reference=mqar_layout, cases=_layout_cases, rules=Rules(inputs_unchanged=True), rtol=0, atol=0)
def check_mqar_layout(mqar_layout: Callable) -> bool:
    """Check ``mqar_layout(keys, values, slots, seq_len, filler)`` against :func:`ttr_edu.tasks.mqar.mqar_layout`:
    the ``(inputs, labels)`` pair, exactly, the arguments left as they were."""


# (V = d_model, T, N pairs): several vocabularies, pairs and lengths, so that no setting is special
WIRING_CASES = [(16, 24, 3), (32, 64, 8), (24, 40, 5), (48, 96, 12)]


def _wired_accuracy(wire_recall_circuit: Callable, vocab_size: int, seq_len: int, num_pairs: int, seed: int) -> float:
    """Build a fresh model, let ``wire_recall_circuit`` wire it in place, return its accuracy on zero-filler MQAR
    batches. The model's untouched weights come from ``seed`` (the caller's random state is kept as it was), so they
    differ from case to case: the wiring must set what it needs."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = MQARModel("linear_attention", vocab_size, vocab_size, feature_map="identity")
    returned = wire_recall_circuit(model)
    if isinstance(returned, torch.nn.Module):
        model = returned
    batch = mqar_batch(
        64, seq_len, num_pairs, vocab_size, random_non_queries=False, generator=torch.Generator().manual_seed(seed)
    )
    return model.accuracy(batch)


def _wiring_cases() -> Iterator[dict]:
    for i, (v, t, n) in enumerate(WIRING_CASES):
        yield {"vocab_size": v, "seq_len": t, "num_pairs": n, "seed": 700 + i}


def _fresh_wiring(generator: torch.Generator) -> dict:
    """One of the public sizes with a seed no one has seen (a new untouched model and new batches): the grader's
    extra case."""
    v, t, n = WIRING_CASES[int(torch.randint(len(WIRING_CASES), (), generator=generator))]
    return {
        "vocab_size": v,
        "seq_len": t,
        "num_pairs": n,
        "seed": int(torch.randint(10_000, 2**31, (), generator=generator)),
    }


def _perfect(vocab_size: int, seq_len: int, num_pairs: int, seed: int) -> float:
    """What the wired circuit scores: every query recalled."""
    return 1.0


def _wire_and_score(wire_recall_circuit: Callable, case: dict) -> float:
    return _wired_accuracy(wire_recall_circuit, **case)


@exercise(
    reference=_perfect,
    cases=_wiring_cases,
    fresh=_fresh_wiring,
    call=_wire_and_score,
    rules=Rules(
        no_autograd=True,
        why="set the weights by hand (under torch.no_grad()): the exercise builds the circuit that training has to "
        "find, without training",
    ),
    rtol=0,
    atol=0,
    given=(MQARModel, mqar_batch),  # the model the answer wires, and the batches it is scored on
)
def check_wire_recall_circuit(wire_recall_circuit: Callable) -> bool:
    """Check ``wire_recall_circuit(model)``: a model wired by hand recalls every query of zero-filler MQAR batches
    (accuracy exactly 1.0) at every case of :data:`WIRING_CASES` (the inputs shown are the model's sizes and seed),
    without training (no autograd: a gradient step is refused by what it runs)."""

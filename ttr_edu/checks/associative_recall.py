"""Checks for chapter 08, associative recall. The reference is :func:`ttr_edu.mqar.mqar_accuracy`.

The cases are real MQAR label layouts from :func:`ttr_edu.mqar.mqar_batch` (labels ``-100`` except at the queries)
with random logits in which a known fraction of the queries is answered right, so accuracies lie strictly between
chance and 1 and an answer that also counts the ``-100`` positions, or reads the logits one step off, gives another
number.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from ttr_edu.checks._core import run_check
from ttr_edu.mqar import IGNORE_INDEX, mqar_accuracy, mqar_batch

__all__ = ["check_mqar_accuracy"]

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


def check_mqar_accuracy(student_mqar_accuracy: Callable) -> bool:
    """Check ``mqar_accuracy(logits, labels)``: the fraction of labelled positions where the argmax is the label."""
    return run_check("mqar_accuracy", student_mqar_accuracy, mqar_accuracy, _accuracy_cases(), inputs_unchanged=True)

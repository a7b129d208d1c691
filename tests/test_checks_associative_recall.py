"""Chapter 08's check accepts a correct answer, reports an unattempted stub, and rejects plausible wrong answers."""

import pytest
import torch

from ttr_edu.checks import CheckFailed
from ttr_edu.checks import associative_recall as checks


def stub(logits, labels):
    raise NotImplementedError()


def mqar_accuracy(logits, labels):  # as in the solutions notebook
    asked = labels != -100
    return (logits.argmax(-1)[asked] == labels[asked]).double().mean().item()


def returns_a_tensor(logits, labels):  # a 0-dim tensor is an acceptable number
    asked = labels != -100
    return (logits.argmax(-1) == labels)[asked].float().mean()


def test_a_correct_answer_passes(capsys):
    assert checks.check_mqar_accuracy(mqar_accuracy) is True
    assert checks.check_mqar_accuracy(returns_a_tensor) is True
    assert capsys.readouterr().out.startswith("PASS")


def test_stub_is_not_attempted(capsys):
    assert checks.check_mqar_accuracy(stub) is False
    assert "not attempted yet" in capsys.readouterr().out


def counts_ignored_positions(logits, labels):  # averages over every position, so each -100 counts as a miss
    return (logits.argmax(-1) == labels).double().mean().item()


def shifted_by_one(logits, labels):  # language-model habit: logits at t predict the label at t + 1
    asked = labels[:, 1:] != -100
    return (logits[:, :-1].argmax(-1)[asked] == labels[:, 1:][asked]).double().mean().item()


def counts_instead_of_fraction(logits, labels):
    asked = labels != -100
    return (logits.argmax(-1)[asked] == labels[asked]).sum().item()


def masks_in_place(logits, labels):  # right number, but it overwrites the caller's labels
    labels[labels == -100] = 0
    asked = labels != 0
    return (logits.argmax(-1)[asked] == labels[asked]).double().mean().item()


@pytest.mark.parametrize(
    "wrong",
    [counts_ignored_positions, shifted_by_one, counts_instead_of_fraction, masks_in_place],
)
def test_plausible_wrong_answers_are_rejected(wrong):
    with pytest.raises(CheckFailed):
        checks.check_mqar_accuracy(wrong)


def test_cases_are_neither_trivial_nor_perfect():
    # The wrong answers above are only told apart if the accuracies are strictly between chance and 1.
    accuracies = [checks.mqar_accuracy(**case) for case in checks._accuracy_cases()]
    assert accuracies[0] == 1.0 and all(0.1 < a < 0.95 for a in accuracies[1:])
    assert all(case["labels"].dtype == torch.int64 for case in checks._accuracy_cases())

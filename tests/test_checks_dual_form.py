"""Chapter 05's checks accept the reference and reject plausible wrong answers.

That an unattempted stub is reported is tested for every check at once in test_checks_contract.py.
"""

import pytest
import torch

from ttr_edu import dual_form
from ttr_edu.checks import CheckFailed
from ttr_edu.checks import dual_form as checks



CHECKS = [
    (checks.check_dual_output, dual_form.dual_output),
    (checks.check_momentum_rescale, dual_form.momentum_rescale),
    (checks.check_class_votes, dual_form.class_votes),
]


@pytest.mark.parametrize("check,reference", CHECKS)
def test_reference_passes(check, reference, capsys):
    assert check(reference) is True
    assert capsys.readouterr().out.startswith("PASS")



def _rescale_off_by_one(momentum, num_steps):
    t = torch.arange(1, num_steps + 1, dtype=torch.float64)
    if momentum == 0:
        return torch.ones(num_steps, dtype=torch.float64)
    return (1 - momentum ** (num_steps - t)) / (1 - momentum)


def _rescale_reversed(momentum, num_steps):
    return dual_form.momentum_rescale(momentum, num_steps).flip(0)


def _rescale_geometric_weight(momentum, num_steps):  # only the last step's momentum weight μ^{T−t}
    t = torch.arange(1, num_steps + 1, dtype=torch.float64)
    return momentum ** (num_steps - t)


def _votes_mean(scores, labels, num_classes):
    votes = dual_form.class_votes(scores, labels, num_classes)
    counts = torch.bincount(labels, minlength=num_classes).clamp(min=1)
    return votes / counts


def _votes_count_of_best(scores, labels, num_classes):  # nearest-neighbour count instead of a score sum
    best = labels[scores.argmax(dim=1)]
    return torch.nn.functional.one_hot(best, num_classes).to(scores.dtype)


def _votes_normalised(scores, labels, num_classes):  # a softmax-like share: right argmax, wrong numbers
    votes = dual_form.class_votes(scores, labels, num_classes)
    return votes / votes.sum(dim=1, keepdim=True)


WRONG = [
    ("dual: forgets W0", checks.check_dual_output, lambda W0, keys, values, query: (query @ keys.T) @ values),
    ("dual: absolute scores (the spotlight, not the dual)", checks.check_dual_output,
     lambda W0, keys, values, query: query @ W0.T + (query @ keys.T).abs() @ values),
    ("dual: normalised attention", checks.check_dual_output,
     lambda W0, keys, values, query: query @ W0.T + torch.softmax(query @ keys.T, dim=1) @ values),
    ("rescale: exponent off by one", checks.check_momentum_rescale, _rescale_off_by_one),
    ("rescale: reversed in time", checks.check_momentum_rescale, _rescale_reversed),
    ("rescale: momentum weight only", checks.check_momentum_rescale, _rescale_geometric_weight),
    ("votes: mean instead of sum", checks.check_class_votes, _votes_mean),
    ("votes: count of the best match", checks.check_class_votes, _votes_count_of_best),
    ("votes: normalised to shares", checks.check_class_votes, _votes_normalised),
]


@pytest.mark.parametrize("name,check,wrong", WRONG, ids=[w[0] for w in WRONG])
def test_wrong_answer_is_rejected(name, check, wrong):
    with pytest.raises(CheckFailed):
        check(wrong)


def test_failure_message_shows_the_case():
    expected = r"(?s)dual_output: wrong values.*inputs: W0=tensor\(1, 1\).*first wrong element"
    with pytest.raises(CheckFailed, match=expected):
        checks.check_dual_output(lambda W0, keys, values, query: (query @ keys.T) @ values)


def _votes_without_empty_class(scores, labels, num_classes):  # bincount-style: classes up to the largest label seen
    one_hot = torch.nn.functional.one_hot(labels).to(scores.dtype)
    return scores @ one_hot


MORE_WRONG = [
    ("dual: averaged over the N patterns", checks.check_dual_output,
     lambda W0, keys, values, query: query @ W0.T + (query @ keys.T) @ values / len(keys)),
    ("rescale: float32 instead of float64", checks.check_momentum_rescale,
     lambda momentum, num_steps: dual_form.momentum_rescale(momentum, num_steps).float()),
    ("rescale: 1/(1 - mu) for every step", checks.check_momentum_rescale,
     lambda momentum, num_steps: torch.full((num_steps,), 1 / (1 - momentum), dtype=torch.float64)),
    ("votes: the empty class is dropped", checks.check_class_votes, _votes_without_empty_class),
]


@pytest.mark.parametrize("name,check,wrong", MORE_WRONG, ids=[w[0] for w in MORE_WRONG])
def test_more_plausible_wrong_answers_are_rejected(name, check, wrong):
    with pytest.raises(CheckFailed):
        check(wrong)

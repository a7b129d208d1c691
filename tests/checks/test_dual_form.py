"""Chapter 05's checks accept a right answer, refuse the package's own implementation and reject plausible wrong
answers.

That an unattempted stub is reported is tested for every check at once in test_checks_contract.py.
"""

import pytest
import torch
from torch import nn

from tests.checks.galleries import DTYPE_NAMED, accepted, ids, refused
from ttr_edu import dual_form
from ttr_edu.checks import CheckFailed
from ttr_edu.checks import dual_form as checks

# a right answer uses PyTorch's legacy backward hook, which warns that it is deprecated
pytestmark = pytest.mark.filterwarnings("ignore:Using a non-full backward hook:FutureWarning")


def dual_output(W0, keys, values, query):  # the solutions, written as a student would
    return query @ W0.T + (query @ keys.T) @ values


def momentum_rescale(momentum, num_steps):
    t = torch.arange(1, num_steps + 1, dtype=torch.float64)
    if momentum == 0:
        return torch.ones(num_steps, dtype=torch.float64)
    return (1 - momentum ** (num_steps - t + 1)) / (1 - momentum)


def class_votes(scores, labels, num_classes):
    return scores @ torch.nn.functional.one_hot(labels.long(), num_classes).to(scores.dtype)


CHECKS = [
    (checks.check_dual_output, dual_output, dual_form.dual_output),
    (checks.check_momentum_rescale, momentum_rescale, dual_form.momentum_rescale),
    (checks.check_class_votes, class_votes, dual_form.class_votes),
]


@pytest.mark.parametrize("check,solution,reference", CHECKS)
def test_a_right_answer_passes_and_the_packages_own_is_refused(check, solution, reference, capsys):
    assert check(solution) is True
    assert capsys.readouterr().out.startswith("PASS")
    with pytest.raises(CheckFailed, match=r"calls the package's own implementation"):
        check(reference)


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
    (
        "dual: absolute scores (the spotlight, not the dual)",
        checks.check_dual_output,
        lambda W0, keys, values, query: query @ W0.T + (query @ keys.T).abs() @ values,
    ),
    (
        "dual: normalised attention",
        checks.check_dual_output,
        lambda W0, keys, values, query: query @ W0.T + torch.softmax(query @ keys.T, dim=1) @ values,
    ),
    ("rescale: exponent off by one", checks.check_momentum_rescale, _rescale_off_by_one),
    ("rescale: reversed in time", checks.check_momentum_rescale, _rescale_reversed),
    ("rescale: momentum weight only", checks.check_momentum_rescale, _rescale_geometric_weight),
    ("votes: mean instead of sum", checks.check_class_votes, _votes_mean),
    ("votes: count of the best match", checks.check_class_votes, _votes_count_of_best),
    ("votes: normalised to shares", checks.check_class_votes, _votes_normalised),
    # scores.abs() @ one_hot would pass if every case drew non-negative scores
    (
        "votes: absolute scores",
        checks.check_class_votes,
        lambda scores, labels, num_classes: (
            scores.abs() @ torch.nn.functional.one_hot(labels.long(), num_classes).to(scores.dtype)
        ),
    ),
    (
        "votes: scores clamped at 0",
        checks.check_class_votes,
        lambda scores, labels, num_classes: (
            scores.clamp(min=0) @ torch.nn.functional.one_hot(labels.long(), num_classes).to(scores.dtype)
        ),
    ),
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
    (
        "dual: averaged over the N patterns",
        checks.check_dual_output,
        lambda W0, keys, values, query: query @ W0.T + (query @ keys.T) @ values / len(keys),
    ),
    (
        "rescale: float32 instead of float64",
        checks.check_momentum_rescale,
        lambda momentum, num_steps: dual_form.momentum_rescale(momentum, num_steps).float(),
    ),
    (
        "rescale: 1/(1 - mu) for every step",
        checks.check_momentum_rescale,
        lambda momentum, num_steps: torch.full((num_steps,), 1 / (1 - momentum), dtype=torch.float64),
    ),
    ("votes: the empty class is dropped", checks.check_class_votes, _votes_without_empty_class),
]


@pytest.mark.parametrize("name,check,wrong", MORE_WRONG, ids=[w[0] for w in MORE_WRONG])
def test_more_plausible_wrong_answers_are_rejected(name, check, wrong):
    with pytest.raises(CheckFailed):
        check(wrong)


def test_a_float32_momentum_rescale_is_told_its_dtype():
    def float32_answer(momentum, num_steps):  # the formula right, but t = torch.arange(1, T + 1) without a dtype
        t = torch.arange(1, num_steps + 1)
        return (1 - momentum ** (num_steps - t + 1)) / (1 - momentum) if momentum else torch.ones(num_steps)

    with pytest.raises(
        CheckFailed,
        match=r"wrong dtype: your result is float32, the exercise works in float64; the values agree",
    ):
        checks.check_momentum_rescale(float32_answer)


# --- the hook-based recorder -----------------------------------------------------------------------------------


def record_training(model, layer_name, optimizer, batches):  # the solution, written as a student would
    layer = model.get_submodule(layer_name)
    W0 = layer.weight.detach().clone()
    keys, grads, lrs = [], [], []
    handles = [
        layer.register_forward_hook(lambda module, inputs, output: keys.append(inputs[0].detach().clone())),
        layer.register_full_backward_hook(lambda module, grad_in, grad_out: grads.append(grad_out[0].detach().clone())),
    ]
    try:
        for x, y in batches:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            lrs.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
    finally:
        for handle in handles:
            handle.remove()
    values = torch.cat([-lr * g for lr, g in zip(lrs, grads)])
    return W0, torch.cat(keys), values


def test_record_training_solution_passes_and_the_packages_recorder_is_refused(capsys):
    assert checks.check_record_training(record_training) is True
    assert capsys.readouterr().out.count("PASS") == 1
    with pytest.raises(CheckFailed, match=r"calls the package's own implementation"):
        checks.check_record_training(checks.reference_record_training)  # it records with DualFormRecorder


def _values_without_lr(model, layer_name, optimizer, batches):
    W0, keys, values = record_training(model, layer_name, optimizer, batches)
    return W0, keys, values / -optimizer.param_groups[0]["lr"]  # the raw gradients ∂L/∂y


def _values_sign_flipped(model, layer_name, optimizer, batches):
    W0, keys, values = record_training(model, layer_name, optimizer, batches)
    return W0, keys, -values


def _W0_after_training(model, layer_name, optimizer, batches):
    _, keys, values = record_training(model, layer_name, optimizer, batches)
    return model.get_submodule(layer_name).weight.detach().clone(), keys, values


def _keys_are_model_inputs(model, layer_name, optimizer, batches):  # the network's input, not the layer's
    W0, _, values = record_training(model, layer_name, optimizer, batches)
    return W0, torch.cat([x for x, _ in batches]), values


def _hooks_left_attached(model, layer_name, optimizer, batches):
    layer = model.get_submodule(layer_name)
    keys = []
    layer.register_forward_hook(lambda module, inputs, output: keys.append(inputs[0].detach().clone()))
    W0, _, values = record_training(model, layer_name, optimizer, batches)
    return W0, torch.cat(keys), values


def _gradient_summed_over_the_batch(model, layer_name, optimizer, batches):  # one value per step, not per pattern
    W0, keys, values = record_training(model, layer_name, optimizer, batches)
    n = len(batches[0][0])
    return W0, keys, values.view(-1, n, values.shape[-1]).sum(1).repeat_interleave(n, 0) / n


WRONG_RECORDERS = [
    _values_without_lr,
    _values_sign_flipped,
    _W0_after_training,
    _keys_are_model_inputs,
    _hooks_left_attached,
    _gradient_summed_over_the_batch,
]


@pytest.mark.parametrize("wrong", WRONG_RECORDERS, ids=[w.__name__ for w in WRONG_RECORDERS])
def test_wrong_recorders_are_rejected(wrong):
    with pytest.raises(CheckFailed):
        checks.check_record_training(wrong)


def _W0_detached_not_cloned(model, layer_name, optimizer, batches):  # a view of the weight: training changes it
    W0 = model.get_submodule(layer_name).weight.detach()
    _, keys, values = record_training(model, layer_name, optimizer, batches)
    return W0, keys, values


@pytest.mark.parametrize("wrong", [_W0_detached_not_cloned, _W0_after_training])
def test_a_W0_taken_after_training_is_named(wrong):
    # "wrong values" alone would not say that W0 is the trained weight, nor why.
    with pytest.raises(CheckFailed, match=r"your W0 equals the weight \*after\* training"):
        checks.check_record_training(wrong)


# -- the galleries: plausible wrong answers, and right answers written differently ------------------------------------


def _recorder(mode=""):
    """The recorder, written as a student would, with one misreading (``mode``)."""

    def record_training(model, layer_name, optimizer, batches):
        layer = model.get_submodule(layer_name)
        W0 = layer.weight.detach().clone()
        keys, grads, lrs = [], [], []
        register = layer.register_backward_hook if mode == "legacy hook" else layer.register_full_backward_hook
        handles = [
            layer.register_forward_hook(lambda module, inputs, output: keys.append(inputs[0].detach().clone())),
            register(lambda module, grad_in, grad_out: grads.append(grad_out[0].detach().clone())),
        ]
        for x, y in batches:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            lrs.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            if mode == "evaluates after each step":
                with torch.no_grad():
                    model(x)
        for handle in handles:
            handle.remove()
        scale = {"divided by the batch": 1 / len(batches[0][0]), "times the batch": len(batches[0][0])}.get(mode, 1)
        values = torch.cat([-lr * g * scale for lr, g in zip(lrs, grads)])
        if mode == "W0 from the state dict":  # a view of the weight, which training changes in place
            W0 = model.state_dict()[layer_name + ".weight"]
        return W0, torch.cat(keys), values

    return record_training


def _recorder_with_a_pre_hook(model, layer_name, optimizer, batches):  # the learning rate read once, at the end
    layer = model.get_submodule(layer_name)
    W0, keys, grads = layer.weight.detach().clone(), [], []
    handles = [
        layer.register_forward_pre_hook(lambda module, inputs: keys.append(inputs[0].detach().clone())),
        layer.register_full_backward_hook(lambda module, grad_in, grad_out: grads.append(grad_out[0].detach().clone())),
    ]
    for x, y in batches:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    for handle in handles:
        handle.remove()
    return W0, torch.cat(keys), -optimizer.param_groups[0]["lr"] * torch.cat(grads)


def _rescale(momentum, num_steps, exponent=lambda T, t: T - t + 1, dtype=torch.float64):
    t = torch.arange(1, num_steps + 1, dtype=dtype)
    return (1 - momentum ** exponent(num_steps, t)) / (1 - momentum)


def _one_hot(labels, num_classes, scores):
    return nn.functional.one_hot(labels.long(), num_classes).to(scores.dtype)


def _dual_by_loop(W0, keys, values, query):  # right values, one pattern at a time: the text asks for no loop
    out = query @ W0.T
    for x_t, e_t in zip(keys, values):
        out = out + (query @ x_t)[:, None] * e_t
    return out


WRONG_ANSWERS = [
    ("5.1 no W₀ term", checks.check_dual_output, lambda W0, keys, values, query: (query @ keys.T) @ values,
     "wrong values"),
    ("5.1 |scores|", checks.check_dual_output,
     lambda W0, keys, values, query: query @ W0.T + (query @ keys.T).abs() @ values, "wrong values"),
    ("5.1 softmax-normalised", checks.check_dual_output,
     lambda W0, keys, values, query: query @ W0.T + torch.softmax(query @ keys.T, -1) @ values, "wrong values"),
    ("5.1 a loop over the patterns", checks.check_dual_output, _dual_by_loop,
     "a Python loop over either runs some for each"),
    ("5.2 values divided by the batch again", checks.check_record_training, _recorder("divided by the batch"),
     r"record_training\[2\]: wrong values"),
    ("5.2 values times the batch", checks.check_record_training, _recorder("times the batch"),
     r"record_training\[2\]: wrong values"),
    ("5.2 an extra no_grad forward per step", checks.check_record_training, _recorder("evaluates after each step"),
     r"record_training\[1\]: wrong shape"),
    ("5.2 W₀ from state_dict(), a view", checks.check_record_training, _recorder("W0 from the state dict"),
     r"your W0 equals the weight \*after\* training"),
    ("5.3 exponent T − t", checks.check_momentum_rescale, lambda momentum, num_steps: _rescale(
        momentum, num_steps, lambda T, t: T - t), "wrong values"),
    ("5.3 exponent t, reversed", checks.check_momentum_rescale, lambda momentum, num_steps: _rescale(
        momentum, num_steps, lambda T, t: t), "wrong values"),
    ("5.3 1/(1 − μ) for every step", checks.check_momentum_rescale,
     lambda momentum, num_steps: torch.full((num_steps,), 1 / (1 - momentum), dtype=torch.float64), "wrong values"),
    ("5.3 an integer arange (float32)", checks.check_momentum_rescale, lambda momentum, num_steps: _rescale(
        momentum, num_steps, dtype=None), "wrong dtype: your result is float32, the exercise works in float64"),
    ("5.3 μ^(T − t), one term", checks.check_momentum_rescale,
     lambda momentum, num_steps: momentum ** (num_steps - torch.arange(1, num_steps + 1, dtype=torch.float64)),
     "wrong values"),
    ("5.4 mean per class", checks.check_class_votes, lambda scores, labels, num_classes: scores @ _one_hot(
        labels, num_classes, scores) / _one_hot(labels, num_classes, scores).sum(0).clamp(min=1), "wrong values"),
    ("5.4 one_hot without num_classes", checks.check_class_votes, _votes_without_empty_class, "wrong shape"),
    ("5.4 |scores|", checks.check_class_votes,
     lambda scores, labels, num_classes: scores.abs() @ _one_hot(labels, num_classes, scores), "wrong values"),
    ("5.4 count of positive scores", checks.check_class_votes, lambda scores, labels, num_classes: (
        scores > 0).to(scores.dtype) @ _one_hot(labels, num_classes, scores), "wrong values"),
]  # fmt: skip


@pytest.mark.parametrize("label,check,answer,reason", WRONG_ANSWERS, ids=ids(WRONG_ANSWERS))
def test_a_plausible_wrong_answer_is_refused_for_its_reason(label, check, answer, reason, capsys):
    refused(check, answer, reason, capsys)


def _votes_by_index_add(scores, labels, num_classes):
    return scores.new_zeros(scores.shape[0], num_classes).index_add_(1, labels.long(), scores)


RIGHT_VARIANTS = [
    ("5.1 (W₀ qᵀ)ᵀ", checks.check_dual_output,
     lambda W0, keys, values, query: (W0 @ query.T).T + (query @ keys.T) @ values, None),
    ("5.1 one einsum per term", checks.check_dual_output, lambda W0, keys, values, query: torch.einsum(
        "o i, q i -> q o", W0, query) + torch.einsum("q i, n i, n o -> q o", query, keys, values), None),
    ("5.1 in float32", checks.check_dual_output,
     lambda W0, keys, values, query: (query @ W0.T + (query @ keys.T) @ values).float(), DTYPE_NAMED),
    ("5.2 the legacy register_backward_hook", checks.check_record_training, _recorder("legacy hook"), None),
    ("5.2 a pre-hook, the rate read once", checks.check_record_training, _recorder_with_a_pre_hook, None),
    ("5.3 no special case for μ = 0", checks.check_momentum_rescale, _rescale, None),
    ("5.3 a geometric sum by cumsum", checks.check_momentum_rescale, lambda momentum, num_steps: torch.cumsum(
        momentum ** torch.arange(num_steps, dtype=torch.float64), 0).flip(0), None),
    ("5.4 index_add_", checks.check_class_votes, _votes_by_index_add, None),
    ("5.4 a loop over the classes", checks.check_class_votes, lambda scores, labels, num_classes: torch.stack(
        [scores[:, labels == c].sum(1) for c in range(num_classes)], 1), None),
]  # fmt: skip


@pytest.mark.parametrize("label,check,answer,expected", RIGHT_VARIANTS, ids=ids(RIGHT_VARIANTS))
def test_a_right_answer_written_differently_passes(label, check, answer, expected, capsys):
    accepted(check, answer, expected, capsys)

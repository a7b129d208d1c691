"""Chapter 09's checks accept a correct answer, reports an unattempted stub, and rejects plausible wrong answers."""

import pytest
import torch

from tests.checks.gallery import assert_passes
from ttr_edu.checks import CheckFailed
from ttr_edu.checks import associative_recall as checks


def stub(logits, labels):
    raise NotImplementedError()


def mqar_accuracy(logits, labels):  # as in the solutions notebook
    asked = labels != -100
    return (logits.argmax(-1)[asked] == labels[asked]).double().mean().item()


def returns_a_tensor(logits, labels):  # the right number, as a 0-d tensor: the text asks for a Python float
    asked = labels != -100
    return (logits.argmax(-1) == labels)[asked].float().mean()


def test_a_correct_answer_passes(capsys):
    assert checks.check_mqar_accuracy(mqar_accuracy) is True
    assert capsys.readouterr().out.startswith("PASS")


def test_a_tensor_is_not_the_float_the_text_asks_for():
    with pytest.raises(CheckFailed, match="expected a Python float.*item"):
        checks.check_mqar_accuracy(returns_a_tensor)


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


# --- Exercise 9.2, mqar_layout -----------------------------------------------------------------------------------


def mqar_layout(keys, values, slots, seq_len, filler):  # as in the solutions notebook: position by position
    B, N = keys.shape
    inputs = torch.zeros(B, seq_len, dtype=torch.long)
    labels = torch.full((B, seq_len), -100, dtype=torch.long)
    if filler is not None:
        inputs[:, 2 * N :] = filler
    for b in range(B):
        for j in range(N):
            inputs[b, 2 * j], inputs[b, 2 * j + 1] = keys[b, j], values[b, j]
            position = 2 * N + 2 * slots[b, j]
            inputs[b, position], labels[b, position] = keys[b, j], values[b, j]
    return inputs, labels


def layout_stub(keys, values, slots, seq_len, filler):
    raise NotImplementedError()


def test_layout_correct_answer_passes_and_stub_is_not_attempted(capsys):
    assert checks.check_mqar_layout(mqar_layout) is True
    assert capsys.readouterr().out.startswith("PASS")
    assert checks.check_mqar_layout(layout_stub) is False
    assert "not attempted yet" in capsys.readouterr().out


def label_after_the_key(keys, values, slots, seq_len, filler):  # the value written at the next position, as a text
    inputs, labels = mqar_layout(keys, values, slots, seq_len, filler)
    return inputs, labels.roll(1, dims=1)


def _queries_at(keys, values, seq_len, filler, positions):  # a right context; queries at the given positions
    B, N = keys.shape
    inputs = torch.zeros(B, seq_len, dtype=torch.long)
    labels = torch.full((B, seq_len), -100, dtype=torch.long)
    if filler is not None:
        inputs[:, 2 * N :] = filler
    inputs[:, 0 : 2 * N : 2], inputs[:, 1 : 2 * N : 2] = keys, values
    inputs.scatter_(1, positions.clamp(max=seq_len - 1), keys)
    labels.scatter_(1, positions.clamp(max=seq_len - 1), values)
    return inputs, labels


def queries_at_odd_offsets(keys, values, slots, seq_len, filler):  # query (and label) one position late
    return _queries_at(keys, values, seq_len, filler, 2 * keys.shape[1] + 2 * slots + 1)


def slot_as_position(keys, values, slots, seq_len, filler):  # forgets that slot s is tail position 2s
    return _queries_at(keys, values, seq_len, filler, 2 * keys.shape[1] + slots)


def values_first(keys, values, slots, seq_len, filler):  # context v1 k1 v2 k2 ...
    inputs, labels = mqar_layout(keys, values, slots, seq_len, filler)
    N = keys.shape[1]
    inputs[:, 0 : 2 * N : 2], inputs[:, 1 : 2 * N : 2] = values, keys
    return inputs, labels


def labels_on_the_context_too(keys, values, slots, seq_len, filler):  # also asks for each value inside the context
    inputs, labels = mqar_layout(keys, values, slots, seq_len, filler)
    labels[:, 1 : 2 * keys.shape[1] : 2] = values
    return inputs, labels


def filler_over_the_queries(keys, values, slots, seq_len, filler):  # places the queries, then pastes the filler on top
    inputs, labels = mqar_layout(keys, values, slots, seq_len, filler)
    if filler is not None:
        inputs[:, 2 * keys.shape[1] :] = filler
    return inputs, labels


@pytest.mark.parametrize(
    "wrong",
    [
        label_after_the_key,
        queries_at_odd_offsets,
        slot_as_position,
        values_first,
        labels_on_the_context_too,
        filler_over_the_queries,
    ],
)
def test_layout_plausible_wrong_answers_are_rejected(wrong):
    with pytest.raises(CheckFailed):
        checks.check_mqar_layout(wrong)


def test_layout_cases_reach_past_the_first_slots():
    # "slot as position" is only caught if some slot s has 2s != s on a filler position, i.e. slots beyond 0.
    assert all(case["slots"].max() >= case["keys"].shape[1] for case in checks._layout_cases())


# --- Exercise 9.3, wire_recall_circuit ---------------------------------------------------------------------------


def _wire(model, *, q_tap=-1, k_tap=-2, v_tap=-1, gain=10.0, embedding="one-hot", zero_bias=True, o_proj=True):
    """The circuit by hand: one-hot embeddings, q = k = v = x, the convolution shifts k by one token (tap -2 is the
    previous token, -1 the current one), and o_proj lets the recalled value outweigh the residual key."""
    d = model.embed.weight.shape[1]
    with torch.no_grad():
        if embedding == "one-hot":
            model.embed.weight.copy_(torch.eye(d))
        mixer = model.mixer
        mixer.qkv_proj.weight.copy_(torch.cat([torch.eye(d)] * 3))
        weight = mixer.qkv_conv1d.conv.weight  # (3 d, 1, conv_size)
        weight.zero_()
        if zero_bias:
            mixer.qkv_conv1d.conv.bias.zero_()
        if q_tap is not None:
            weight[:d, 0, q_tap] = 1.0
        if k_tap is not None:
            weight[d : 2 * d, 0, k_tap] = 1.0
        if v_tap is not None:
            weight[2 * d :, 0, v_tap] = 1.0
        if o_proj:
            mixer.o_proj.weight.copy_(gain * torch.eye(d))


def wire_recall_circuit(model):  # as in the solutions notebook
    _wire(model)


def wire_stub(model):
    raise NotImplementedError()


def test_wiring_correct_answer_passes_and_stub_is_not_attempted(capsys):
    assert checks.check_wire_recall_circuit(wire_recall_circuit) is True
    assert capsys.readouterr().out.startswith("PASS")
    assert checks.check_wire_recall_circuit(wire_stub) is False
    assert "not attempted yet" in capsys.readouterr().out


def test_the_wired_circuit_scores_exactly_one_and_an_untouched_model_near_zero():
    assert all(checks._wired_accuracy(wire_recall_circuit, v, t, n, 1) == 1.0 for v, t, n in checks.WIRING_CASES)
    assert all(
        checks._wired_accuracy(lambda m: _wire(m, gain=1.0), v, t, n, 1) == 1.0 for v, t, n in checks.WIRING_CASES
    )
    assert all(checks._wired_accuracy(lambda m: None, v, t, n, 1) < 0.2 for v, t, n in checks.WIRING_CASES)


@pytest.mark.parametrize(
    "wrong",
    [
        pytest.param(lambda m: _wire(m, k_tap=-1), id="no shift: k reads the current token"),
        pytest.param(lambda m: _wire(m, q_tap=-2, k_tap=-1), id="q shifted instead of k"),
        pytest.param(lambda m: _wire(m, k_tap=-3), id="k shifted by two tokens"),
        pytest.param(lambda m: _wire(m, v_tap=-2), id="v shifted too"),
        pytest.param(lambda m: _wire(m, gain=0.05), id="the residual key outweighs the recalled value"),
        pytest.param(lambda m: _wire(m, o_proj=False), id="o_proj left at its random weights"),
        pytest.param(lambda m: _wire(m, embedding="trained-free random"), id="random embeddings kept"),
        pytest.param(lambda m: _wire(m, zero_bias=False), id="the convolution's random bias kept"),
    ],
)
def test_wiring_plausible_wrong_answers_are_rejected(wrong):
    with pytest.raises(CheckFailed, match="wire_recall_circuit"):
        checks.check_wire_recall_circuit(wrong)


def wire_by_training(model):  # the text says "without training": a few gradient steps on MQAR batches
    from ttr_edu.tasks.mqar import mqar_batch

    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    vocab_size = model.embed.weight.shape[0]
    for step in range(3):
        batch = mqar_batch(8, 24, 3, vocab_size, generator=torch.Generator().manual_seed(step))
        optimizer.zero_grad()
        model.loss(batch).backward()
        optimizer.step()


def wire_then_tune_by_autograd_grad(model):  # the hand-wired circuit, then one step by torch.autograd.grad
    from ttr_edu.tasks.mqar import mqar_batch

    _wire(model)
    batch = mqar_batch(8, 24, 3, model.embed.weight.shape[0], generator=torch.Generator().manual_seed(0))
    (g,) = torch.autograd.grad(model.loss(batch), [model.mixer.o_proj.weight])
    with torch.no_grad():
        model.mixer.o_proj.weight -= 0.0 * g


@pytest.mark.parametrize(
    "trains,says",
    [
        (wire_by_training, r"got 0\.\d+, expected 1\.0"),  # a wrong answer is shown as wrong first
        (wire_then_tune_by_autograd_grad, r"your function used autograd.*without training"),  # right, but trained
    ],
)
def test_a_wiring_that_trains_is_refused(trains, says):
    with pytest.raises(CheckFailed, match=rf"wire_recall_circuit: {says}"):
        checks.check_wire_recall_circuit(trains)


# --- right answers written differently ---------------------------------------------------------------------------


def accuracy_as_numpy_float(logits, labels):  # a NumPy float64 is a Python float
    asked = (labels != -100).numpy()
    return (logits.argmax(-1).numpy()[asked] == labels.numpy()[asked]).mean()


def accuracy_by_loop(logits, labels):  # position by position, in Python
    right = asked = 0
    for b in range(labels.shape[0]):
        for t in range(labels.shape[1]):
            if labels[b, t] != -100:
                asked += 1
                right += int(logits[b, t].argmax() == labels[b, t])
    return right / asked


def layout_by_scatter(keys, values, slots, seq_len, filler):  # the hint's vectorised route
    B, N = keys.shape
    tail = torch.zeros(B, seq_len - 2 * N, dtype=torch.long) if filler is None else filler.clone()
    tail_labels = torch.full((B, seq_len - 2 * N), -100, dtype=torch.long)
    tail.scatter_(1, 2 * slots, keys)
    tail_labels.scatter_(1, 2 * slots, values)
    context = torch.stack([keys, values], -1).reshape(B, 2 * N)
    context_labels = torch.full((B, 2 * N), -100, dtype=torch.long)
    return torch.cat([context, tail], 1), torch.cat([context_labels, tail_labels], 1)


def wiring_that_returns_a_new_model(model):  # a wired copy, returned: the check scores what is returned
    import copy

    wired = copy.deepcopy(model)
    _wire(wired)
    return wired


@pytest.mark.parametrize(
    "check,answer",
    [
        (checks.check_mqar_accuracy, accuracy_as_numpy_float),
        (checks.check_mqar_accuracy, accuracy_by_loop),
        (checks.check_mqar_layout, layout_by_scatter),
        (checks.check_wire_recall_circuit, wiring_that_returns_a_new_model),
    ],
    ids=lambda x: getattr(x, "__name__", ""),
)
def test_right_answers_written_differently_pass(check, answer):
    assert_passes(check, answer)


def test_the_packages_own_functions_are_not_answers():
    from ttr_edu.tasks import mqar

    with pytest.raises(CheckFailed, match="calls the package's own implementation"):
        checks.check_mqar_accuracy(lambda logits, labels: mqar.mqar_accuracy(logits, labels))
    with pytest.raises(CheckFailed, match="calls the package's own implementation"):
        checks.check_mqar_layout(lambda **case: mqar.mqar_layout(**case))


def test_the_wiring_check_leaves_the_callers_random_state_alone():
    before = torch.get_rng_state()
    checks.check_wire_recall_circuit(wire_recall_circuit)
    assert torch.equal(torch.get_rng_state(), before)


def test_a_wrong_layout_counts_the_wrong_tokens_not_a_relative_error_of_ids():
    with pytest.raises(CheckFailed, match=r"mqar_layout\[0\]: wrong values \(\d+ of \d+ entries differ\)") as failure:
        checks.check_mqar_layout(values_first)
    assert "relative error" not in str(failure.value)

"""The language-modelling checks pass the reference, report the stub and reject plausible mistakes."""

import pytest
import torch
import torch.nn.functional as F

from ttr_edu.checks import CheckFailed
from ttr_edu.checks import language_modelling as checks
from ttr_edu.models.lm import causal_lm_loss
from ttr_edu.tasks.text import random_windows


def greedy_generate(model, prompt, num_tokens):
    state, out = model.init_state(), [prompt]
    for t in range(prompt.shape[1]):
        logits, state = model.step(prompt[:, t], state)
    for _ in range(num_tokens):
        token = logits.argmax(-1)
        out.append(token[:, None])
        logits, state = model.step(token, state)
    return torch.cat(out, dim=1)


def _causal_lm_loss(logits, tokens):  # the solution, written as a student would
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), tokens[:, 1:].flatten())


def test_right_answers_pass_and_the_packages_own_are_refused(capsys):
    assert checks.check_train_lm(_loop_with_a_mistake)  # with no mistake switched on it is the exercise's loop
    assert checks.check_causal_lm_loss(_causal_lm_loss)
    assert checks.check_greedy_generate(greedy_generate)
    assert capsys.readouterr().out.count("PASS") == 3
    for check, own in (
        (checks.check_causal_lm_loss, causal_lm_loss),
        (checks.check_train_lm, checks.train_lm_spec),
    ):
        with pytest.raises(CheckFailed, match=r"calls the package's own implementation"):
            check(own)


def stub(*args, **kwargs):
    raise NotImplementedError()


@pytest.mark.parametrize("check", [checks.check_causal_lm_loss, checks.check_greedy_generate, checks.check_train_lm])
def test_stub_is_not_attempted(check, capsys):
    assert check(stub) is False
    assert "not attempted yet" in capsys.readouterr().out


def loss_without_shift(logits, tokens):
    return F.cross_entropy(logits.flatten(0, 1).float(), tokens.flatten())


def loss_shifted_the_wrong_way(logits, tokens):
    return F.cross_entropy(logits[:, 1:].flatten(0, 1).float(), tokens[:, :-1].flatten())


def loss_summed(logits, tokens):
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), tokens[:, 1:].flatten(), reduction="sum")


def loss_in_bits(logits, tokens):
    return causal_lm_loss(logits, tokens) / torch.log(torch.tensor(2.0))


def generate_with_a_fresh_state_each_token(model, prompt, num_tokens):
    out = prompt
    for _ in range(num_tokens):
        state = model.init_state()  # forgets everything but the token it is fed
        logits, state = model.step(out[:, -1], state)
        out = torch.cat([out, logits.argmax(-1)[:, None]], dim=1)
    return out


def generate_skipping_the_first_prompt_token(model, prompt, num_tokens):
    return torch.cat([prompt[:, :1], greedy_generate(model, prompt[:, 1:], num_tokens)], dim=1)


def generate_with_forward(model, prompt, num_tokens):
    out = prompt
    for _ in range(num_tokens):
        out = torch.cat([out, model(out)[:, -1].argmax(-1)[:, None]], dim=1)
    return out


def _loop_with_a_mistake(
    model,
    tokens,
    steps,
    batch_size,
    seq_len,
    lr,
    seed,
    *,
    zero_grad=True,
    same_batch=False,
    optimizer_class=torch.optim.Adam,
):
    """The exercise's loop (checks.train_lm_spec) with one of three plausible mistakes switched on."""
    optimizer, generator, losses = optimizer_class(model.parameters(), lr=lr), torch.Generator().manual_seed(seed), []
    for _ in range(steps):
        if same_batch:  # a fresh generator every step: the same batch every time
            generator = torch.Generator().manual_seed(seed)
        window = random_windows(tokens, batch_size, seq_len, generator)
        loss = causal_lm_loss(model(window), window)
        if zero_grad:
            optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return torch.tensor(losses, dtype=torch.float64)


def train_without_zero_grad(model, tokens, steps, batch_size, seq_len, lr, seed):
    return _loop_with_a_mistake(model, tokens, steps, batch_size, seq_len, lr, seed, zero_grad=False)


def train_on_one_batch(model, tokens, steps, batch_size, seq_len, lr, seed):
    return _loop_with_a_mistake(model, tokens, steps, batch_size, seq_len, lr, seed, same_batch=True)


def train_with_sgd(model, tokens, steps, batch_size, seq_len, lr, seed):
    return _loop_with_a_mistake(model, tokens, steps, batch_size, seq_len, lr, seed, optimizer_class=torch.optim.SGD)


@pytest.mark.parametrize(
    "check, wrong",
    [
        (checks.check_causal_lm_loss, loss_without_shift),
        (checks.check_causal_lm_loss, loss_shifted_the_wrong_way),
        (checks.check_causal_lm_loss, loss_summed),
        (checks.check_causal_lm_loss, loss_in_bits),
        (checks.check_greedy_generate, generate_with_a_fresh_state_each_token),
        (checks.check_greedy_generate, generate_skipping_the_first_prompt_token),
        (checks.check_greedy_generate, generate_with_forward),
        (checks.check_train_lm, train_without_zero_grad),
        (checks.check_train_lm, train_on_one_batch),
        (checks.check_train_lm, train_with_sgd),
    ],
    ids=lambda f: getattr(f, "__name__", ""),
)
def test_plausible_mistakes_are_rejected(check, wrong):
    with pytest.raises(CheckFailed):
        check(wrong)


def generate_dropping_the_returned_state(model, prompt, num_tokens):
    # right only while step mutates the state it is given; the check's models return a new one
    state, pieces = model.init_state(), [prompt]
    for t in range(prompt.shape[1]):
        logits, _ = model.step(prompt[:, t], state)
    for _ in range(num_tokens):
        token = logits.argmax(-1)
        pieces.append(token[:, None])
        logits, _ = model.step(token, state)
    return torch.cat(pieces, dim=1)


def test_an_answer_that_drops_the_returned_state_is_rejected():
    with pytest.raises(CheckFailed):
        checks.check_greedy_generate(generate_dropping_the_returned_state)


NOTEBOOK = """
import torch
from ttr_edu.tasks.text import random_windows

def causal_lm_loss(logits, tokens):
    raise NotImplementedError()  # Exercise 10.1, still a stub

def train_lm(model, tokens, steps, batch_size, seq_len, lr, seed):
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        window = random_windows(tokens, batch_size, seq_len, generator)
        loss = causal_lm_loss(model(window), window)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return torch.tensor(losses, dtype=torch.float64)
"""


def test_a_finished_loop_calling_the_unsolved_10_1_is_told_so_by_name():
    namespace: dict = {}
    exec(NOTEBOOK, namespace)  # as in a notebook: the loop's globals hold the stub
    with pytest.raises(CheckFailed, match="calls `causal_lm_loss`, which is not written yet"):
        checks.check_train_lm(namespace["train_lm"])

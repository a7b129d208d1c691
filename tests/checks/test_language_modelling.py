"""The language-modelling checks pass the reference, report the stub and reject plausible mistakes."""

import re

import pytest
import torch
import torch.nn.functional as F

from tests.checks.gallery import assert_passes, passes_or_names
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


@pytest.mark.parametrize(
    "check, wrong, names",
    [
        (checks.check_greedy_generate, generate_with_a_fresh_state_each_token, "expected byte"),
        (checks.check_train_lm, train_with_sgd, "the loss of step"),
    ],
    ids=["greedy_generate", "train_lm"],
)
def test_a_failure_message_is_short_and_names_what_differs(check, wrong, names):
    # one line per fact: the model by name (not its module tree), and for bytes no "relative error" of byte ids
    with pytest.raises(CheckFailed) as failure:
        check(wrong)
    message = str(failure.value)
    assert len(message.splitlines()) <= 4 and names in message and "TinyLM('" in message
    if check is checks.check_greedy_generate:
        assert "relative error" not in message


# -- the answers a reader tried on 10, and right answers written differently ---------------------------------------


def loss_roll_wrapped(logits, tokens):  # every position scored, the last against the first byte
    targets = torch.cat([tokens[:, 1:], tokens[:, :1]], 1)
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def loss_label_smoothing(logits, tokens):
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), tokens[:, 1:].flatten(), label_smoothing=0.1)


def loss_sum_over_all_tokens(logits, tokens):  # divided by B·T, not by the B·(T − 1) scored positions
    summed = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), tokens[:, 1:].flatten(), reduction="sum")
    return summed / tokens.numel()


def loss_by_the_package(logits, tokens):
    from ttr_edu.models import lm

    return lm.causal_lm_loss(logits, tokens)


def loss_by_log_softmax(logits, tokens):  # gather the log-probabilities of the next bytes, in float64: right
    log_p = torch.log_softmax(logits[:, :-1].double(), -1)
    return -log_p.gather(-1, tokens[:, 1:, None]).mean()


def generate_before_the_last_prompt_byte(model, prompt, num_tokens):  # the last prompt byte never fed
    state, pieces, logits = model.init_state(), [prompt], None
    for t in range(prompt.shape[1] - 1):
        logits, state = model.step(prompt[:, t], state)
    for _ in range(num_tokens):
        token = logits.argmax(-1)
        pieces.append(token[:, None])
        logits, state = model.step(token, state)
    return torch.cat(pieces, 1)


def generate_row_zeros_choice(model, prompt, num_tokens):  # the batch shares row 0's argmax
    state, pieces = model.init_state(), [prompt]
    for t in range(prompt.shape[1]):
        logits, state = model.step(prompt[:, t], state)
    for _ in range(num_tokens):
        token = logits[0].argmax(-1).expand(prompt.shape[0])
        pieces.append(token[:, None])
        logits, state = model.step(token, state)
    return torch.cat(pieces, 1)


def generate_by_the_package(model, prompt, num_tokens):
    from ttr_edu.models.lm import generate

    return generate(model, prompt, num_tokens, temperature=0)


def generate_into_a_buffer(model, prompt, num_tokens):  # a preallocated output filled in place: right
    B, T = prompt.shape
    out = torch.empty(B, T + num_tokens, dtype=torch.long)
    out[:, :T] = prompt
    state = model.init_state()
    for t in range(T + num_tokens - 1):
        logits, state = model.step(out[:, t], state)
        if t >= T - 1:
            out[:, t + 1] = logits.argmax(-1)
    return out


def generate_float_ids(model, prompt, num_tokens):  # the right bytes, as floats
    return greedy_generate(model, prompt, num_tokens).double()


def _loop(model, tokens, steps, batch_size, seq_len, lr, seed, *, optimizer=None, clip=None, zero_late=False, rng=None):
    optimizer = optimizer(model.parameters()) if optimizer else torch.optim.Adam(model.parameters(), lr=lr)
    if rng == "global":
        torch.manual_seed(seed)
        generator = torch.default_generator
    else:
        generator = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        window = random_windows(tokens, batch_size, seq_len, generator)
        loss = causal_lm_loss(model(window), window)
        if not zero_late:
            optimizer.zero_grad()
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        if zero_late:
            optimizer.zero_grad()
        optimizer.step()
        losses.append(loss.item())
    return torch.tensor(losses, dtype=torch.float64)


def train_adam_default_lr(model, tokens, steps, batch_size, seq_len, lr, seed):
    return _loop(model, tokens, steps, batch_size, seq_len, lr, seed, optimizer=torch.optim.Adam)


def train_with_clipping(model, tokens, steps, batch_size, seq_len, lr, seed):
    return _loop(model, tokens, steps, batch_size, seq_len, lr, seed, clip=1.0)


def train_zero_grad_after_backward(model, tokens, steps, batch_size, seq_len, lr, seed):
    return _loop(model, tokens, steps, batch_size, seq_len, lr, seed, zero_late=True)


def train_with_adamw(model, tokens, steps, batch_size, seq_len, lr, seed):  # weight decay 0.01 by default
    return _loop(model, tokens, steps, batch_size, seq_len, lr, seed, optimizer=lambda p: torch.optim.AdamW(p, lr=lr))


def train_with_the_global_generator(model, tokens, steps, batch_size, seq_len, lr, seed):  # the same stream: right
    return _loop(model, tokens, steps, batch_size, seq_len, lr, seed, rng="global")


def train_with_amsgrad(model, tokens, steps, batch_size, seq_len, lr, seed):  # review r35b: caught only thinly
    amsgrad = lambda p: torch.optim.Adam(p, lr=lr, amsgrad=True)
    return _loop(model, tokens, steps, batch_size, seq_len, lr, seed, optimizer=amsgrad)


def train_with_adamw_without_decay(model, tokens, steps, batch_size, seq_len, lr, seed):  # AdamW(wd=0) is Adam
    adamw = lambda p: torch.optim.AdamW(p, lr=lr, weight_decay=0.0)
    return _loop(model, tokens, steps, batch_size, seq_len, lr, seed, optimizer=adamw)


REVIEW_WRONG = [
    ("10.1 roll-wrapped target over all T", checks.check_causal_lm_loss, loss_roll_wrapped),
    ("10.1 label smoothing 0.1", checks.check_causal_lm_loss, loss_label_smoothing),
    ("10.1 sum / tokens.numel()", checks.check_causal_lm_loss, loss_sum_over_all_tokens),
    ("10.2 drops the returned state", checks.check_greedy_generate, generate_dropping_the_returned_state),
    ("10.2 skips the last prompt byte", checks.check_greedy_generate, generate_before_the_last_prompt_byte),
    ("10.2 row 0's argmax for the batch", checks.check_greedy_generate, generate_row_zeros_choice),
    ("10.3 Adam at its default lr", checks.check_train_lm, train_adam_default_lr),
    ("10.3 gradient clipping at 1.0", checks.check_train_lm, train_with_clipping),
    ("10.3 zero_grad between backward and step", checks.check_train_lm, train_zero_grad_after_backward),
    ("10.3 AdamW (weight decay 0.01)", checks.check_train_lm, train_with_adamw),
]


@pytest.mark.parametrize("label,check,wrong", REVIEW_WRONG, ids=[w[0] for w in REVIEW_WRONG])
def test_the_reviews_wrong_answers_fail(label, check, wrong):
    with pytest.raises(CheckFailed, match=r"inputs: "):
        check(wrong)


@pytest.mark.parametrize(
    "check,own",
    [(checks.check_causal_lm_loss, loss_by_the_package), (checks.check_greedy_generate, generate_by_the_package)],
)
def test_the_reviews_calls_of_the_package_fail(check, own):
    with pytest.raises(CheckFailed, match=r"calls the package's own implementation"):
        check(own)


def train_without_the_last_step(model, tokens, steps, batch_size, seq_len, lr, seed):  # every loss right
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    losses = []
    for step in range(steps):
        window = random_windows(tokens, batch_size, seq_len, generator)
        loss = causal_lm_loss(model(window), window)
        optimizer.zero_grad()
        loss.backward()
        if step < steps - 1:
            optimizer.step()
        losses.append(loss.item())
    return torch.tensor(losses, dtype=torch.float64)


def train_with_a_little_weight_decay(model, tokens, steps, batch_size, seq_len, lr, seed):
    # 1e-4: at the cases' 16 steps a decay of 1e-3 already moves the losses past the tolerance
    adamw = lambda p: torch.optim.AdamW(p, lr=lr, weight_decay=1e-4)
    return _loop(model, tokens, steps, batch_size, seq_len, lr, seed, optimizer=adamw)


@pytest.mark.parametrize("wrong", [train_without_the_last_step, train_with_a_little_weight_decay])
def test_a_loop_whose_losses_agree_is_judged_by_the_weights_it_leaves(wrong):
    # review: AdamW passed, its weight decay hiding below the losses' tolerance; the model trained in place shows it
    with pytest.raises(CheckFailed, match=r"train_lm\[1\]\[\d+\] is the model's \S+ after your loop"):
        checks.check_train_lm(wrong)


@pytest.mark.parametrize(
    "check,answer",
    [
        (checks.check_causal_lm_loss, loss_by_log_softmax),
        (checks.check_greedy_generate, generate_into_a_buffer),
        (checks.check_train_lm, train_with_the_global_generator),
        (checks.check_train_lm, train_with_adamw_without_decay),
    ],
    ids=lambda x: getattr(x, "__name__", ""),
)
def test_right_answers_written_differently_pass(check, answer):
    assert_passes(check, answer)


def test_float_byte_ids_are_told_their_dtype():
    passes_or_names(checks.check_greedy_generate, generate_float_ids, "float64", "int64")


def test_amsgrad_is_caught_with_a_margin():
    """Review r35b: at 4 steps Adam(amsgrad=True) left weights 5.9e-6 off, against rtol 1e-5 and atol 1e-6. The cases
    now train 16 steps, and its error must stay well beyond the tolerance (here: at least twice rtol)."""
    with pytest.raises(CheckFailed) as caught:
        checks.check_train_lm(train_with_amsgrad)
    error = float(re.search(r"relative error ([0-9.e+-]+)", str(caught.value)).group(1))
    assert error > 2e-5, str(caught.value)

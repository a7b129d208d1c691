"""Checks for the language-modelling chapter.

* ``causal_lm_loss(logits, tokens)``: against :func:`ttr_edu.models.lm.causal_lm_loss`, on logits that favour the
  next byte, so a loss without the shift (or shifted the wrong way) is far off;
* ``greedy_generate(model, prompt, num_tokens)``: against :func:`ttr_edu.models.lm.generate` at temperature 0, on
  small random models whose ``forward`` is switched off, so only the recurrent :meth:`TinyLM.step` can be used, and
  whose ``step`` leaves the state it is given unchanged and returns a new one: an answer that drops the returned
  state (``logits, _ = model.step(token, state)``) then starts every token from the empty state, and fails;
* ``train_lm(model, tokens, steps, batch_size, seq_len, lr, seed)``: against :func:`train_lm_spec`, the loop the
  exercise describes, compared loss by loss. A finished loop that calls a function of the notebook that is still a
  stub (Exercise 10.1's ``causal_lm_loss``) is told so by name, not reported as "not attempted".
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator

import torch

from ttr_edu.checks._core import CheckFailed, _is_untouched_stub
from ttr_edu.checks._rules import run_check
from ttr_edu.models.lm import LMConfig, TinyLM, causal_lm_loss, generate
from ttr_edu.tasks.text import random_windows

__all__ = ["check_causal_lm_loss", "check_greedy_generate", "check_train_lm", "train_lm_spec"]


def _loss_cases() -> Iterator[dict]:
    for i, (B, T, V, dtype) in enumerate(
        [(1, 5, 11, torch.float64), (3, 9, 256, torch.float32), (2, 2, 7, torch.float64)]
    ):
        gen = torch.Generator().manual_seed(1000 + i)
        tokens = torch.randint(0, V, (B, T), generator=gen)
        logits = torch.randn(B, T, V, generator=gen, dtype=torch.float64)
        logits[:, :-1].scatter_add_(-1, tokens[:, 1:, None], torch.full((B, T - 1, 1), 4.0, dtype=torch.float64))
        yield {"logits": logits.to(dtype), "tokens": tokens}


def check_causal_lm_loss(student_causal_lm_loss: Callable) -> bool:
    """Check ``causal_lm_loss(logits, tokens)``: mean cross-entropy of position t against byte t + 1."""
    return run_check(
        "causal_lm_loss", student_causal_lm_loss, causal_lm_loss, _loss_cases(), rtol=1e-5, inputs_unchanged=True
    )


class _CheckLM(TinyLM):
    """A TinyLM that names itself in one line, so that a failure message shows the case, not a 25-line module tree."""

    def __repr__(self) -> str:
        c = self.config
        return f"TinyLM({c.mixer!r}, d_model={c.d_model}, n_layers={c.n_layers}, num_heads={c.num_heads})"


class _StepOnlyLM(_CheckLM):
    """A TinyLM whose whole-sequence ``forward`` is refused: generation must go token by token through ``step``.

    Its ``step`` works on a copy of the state and returns the copy (the state passed in is left as it was), as a
    functional cache would, so the answer must carry the state that ``step`` returns.
    """

    def forward(self, tokens):  # see the class docstring
        raise CheckFailed(
            "greedy_generate: call model.step(token, state) one token at a time; calling model(...) on "
            "the whole prefix costs O(t) per new token, which is what the recurrent form avoids"
        )

    def step(self, token, state):  # see the class docstring
        return super().step(token, copy.deepcopy(state))


def _model(mixer: str, seed: int) -> TinyLM:
    torch.manual_seed(seed)
    model = _StepOnlyLM(LMConfig(mixer=mixer, d_model=16, num_heads=1, n_layers=2))
    with torch.no_grad():  # loud mixers: the greedy choice then depends on the context, not on the last byte alone
        for block in model.blocks:
            block.mixer.o_proj.weight.mul_(10.0)
    return model.eval()


def _generate_cases() -> Iterator[dict]:
    for i, mixer in enumerate(["deltanet", "softmax", "linear_sumnorm"]):
        prompt = torch.randint(0, 256, (2, 4 + i), generator=torch.Generator().manual_seed(2000 + i))
        yield {"model": _model(mixer, i), "prompt": prompt, "num_tokens": 6}


def check_greedy_generate(student_greedy_generate: Callable) -> bool:
    """Check ``greedy_generate(model, prompt, num_tokens)``: the prompt and the argmax continuation, via ``step``.

    The outputs are byte ids, compared exactly: a failure names the first wrong byte (its row and position, the one
    generated and the one expected), never a "relative error" of ids.
    """
    try:
        return run_check(
            "greedy_generate",
            student_greedy_generate,
            lambda model, prompt, num_tokens: generate(model, prompt, num_tokens, temperature=0),
            _generate_cases(),
            rtol=0,
            atol=0,
            inputs_unchanged=True,
        )
    except CheckFailed as failure:
        message = str(failure)
        found = re.search(r"first wrong element at index \((\d+), (\d+)\): got (\S+), expected (\S+)", message)
        if found is None:
            raise
        row, position, got, want = found.groups()
        message = re.sub(r"wrong values \(relative error [^)]*\)", "wrong bytes", message)
        message = message.replace(
            found.group(0),
            f"row {row}, position {position} (counted from the start of the prompt): byte {got}, expected byte {want}",
        )
        raise CheckFailed(message) from None


def train_lm_spec(
    model: TinyLM, tokens: torch.Tensor, steps: int, batch_size: int, seq_len: int, lr: float, seed: int
) -> torch.Tensor:
    """The loop of the exercise: Adam(lr) on ``model``; at each step a batch of
    ``random_windows(tokens, batch_size, seq_len, gen)`` from ``gen = torch.Generator().manual_seed(seed)``, the loss
    ``causal_lm_loss(model(window), window)``, zero_grad, backward, step. Returns the ``(steps,)`` float64 losses."""
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


def _train_cases() -> Iterator[dict]:
    tokens = torch.randint(0, 256, (400,), generator=torch.Generator().manual_seed(3000))
    for i, mixer in enumerate(["linear_sumnorm", "deltanet"]):
        torch.manual_seed(i)
        model = _CheckLM(LMConfig(mixer=mixer, d_model=16, num_heads=1, n_layers=1))
        yield {"model": model, "tokens": tokens, "steps": 4, "batch_size": 3, "seq_len": 12, "lr": 1e-2, "seed": 7 + i}


def _innermost_function(error: BaseException) -> str | None:
    """The name of the function whose code raised ``error`` (the last frame of its traceback)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return None if tb is None else tb.tb_frame.f_code.co_name


def check_train_lm(student_train_lm: Callable) -> bool:
    """Check ``train_lm(model, tokens, steps, batch_size, seq_len, lr, seed)``: the ``(steps,)`` tensor of losses.

    Raises:
        CheckFailed: a wrong loop, or a finished loop that calls another exercise's stub (named in the message).
    """
    name = getattr(student_train_lm, "__name__", "train_lm")

    def loop(**case):
        try:
            return student_train_lm(**case)
        except NotImplementedError as error:
            where = _innermost_function(error)
            if where is not None and where != name and _is_untouched_stub(error):
                raise CheckFailed(
                    f"train_lm: your loop calls `{where}`, which is not written yet (it raised NotImplementedError). "
                    "Solve its exercise first, or call the package's ttr_edu.models.lm.causal_lm_loss"
                ) from None
            raise

    loop.__name__ = name
    try:
        return run_check("train_lm", loop, train_lm_spec, _train_cases(), rtol=1e-4, atol=1e-6)
    except CheckFailed as failure:  # name the training step whose loss differs, not an "element at index (i,)"
        message = str(failure)
        found = re.search(r"first wrong element at index \((\d+),\): got (\S+), expected (\S+)", message)
        if found is None:
            raise
        step, got, want = found.groups()
        message = message.replace("wrong values (relative error", "wrong losses (relative error")
        message = message.replace(found.group(0), f"the loss of step {step}: got {got}, expected {want}")
        raise CheckFailed(message) from None

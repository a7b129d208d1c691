"""The training loop: early stopping, reproducibility from the seed, a quiet or visible bar, bad input."""

import pytest
import torch

from ttr_edu.train import evaluate, train


class Regression(torch.nn.Module):
    """Learn y = x @ w_true: a problem Adam solves in a few hundred steps."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(3))

    def loss(self, batch):
        x, y = batch
        return ((x @ self.w - y) ** 2).mean()


W_TRUE = torch.tensor([1.0, -2.0, 0.5])


def sample(generator):
    x = torch.randn(16, 3, generator=generator)
    return x, x @ W_TRUE


def test_stops_early_at_the_target_loss():
    result = train(Regression(), sample, max_steps=5000, lr=0.05, target_loss=1e-4, eval_every=10, progress=False)
    assert result.reached_target
    assert result.steps < 5000 and result.steps % 10 == 0
    assert result.final_eval_loss <= 1e-4 and result.best_eval_loss <= result.final_eval_loss
    assert result.history[-1] == (result.steps, result.final_eval_loss)


def test_runs_to_max_steps_without_a_target():
    result = train(Regression(), sample, max_steps=30, target_loss=None, eval_every=7, progress=False)
    assert not result.reached_target and result.steps == 30
    assert [s for s, _ in result.history] == [7, 14, 21, 28, 30]


def test_same_seed_same_run_and_the_global_rng_is_left_alone():
    torch.manual_seed(123)
    state = torch.get_rng_state()
    a = train(Regression(), sample, max_steps=40, eval_every=10, seed=7, progress=False)
    assert torch.equal(torch.get_rng_state(), state)
    b = train(Regression(), sample, max_steps=40, eval_every=10, seed=7, progress=False)
    c = train(Regression(), sample, max_steps=40, eval_every=10, seed=8, progress=False)
    assert a.history == b.history
    assert a.history != c.history


def test_progress_bar_is_shown_or_hidden(capsys):
    train(Regression(), sample, max_steps=5, eval_every=5, progress=False)
    assert capsys.readouterr().err == ""
    train(Regression(), sample, max_steps=5, eval_every=5, progress=True, desc="demo")
    assert "demo" in capsys.readouterr().err


def test_evaluate_restores_training_mode():
    model = Regression().train()
    loss = evaluate(model, [sample(torch.Generator().manual_seed(0))])
    assert model.training and loss > 0


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="no trainable parameters"):
        train(Regression().requires_grad_(False), sample)
    with pytest.raises(ValueError, match="lr"):
        train(Regression(), sample, lr=-1.0)
    with pytest.raises(ValueError, match="max_steps"):
        train(Regression(), sample, max_steps=0)
    with pytest.raises(TypeError, match="seed"):
        train(Regression(), sample, seed=1.5)


def test_a_diverging_loss_raises():
    def poisoned(generator):
        x, y = sample(generator)
        return x, y * float("nan")

    with pytest.raises(FloatingPointError, match="step 0"):
        train(Regression(), poisoned, progress=False)

"""Tiny language models: the recurrent step equals the chunkwise forward, budgets match, bad input is refused."""

import pytest
import torch
import torch.nn.functional as F

from ttr_edu.models.lm import LM_MIXERS, LMConfig, TinyLM, bits_per_byte, generate, lm_loss


@pytest.mark.parametrize("mixer", list(LM_MIXERS))
def test_recurrent_logits_equal_chunk_logits_in_fp32(mixer):
    torch.manual_seed(0)
    model = TinyLM(LMConfig(mixer=mixer)).eval()
    tokens = torch.randint(0, 256, (2, 70))  # longer than one chunk of the chunk forms (32)
    full = model(tokens)
    state, steps = model.init_state(), []
    for t in range(tokens.shape[1]):
        logits, state = model.step(tokens[:, t], state)
        steps.append(logits)
    recurrent = torch.stack(steps, dim=1)
    assert state.position == 70
    assert ((recurrent - full).norm() / full.norm()).item() <= 1e-5


def test_every_mixer_has_the_same_parameter_budget_within_three_percent():
    # the two layers built as Schlag et al.'s code builds them have no short convolution (1,536 weights fewer at
    # d = 64, 2 blocks); the others are within 1 % of each other
    counts = {m: TinyLM(LMConfig(mixer=m)).num_parameters() for m in LM_MIXERS}
    assert max(counts.values()) / min(counts.values()) < 1.03, counts
    with_conv = [n for m, n in counts.items() if m not in ("linear_katharopoulos", "delta_sumnorm")]
    assert max(with_conv) / min(with_conv) < 1.01, counts


def test_the_output_embedding_is_tied_to_the_input():
    model = TinyLM(LMConfig(mixer="softmax"))
    grads = torch.autograd.grad(model(torch.tensor([[1, 2, 3]])).sum(), model.embedding.weight)
    assert grads[0][200].abs().sum() > 0  # a byte that is not in the input gets a gradient only through the output


def test_lm_loss_is_cross_entropy_and_bits_per_byte_divides_by_ln2():
    logits, targets = torch.randn(2, 5, 256), torch.randint(0, 256, (2, 5))
    assert torch.allclose(lm_loss(logits, targets), F.cross_entropy(logits.reshape(10, 256), targets.reshape(10)))
    assert bits_per_byte(torch.log(torch.tensor(256.0)).item()) == pytest.approx(8.0)
    with pytest.raises(ValueError, match=r"^targets: expected shape \(B, T\) = \(2, 5\)"):
        lm_loss(logits, targets[:, 1:])


def test_generate_keeps_the_prompt_and_is_reproducible():
    torch.manual_seed(0)
    model = TinyLM(LMConfig(mixer="deltanet"))
    prompt = torch.tensor([[100, 101, 102]])
    a = generate(model, prompt, 8, generator=torch.Generator().manual_seed(3))
    b = generate(model, prompt, 8, generator=torch.Generator().manual_seed(3))
    assert a.shape == (1, 11) and torch.equal(a[:, :3], prompt) and torch.equal(a, b)
    greedy = generate(model, prompt, 4, temperature=0)
    assert greedy[0, 3].item() == model(prompt)[0, -1].argmax().item()  # the first sample is the forward's argmax


def test_generate_checks_once_and_steps_unchecked(monkeypatch):
    """The prompt is checked once per generation; every token then takes step_unchecked, which neither checks its
    token nor scans an activation, and gives step's logits."""
    from ttr_edu._internal import validation
    from ttr_edu.layers import base

    torch.manual_seed(0)
    model = TinyLM(LMConfig(mixer="gated_deltanet")).eval()
    prompt = torch.tensor([[100, 101, 102], [7, 8, 9]])
    expected = generate(model, prompt, 6, temperature=0)
    checks = []
    monkeypatch.setattr(TinyLM, "_check_tokens", lambda self, *a: checks.append("tokens"))
    monkeypatch.setattr(base, "check_layer_input", lambda *a: checks.append("layer input"))
    monkeypatch.setattr(validation, "check_finite", lambda *a, **kw: checks.append("finite"))
    assert torch.equal(generate(model, prompt, 6, temperature=0), expected)
    assert checks == ["tokens"]  # the prompt, once
    monkeypatch.undo()
    state, unchecked = model.init_state(), model.init_state_for(2)
    for t in range(3):
        logits, state = model.step(prompt[:, t], state)
        logits_unchecked, unchecked = model.step_unchecked(prompt[:, t], unchecked)
        assert torch.equal(logits, logits_unchecked)
    with pytest.raises(ValueError, match="token"):
        model.step(torch.tensor([1, 300]), state)  # a direct step still checks its token


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda m: m(torch.tensor([[1.0, 2.0]])), TypeError, "tokens"),
        (lambda m: m(torch.tensor([[1, 256]])), ValueError, "tokens"),
        (lambda m: m(torch.zeros(1, 0, dtype=torch.long)), ValueError, "T ≥ 1"),
        (lambda m: generate(m, torch.tensor([[1]]), 0), ValueError, "num_tokens"),
        (lambda m: generate(m, torch.tensor([[1]]), 2, temperature=-1.0), ValueError, "temperature"),
        (lambda m: LMConfig(mixer="mamba"), ValueError, "mixer"),
    ],
)
def test_bad_input_is_refused_by_name(call, error, match):
    with pytest.raises(error, match=match):
        call(TinyLM(LMConfig(mixer="linear")))

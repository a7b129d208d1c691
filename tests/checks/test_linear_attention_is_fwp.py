"""Chapter 02's checks accept a right answer and reject plausible wrong answers.

That an unattempted stub is reported is tested for every check at once in test_checks_contract.py.
"""

import pytest
import torch

from ttr_edu.checks import CheckFailed
from ttr_edu.checks import linear_attention_is_fwp as checks


def recurrence(q, k, v):
    S = torch.zeros(k.shape[1], v.shape[1], dtype=q.dtype)
    out = []
    for t in range(len(q)):
        S = S + torch.outer(k[t], v[t])
        out.append(S.T @ q[t])
    return torch.stack(out)


def read_before_write(q, k, v):  # o_t = S_{t-1}ᵀ q_t: the current pair is not seen yet
    S = torch.zeros(k.shape[1], v.shape[1], dtype=q.dtype)
    out = []
    for t in range(len(q)):
        out.append(S.T @ q[t])
        S = S + torch.outer(k[t], v[t])
    return torch.stack(out)


def parallel(q, k, v):
    return torch.tril(q @ k.T) @ v


def no_mask(q, k, v):  # the future leaks in
    return (q @ k.T) @ v


def strict_mask(q, k, v):  # the diagonal is dropped
    return torch.tril(q @ k.T, diagonal=-1) @ v


def normalized(q, k, v):
    scores = torch.tril(q @ k.T)
    return (scores @ v) / (scores.sum(-1, keepdim=True) + 1e-6)


def normalized_without_eps(q, k, v):  # the text asks for ε = 1e-6
    scores = torch.tril(q @ k.T)
    return (scores @ v) / scores.sum(dim=-1, keepdim=True)


def normalized_by_all_keys(q, k, v):  # z = Σ over the whole sequence, not the prefix
    scores = torch.tril(q @ k.T)
    return (scores @ v) / ((q @ k.sum(0))[:, None] + 1e-6)


def normalized_by_column_sums(q, k, v):  # sums the masked scores over the wrong axis (over queries, not keys)
    scores = torch.tril(q @ k.T)
    return (scores @ v) / (scores.sum(0, keepdim=True).T + 1e-6)


RIGHT = [
    (checks.check_fast_weight_recurrence, recurrence),
    (checks.check_causal_linear_attention, parallel),
    (checks.check_normalized_linear_attention, normalized),
]
WRONG = [
    (checks.check_fast_weight_recurrence, read_before_write),
    (checks.check_causal_linear_attention, no_mask),
    (checks.check_causal_linear_attention, strict_mask),
    (checks.check_normalized_linear_attention, normalized_by_all_keys),
    (checks.check_normalized_linear_attention, normalized_by_column_sums),
    (checks.check_normalized_linear_attention, parallel),  # forgot the normaliser
    (checks.check_normalized_linear_attention, normalized_without_eps),
]


@pytest.mark.parametrize("check,answer", RIGHT)
def test_right_answer_passes(check, answer, capsys):
    assert check(answer) is True
    assert capsys.readouterr().out.startswith("PASS")


@pytest.mark.parametrize("check,answer", WRONG)
def test_wrong_answer_is_rejected(check, answer):
    with pytest.raises(CheckFailed, match="wrong values"):
        check(answer)


def test_the_recurrence_and_the_parallel_form_are_interchangeable():
    # The chapter's claim, through the checks: each form passes the other's check.
    assert checks.check_fast_weight_recurrence(parallel) and checks.check_causal_linear_attention(recurrence)


def _chunk_reference(q, k, v, chunk_size):
    S = torch.zeros(k.shape[1], v.shape[1], dtype=q.dtype)
    outputs = []
    for start in range(0, len(q), chunk_size):
        qc, kc, vc = q[start : start + chunk_size], k[start : start + chunk_size], v[start : start + chunk_size]
        outputs.append(qc @ S + torch.tril(qc @ kc.T) @ vc)
        S = S + kc.T @ vc
    return torch.cat(outputs)


def _chunk_state_after(q, k, v, chunk_size):  # reads the state *after* its own chunk: sees the future
    S, outputs = torch.zeros(k.shape[1], v.shape[1], dtype=q.dtype), []
    for start in range(0, len(q), chunk_size):
        qc, kc, vc = q[start : start + chunk_size], k[start : start + chunk_size], v[start : start + chunk_size]
        S = S + kc.T @ vc
        outputs.append(qc @ S)
    return torch.cat(outputs)


def _chunk_no_state(q, k, v, chunk_size):  # forgets the chunks before
    return torch.cat(
        [
            torch.tril(q[s : s + chunk_size] @ k[s : s + chunk_size].T) @ v[s : s + chunk_size]
            for s in range(0, len(q), chunk_size)
        ]
    )


def _chunk_strict_mask(q, k, v, chunk_size):  # drops the diagonal inside a chunk
    S, outputs = torch.zeros(k.shape[1], v.shape[1], dtype=q.dtype), []
    for start in range(0, len(q), chunk_size):
        qc, kc, vc = q[start : start + chunk_size], k[start : start + chunk_size], v[start : start + chunk_size]
        outputs.append(qc @ S + torch.tril(qc @ kc.T, -1) @ vc)
        S = S + kc.T @ vc
    return torch.cat(outputs)


def _chunk_drops_the_tail(q, k, v, chunk_size):  # only whole chunks: T not a multiple of C loses the last tokens
    n = len(q) // chunk_size * chunk_size
    return _chunk_reference(q[:n], k[:n], v[:n], chunk_size) if n else q.new_zeros(0, v.shape[1])


def test_chunk_check_passes_a_loop_over_chunks(capsys):
    assert checks.check_chunk_linear_attention(_chunk_reference) is True
    assert capsys.readouterr().out.startswith("PASS")


@pytest.mark.parametrize("wrong", [_chunk_state_after, _chunk_no_state, _chunk_strict_mask, _chunk_drops_the_tail])
def test_chunk_check_rejects_plausible_wrong_answers(wrong):
    with pytest.raises(CheckFailed, match="chunk_linear_attention"):
        checks.check_chunk_linear_attention(wrong)


def test_a_float32_answer_is_told_that_only_the_dtype_differs():
    def in_float32(q, k, v):
        return torch.tril(q.float() @ k.float().T) @ v.float()

    with pytest.raises(CheckFailed, match="only the dtype differs: your result is float32, the reference float64"):
        checks.check_causal_linear_attention(in_float32)


def _chunk_per_token(q, k, v, chunk_size):  # the recurrence, ignoring chunk_size: right values, no matrix product
    S, outputs = torch.zeros(k.shape[1], v.shape[1], dtype=q.dtype), []
    for t in range(len(q)):
        S = S + torch.outer(k[t], v[t])
        outputs.append(S.T @ q[t])
    return torch.stack(outputs)


def _chunk_per_token_matmul(q, k, v, chunk_size):  # a per-token loop whose reads are 1 × d matrix products
    S, outputs = torch.zeros(k.shape[1], v.shape[1], dtype=q.dtype), []
    for t in range(len(q)):
        S = S + k[t : t + 1].T @ v[t : t + 1]
        outputs.append(q[t : t + 1] @ S)
    return torch.cat(outputs)


def _chunk_secretly_quadratic(q, k, v, chunk_size):  # one T × T matrix, whatever chunk_size says
    return torch.tril(q @ k.T) @ v


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (_chunk_per_token, "ran no matrix product"),
        (_chunk_per_token_matmul, "do not grow with chunk_size"),
        (_chunk_secretly_quadratic, "do not grow with chunk_size"),
    ],
)
def test_chunk_check_rejects_right_values_computed_without_chunks(wrong, message, capsys):
    # Review N5: a per-token loop passed and then crashed the cost section; the FLOP count now refuses it.
    with pytest.raises(CheckFailed, match=message):
        checks.check_chunk_linear_attention(wrong)
    assert "PASS" not in capsys.readouterr().out  # no PASS line before the failure


def test_chunk_check_reports_an_unattempted_stub(capsys):
    def stub(q, k, v, chunk_size):
        raise NotImplementedError()

    assert checks.check_chunk_linear_attention(stub) is False
    assert "not attempted yet" in capsys.readouterr().out

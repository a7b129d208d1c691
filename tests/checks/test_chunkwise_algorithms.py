"""The chunkwise algorithms chapter's checks accept the solutions, reject plausible wrong answers and report
unsolved stubs."""

import pytest
import torch

from ttr_edu import ops
from ttr_edu.checks import CheckFailed
from ttr_edu.checks import chunkwise_algorithms as checks


def chunk_linear_attention(q, k, v, S, chunk_size, include_diagonal=True, state_after=False):
    outputs = []
    for start in range(0, q.shape[0], chunk_size):
        Q, K, V = q[start : start + chunk_size], k[start : start + chunk_size], v[start : start + chunk_size]
        mask = torch.tril(torch.ones(len(Q), len(Q), dtype=torch.bool), diagonal=0 if include_diagonal else -1)
        S_next = S + K.T @ V
        outputs.append(Q @ (S_next if state_after else S) + ((Q @ K.T) * mask) @ V)
        S = S_next
    return torch.cat(outputs), S


def ut_transform(k, beta, diagonal=-1, right_beta=True):
    A = torch.tril(beta[:, None] * (k @ k.T), diagonal=diagonal)
    inverse = torch.linalg.inv(torch.eye(len(k), dtype=k.dtype) + A)
    return inverse @ torch.diag(beta) if right_beta else inverse


def delta_rule_chunk_step(q, k, v, beta, S, subtract_ws=True):
    ut = ut_transform(k, beta)
    W, U = ut @ k, ut @ v
    pseudo = U - W @ S if subtract_ws else U
    mask = torch.tril(torch.ones(len(q), len(q), dtype=torch.bool))
    return q @ S + ((q @ k.T) * mask) @ pseudo, S + k.T @ pseudo


def test_solutions_pass(capsys):
    assert checks.check_chunk_linear_attention(chunk_linear_attention)
    assert checks.check_ut_transform(ut_transform)
    assert checks.check_delta_rule_chunk_step(delta_rule_chunk_step)
    assert capsys.readouterr().out.count("PASS") == 3


WRONG = {  # a plausible mistake for each exercise
    "mask without its diagonal": (
        checks.check_chunk_linear_attention,
        chunk_linear_attention,
        {"include_diagonal": False},
    ),
    "state after the chunk": (checks.check_chunk_linear_attention, chunk_linear_attention, {"state_after": True}),
    "tril with the diagonal": (checks.check_ut_transform, ut_transform, {"diagonal": 0}),
    "no diag(beta) on the right": (checks.check_ut_transform, ut_transform, {"right_beta": False}),
    "U instead of U - W S": (checks.check_delta_rule_chunk_step, delta_rule_chunk_step, {"subtract_ws": False}),
}


@pytest.mark.parametrize("mistake", WRONG)
def test_wrong_answers_are_rejected_with_the_first_wrong_element(mistake):
    check, fn, options = WRONG[mistake]
    with pytest.raises(CheckFailed, match="first wrong element"):
        check(lambda **case: fn(**case, **options))


def test_unsolved_stub_is_reported_not_raised(capsys):
    def stub(*args, **kwargs):
        raise NotImplementedError()

    assert checks.check_ut_transform(stub) is False
    assert "not attempted yet" in capsys.readouterr().out


def test_ut_spec_reproduces_the_package_delta_rule():
    """The spec 𝒯 is the one the package's chunk form uses: a chunk step built on it matches ops.delta_rule."""
    gen = torch.Generator().manual_seed(0)
    C, d_k, d_v = 6, 4, 3
    rand = lambda *shape: torch.randn(*shape, generator=gen, dtype=torch.float64)  # noqa: E731
    q, v, S = rand(C, d_k), rand(C, d_v), rand(d_k, d_v)
    k = torch.nn.functional.normalize(rand(C, d_k), dim=-1)
    beta = torch.rand(C, generator=gen, dtype=torch.float64)
    o, S_new = delta_rule_chunk_step(q, k, v, beta, S)
    o_ref, S_ref = ops.delta_rule_recurrent(
        q[None, :, None],
        k[None, :, None],
        v[None, :, None],
        beta[None, :, None],
        scale=1.0,
        initial_state=S[None, None],
        output_final_state=True,
    )
    assert torch.allclose(o, o_ref[0, :, 0]) and torch.allclose(S_new, S_ref[0, 0])


STUDENT_CELLS = """
import torch

def ut_transform(k, beta):
    raise NotImplementedError()  # exercise 11.2 still a stub

def helper_stub(x):
    raise NotImplementedError()

def delta_rule_chunk_step(q, k, v, beta, S):
    ut = ut_transform(k, beta)
    pseudo_values = ut @ v - (ut @ k) @ S
    mask = torch.tril(torch.ones(q.shape[0], q.shape[0], dtype=q.dtype))
    return q @ S + ((q @ k.T) * mask) @ pseudo_values, S + k.T @ pseudo_values

def step_with_unwritten_helper(q, k, v, beta, S):
    return helper_stub(q)

def step_stub(q, k, v, beta, S):
    raise NotImplementedError()
"""


def notebook_namespace() -> dict:
    namespace: dict = {}
    exec(STUDENT_CELLS, namespace)  # functions defined as in a notebook: their globals are the notebook's namespace
    return namespace


def test_step_is_checked_with_the_reference_ut_transform_while_11_2_is_a_stub(capsys):
    namespace = notebook_namespace()
    stub = namespace["ut_transform"]
    assert checks.check_delta_rule_chunk_step(namespace["delta_rule_chunk_step"]) is True
    out = capsys.readouterr().out
    assert "ut_transform (Exercise 11.2) is still a stub" in out and "PASS delta_rule_chunk_step" in out
    assert namespace["ut_transform"] is stub  # the student's namespace is restored


def test_a_wrong_step_is_still_rejected_while_11_2_is_a_stub():
    namespace = notebook_namespace()
    exec(
        "def wrong(q, k, v, beta, S):\n    o, S_new = delta_rule_chunk_step(q, k, v, beta, S)\n    return o, S",
        namespace,
    )
    with pytest.raises(CheckFailed, match="first wrong element"):
        checks.check_delta_rule_chunk_step(namespace["wrong"])


def test_an_unwritten_helper_is_named_not_called_not_attempted():
    with pytest.raises(CheckFailed, match="calls `helper_stub`, which is not written yet"):
        checks.check_delta_rule_chunk_step(notebook_namespace()["step_with_unwritten_helper"])


def test_the_step_stub_itself_is_not_attempted(capsys):
    assert checks.check_delta_rule_chunk_step(notebook_namespace()["step_stub"]) is False
    out = capsys.readouterr().out
    assert "not attempted yet" in out and "lends" not in out  # nothing to lend to: no note

"""Chapter 04's checks accept a right answer and reject plausible wrong answers.

That an unattempted stub is reported is tested for every check at once in test_checks_contract.py.
"""

import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import scipy.linalg
import torch

import ttr_edu.layers.linear
import ttr_edu.regression  # noqa: F401
from tests.checks.galleries import DTYPE_NAMED, accepted, ids, refused
from ttr_edu.checks import CheckFailed
from ttr_edu.checks import delta_rule as checks
from ttr_edu.ops import delta_rule_pseudo_values, delta_rule_recurrent, linear_attention_recurrent


def step(S, k, v, beta):
    return S + beta * torch.outer(k, v - S.T @ k)


def sum_rule_step(S, k, v, beta):  # no error correction
    return S + beta * torch.outer(k, v)


def step_without_beta_on_the_old_value(S, k, v, beta):
    return S + torch.outer(k, beta * v - S.T @ k)


def eigenvalues(k, beta):
    return torch.sort(torch.cat([(1 - beta * k @ k).reshape(1), torch.ones(len(k) - 1, dtype=k.dtype)])).values


def eigenvalues_forgetting_the_norm(k, beta):  # right only for unit keys
    return torch.sort(
        torch.cat([torch.tensor([1 - beta], dtype=k.dtype), torch.ones(len(k) - 1, dtype=k.dtype)])
    ).values


def eigenvalues_of_the_write(k, beta):  # eigenvalues of β k kᵀ, forgetting the I −
    return torch.sort(torch.cat([(beta * k @ k).reshape(1), torch.zeros(len(k) - 1, dtype=k.dtype)])).values


def pseudo_values(k, v, beta):
    S = torch.zeros(k.shape[1], v.shape[1], dtype=k.dtype)
    u = []
    for t in range(len(k)):
        u.append(beta[t] * (v[t] - S.T @ k[t]))
        S = S + torch.outer(k[t], u[-1])
    return torch.stack(u)


def pseudo_values_after_the_write(k, v, beta):  # reads S_t instead of S_{t−1}
    S = torch.zeros(k.shape[1], v.shape[1], dtype=k.dtype)
    u = []
    for t in range(len(k)):
        S = S + beta[t] * torch.outer(k[t], v[t] - S.T @ k[t])
        u.append(beta[t] * (v[t] - S.T @ k[t]))
    return torch.stack(u)


def raw_errors(k, v, beta):  # forgets β
    return pseudo_values(k, v, beta) / beta[:, None]


def predicted_norm_by_the_recursion(b, D, D_v, T):
    ratio, energy = 1 + (b * b - 2 * b) / D, 0.0
    for _ in range(T):
        energy = ratio * energy + b * b * D_v
    return math.sqrt(energy)


def predicted_norm_in_closed_form(b, D, D_v, T):  # the geometric series, with b = 2 as a case of its own
    ratio = 1 + (b * b - 2 * b) / D
    return math.sqrt(b * b * D_v * (T if ratio == 1 else (ratio**T - 1) / (ratio - 1)))


def predicted_norm_as_a_tensor(b, D, D_v, T):
    return torch.tensor(predicted_norm_in_closed_form(b, D, D_v, T), dtype=torch.float64)


def predicted_norm_without_the_sphere(b, D, D_v, T):  # E‖Sᵀk‖² taken as ‖S‖², forgetting E[k kᵀ] = I/D
    return predicted_norm_by_the_recursion(b, 1, D_v, T)


def predicted_norm_without_the_cross_term_sign(b, D, D_v, T):  # (1 − b/D)² for the old memory: only its k part shrinks
    ratio, energy = (1 - b / D) ** 2, 0.0
    for _ in range(T):
        energy = ratio * energy + b * b * D_v
    return math.sqrt(energy)


def predicted_energy(b, D, D_v, T):  # E‖S_T‖², not its square root
    return predicted_norm_by_the_recursion(b, D, D_v, T) ** 2


def predicted_norm_one_write_late(b, D, D_v, T):
    return predicted_norm_by_the_recursion(b, D, D_v, T - 1)


def predicted_norm_failing_at_the_edge(b, D, D_v, T):  # the series without its b = 2 case divides by zero
    ratio = 1 + (b * b - 2 * b) / D
    return math.sqrt(b * b * D_v * (ratio**T - 1) / (ratio - 1))


RIGHT = [
    (checks.check_delta_rule_step, step),
    (checks.check_update_eigenvalues, eigenvalues),
    (checks.check_pseudo_values, pseudo_values),
    (checks.check_predicted_memory_norm, predicted_norm_by_the_recursion),
    (checks.check_predicted_memory_norm, predicted_norm_in_closed_form),
    (checks.check_predicted_memory_norm, predicted_norm_as_a_tensor),
]
WRONG = [
    (checks.check_delta_rule_step, sum_rule_step),
    (checks.check_delta_rule_step, step_without_beta_on_the_old_value),
    (checks.check_update_eigenvalues, eigenvalues_forgetting_the_norm),
    (checks.check_update_eigenvalues, eigenvalues_of_the_write),
    (checks.check_pseudo_values, pseudo_values_after_the_write),
    (checks.check_pseudo_values, raw_errors),
]


WRONG_PREDICTIONS = [
    predicted_norm_without_the_sphere,
    predicted_norm_without_the_cross_term_sign,
    predicted_energy,
    predicted_norm_one_write_late,
    predicted_norm_failing_at_the_edge,
]


@pytest.mark.parametrize("answer", WRONG_PREDICTIONS)
def test_a_wrong_prediction_of_the_memory_size_is_rejected(answer):
    with pytest.raises(CheckFailed, match="expected|raised ZeroDivisionError"):
        checks.check_predicted_memory_norm(answer)


@pytest.mark.parametrize("check,answer", RIGHT)
def test_right_answer_passes(check, answer, capsys):
    assert check(answer) is True
    assert capsys.readouterr().out.startswith("PASS")


@pytest.mark.parametrize("check,answer", WRONG)
def test_wrong_answer_is_rejected(check, answer):
    with pytest.raises(CheckFailed, match="wrong values"):
        check(answer)


def test_pseudo_values_turn_linear_attention_into_the_delta_rule():
    # The chapter's claim: linear attention over the pseudo-values is the delta rule.
    g = torch.Generator().manual_seed(0)
    q, k = (torch.nn.functional.normalize(torch.randn(12, 4, generator=g, dtype=torch.float64), dim=-1) for _ in "qk")
    v, beta = torch.randn(12, 3, generator=g, dtype=torch.float64), torch.rand(12, generator=g, dtype=torch.float64)
    u = pseudo_values(k, v, beta)
    linear, _ = linear_attention_recurrent(q[None, :, None], k[None, :, None], u[None, :, None], scale=1.0)
    delta, _ = delta_rule_recurrent(
        q[None, :, None], k[None, :, None], v[None, :, None], beta[None, :, None], scale=1.0
    )
    torch.testing.assert_close(linear, delta)


def _eigenvalues_by_an_out_argument(k, beta):  # the out= form is an overload of its own at the dispatcher
    M = torch.eye(len(k), dtype=k.dtype) - beta * torch.outer(k, k)
    return torch.linalg.eigvalsh(M, out=torch.empty(len(k), dtype=k.dtype))


def _eigenvalues_by_eigensolver(k, beta):  # right values, but the exercise asks for the derivation
    return torch.linalg.eigvalsh(torch.eye(len(k), dtype=k.dtype) - beta * torch.outer(k, k))


def _eigenvalues_by_svd(k, beta):  # singular values are |eigenvalues|: wrong past β‖k‖² > 1, and ruled out anyway
    return torch.sort(torch.linalg.svdvals(torch.eye(len(k), dtype=k.dtype) - beta * torch.outer(k, k))).values


def _eigenvalues_by_tensor_method(k, beta):  # the same eigensolver spelled as a method, through torch.ops
    return torch.ops.aten._linalg_eigh(torch.eye(len(k), dtype=k.dtype) - beta * torch.outer(k, k))[0]


def _eigenvalues_by_numpy(k, beta):
    import numpy as np

    return torch.from_numpy(np.linalg.eigvalsh((torch.eye(len(k), dtype=k.dtype) - beta * torch.outer(k, k)).numpy()))


def _eigenvalues_by_a_bound_name(k, beta, eigvalsh=torch.linalg.eigvalsh):  # bound before the check ran
    return eigvalsh(torch.eye(len(k), dtype=k.dtype) - beta * torch.outer(k, k))


@pytest.mark.parametrize(
    "answer,what",
    [
        (_eigenvalues_by_eigensolver, "an eigensolver"),
        (_eigenvalues_by_svd, "a singular value decomposition"),
        (_eigenvalues_by_tensor_method, "an eigensolver"),
        (_eigenvalues_by_numpy, "numpy.linalg.eigvalsh"),
        (_eigenvalues_by_a_bound_name, "an eigensolver"),
        (_eigenvalues_by_an_out_argument, "an eigensolver"),
    ],
)
def test_an_eigensolver_does_not_pass_the_derivation_exercise(answer, what, capsys):
    # The text forbids an eigensolver; any spelling of one is refused by what runs.
    with pytest.raises(CheckFailed, match=f"update_eigenvalues: your function (used|called) {what}.*rules out: derive"):
        checks.check_update_eigenvalues(answer)
    assert "PASS" not in capsys.readouterr().out
    # The block is lifted afterwards: the reference and everyone else still have their eigensolver.
    assert torch.linalg.eigvalsh(torch.eye(2, dtype=torch.float64)).tolist() == [1.0, 1.0]


# -- the galleries: plausible wrong answers, and right answers written differently ------------------------------------


def _step_in_place(S, k, v, beta):  # right values, but S is the caller's memory
    S += beta * torch.outer(k, v - S.T @ k)
    return S


def _ones(k, n):
    return torch.ones(n, dtype=k.dtype)


def _eigenvalues(k, beta, *, along_k=None, order="ascending", ones=None):
    special = (1 - beta * (k @ k)).reshape(1) if along_k is None else along_k(k, beta).reshape(1)
    values = torch.cat([special, _ones(k, len(k) - 1 if ones is None else ones(len(k)))])
    if order == "unsorted ones first":
        return values.roll(-1)
    return torch.sort(values, descending=order == "descending").values


def _update_matrix(k, beta):
    return torch.eye(len(k), dtype=k.dtype) - beta * torch.outer(k, k)


def _eigenvalues_by_scipy(k, beta):
    return torch.tensor(scipy.linalg.eigvalsh(_update_matrix(k, beta).numpy()), dtype=k.dtype)


def _eigenvalues_by_qr_iteration(k, beta):  # an eigensolver written around torch.linalg.qr
    A = _update_matrix(k, beta)
    for _ in range(200):
        Q, R = torch.linalg.qr(A)
        A = R @ Q
    return torch.sort(torch.diagonal(A)).values


def _eigvals_sorted(k, beta):
    return torch.linalg.eigvals(_update_matrix(k, beta)).real.sort().values


def _pseudo(k, v, beta, mode=""):
    S, u = torch.zeros(k.shape[1], v.shape[1], dtype=k.dtype), []
    for t in range(len(k)):
        if mode == "after":  # the write first, then the error read from the new memory
            S = S + torch.outer(k[t], beta[t] * v[t])
            u.append(beta[t] * (v[t] - S.T @ k[t]))
            continue
        u_t = {"beta misplaced": beta[t] * v[t] - S.T @ k[t], "no beta": v[t] - S.T @ k[t]}.get(
            mode, beta[t] * (v[t] - S.T @ k[t])
        )
        u.append(u_t)
        if mode == "writes v":
            S = S + beta[t] * torch.outer(k[t], v[t])
        elif mode == "writes u / beta":
            S = S + torch.outer(k[t], u_t) / beta[t]
        else:
            S = S + torch.outer(k[t], u_t)
    return torch.stack(u)


def _pseudo_by_ut(k, v, beta, *, diagonal=-1, beta_on="rows"):
    gram = k @ k.T
    weighted = beta[:, None] * gram if beta_on == "rows" else gram * beta[None, :]
    A = torch.eye(len(k), dtype=k.dtype) + torch.tril(weighted, diagonal)
    return torch.linalg.solve_triangular(A, beta[:, None] * v, upper=False)


def _pseudo_from_the_recurrent_op(k, v, beta):  # u_t read off the package's states: not the student's work
    out, S = [], torch.zeros(1, 1, k.shape[1], v.shape[1], dtype=k.dtype)
    for t in range(len(k)):
        one = (x[None, t : t + 1, None] for x in (k, k, v, beta))
        _, S_next = delta_rule_recurrent(*one, scale=1.0, initial_state=S, output_final_state=True)
        out.append((S_next - S)[0, 0].T @ k[t] / (k[t] @ k[t]))
        S = S_next
    return torch.stack(out)


def _predicted_by_simulation(b, D, D_v, T):  # measures one run instead of predicting the mean: random, not E‖S_T‖²
    g = torch.Generator().manual_seed(0)
    S = torch.zeros(D, D_v, dtype=torch.float64)
    for _ in range(T):
        k = torch.nn.functional.normalize(torch.randn(D, generator=g, dtype=torch.float64), dim=0)
        S = S + b * torch.outer(k, torch.randn(D_v, generator=g, dtype=torch.float64) - S.T @ k)
    return S.norm().item()


def _pseudo_written_into_v(k, v, beta):  # right values, but reuses v's storage for u: the caller's v is gone
    S = torch.zeros(k.shape[1], v.shape[1], dtype=k.dtype)
    for t in range(k.shape[0]):
        v[t] = beta[t] * (v[t] - S.T @ k[t])
        S = S + torch.outer(k[t], v[t])
    return v


def _eigenvalues_by_lapack(k, beta):  # the LAPACK routine below scipy.linalg.eigvalsh, imported inside the answer
    import scipy.linalg.lapack

    values, _, _ = scipy.linalg.lapack.dsyev(_update_matrix(k, beta).double().numpy(), compute_v=0)
    return torch.tensor(values, dtype=k.dtype)


def _eigenvalues_by_umath(k, beta):  # the ufunc below numpy.linalg.eigvalsh
    from numpy.linalg import _umath_linalg

    return torch.tensor(_umath_linalg.eigvalsh_lo(_update_matrix(k, beta).double().numpy()), dtype=k.dtype)


WRONG_ANSWERS = [
    ("4.2 LAPACK's dsyev", checks.check_update_eigenvalues, _eigenvalues_by_lapack,
     r"called scipy\.linalg\._flapack\.dsyev, which this exercise rules out"),
    ("4.2 numpy's _umath_linalg.eigvalsh_lo", checks.check_update_eigenvalues, _eigenvalues_by_umath,
     r"called numpy\.linalg\._umath_linalg\.eigvalsh_lo, which this exercise rules out"),
    ("4.4 u written into v in place", checks.check_pseudo_values, _pseudo_written_into_v,
     "modified its input v in place"),
    ("4.3 one simulated run", checks.check_predicted_memory_norm, _predicted_by_simulation, "got .*, expected"),
    ("4.3 a float32 tensor", checks.check_predicted_memory_norm,
     lambda b, D, D_v, T: torch.tensor(predicted_norm_in_closed_form(b, D, D_v, T), dtype=torch.float32),
     "your result is a float32 tensor"),
    ("4.3 E‖S_T‖², not its root", checks.check_predicted_memory_norm, predicted_energy, "got .*, expected"),
    ("4.1 S k instead of Sᵀ k", checks.check_delta_rule_step,
     lambda S, k, v, beta: S + beta * torch.outer(k, v - S @ k), "raised RuntimeError|wrong values"),
    ("4.1 β on v only", checks.check_delta_rule_step, step_without_beta_on_the_old_value, "wrong values"),
    ("4.1 (1 − β) S + β k vᵀ", checks.check_delta_rule_step,
     lambda S, k, v, beta: (1 - beta) * S + beta * torch.outer(k, v), "wrong values"),
    ("4.1 divided by ‖k‖²", checks.check_delta_rule_step,
     lambda S, k, v, beta: S + beta * torch.outer(k, v - S.T @ k) / (k @ k), "wrong values"),
    ("4.1 S modified in place", checks.check_delta_rule_step, _step_in_place, "modified its input S in place"),
    ("4.1 the sign flipped", checks.check_delta_rule_step,
     lambda S, k, v, beta: S - beta * torch.outer(k, v - S.T @ k), "wrong values"),
    ("4.1 the sum rule", checks.check_delta_rule_step, sum_rule_step, "wrong values"),
    ("4.1 the package's recurrent op", checks.check_delta_rule_step,
     lambda S, k, v, beta: checks._reference_step(S, k, v, beta) + 0, "own implementation"),
    ("4.2 1 − β‖k‖, the square forgotten", checks.check_update_eigenvalues,
     lambda k, beta: _eigenvalues(k, beta, along_k=lambda k, b: 1 - b * k.norm()), "wrong values"),
    ("4.2 1 − β, unit keys assumed", checks.check_update_eigenvalues, eigenvalues_forgetting_the_norm, "wrong values"),
    ("4.2 ones first, not sorted", checks.check_update_eigenvalues,
     lambda k, beta: _eigenvalues(k, beta, order="unsorted ones first"), "wrong values"),
    ("4.2 in float32", checks.check_update_eigenvalues, lambda k, beta: _eigenvalues(k, beta).float(),
     "^update_eigenvalues: wrong dtype: your result is float32, the exercise works in float64"),
    ("4.2 descending", checks.check_update_eigenvalues, lambda k, beta: _eigenvalues(k, beta, order="descending"),
     "wrong values"),
    ("4.2 D_k ones, one value too many", checks.check_update_eigenvalues,
     lambda k, beta: _eigenvalues(k, beta, ones=lambda n: n), "wrong shape"),
    ("4.2 |1 − β‖k‖²|", checks.check_update_eigenvalues,
     lambda k, beta: _eigenvalues(k, beta, along_k=lambda k, b: (1 - b * (k @ k)).abs()), "wrong values"),
    ("4.2 torch.linalg.eigh", checks.check_update_eigenvalues,
     lambda k, beta: torch.linalg.eigh(_update_matrix(k, beta)).eigenvalues, "used an eigensolver"),
    ("4.2 torch.linalg.eigvals", checks.check_update_eigenvalues, _eigvals_sorted, "used an eigensolver"),
    ("4.2 scipy.linalg.eigvalsh", checks.check_update_eigenvalues, _eigenvalues_by_scipy,
     "called scipy.linalg.eigvalsh, which this exercise rules out"),
    ("4.2 eigvalsh bound before the check", checks.check_update_eigenvalues, _eigenvalues_by_a_bound_name,
     "used an eigensolver"),
    ("4.2 a QR iteration", checks.check_update_eigenvalues, _eigenvalues_by_qr_iteration,
     "used a QR factorisation"),
    ("4.4 reads after the write", checks.check_pseudo_values, lambda k, v, beta: _pseudo(k, v, beta, "after"),
     "wrong values"),
    ("4.4 β on v only", checks.check_pseudo_values, lambda k, v, beta: _pseudo(k, v, beta, "beta misplaced"),
     "wrong values"),
    ("4.4 no β", checks.check_pseudo_values, lambda k, v, beta: _pseudo(k, v, beta, "no beta"), "wrong values"),
    ("4.4 writes β v", checks.check_pseudo_values, lambda k, v, beta: _pseudo(k, v, beta, "writes v"),
     "wrong values"),
    ("4.4 writes u / β", checks.check_pseudo_values, lambda k, v, beta: _pseudo(k, v, beta, "writes u / beta"),
     "wrong values"),
    ("4.4 returns β v", checks.check_pseudo_values, lambda k, v, beta: beta[:, None] * v, "wrong values"),
    ("4.4 UT solve with the diagonal", checks.check_pseudo_values,
     lambda k, v, beta: _pseudo_by_ut(k, v, beta, diagonal=0), "wrong values"),
    ("4.4 UT solve, β on the columns", checks.check_pseudo_values,
     lambda k, v, beta: _pseudo_by_ut(k, v, beta, beta_on="columns"), "wrong values"),
    ("4.4 the package's pseudo-values", checks.check_pseudo_values,
     lambda k, v, beta: delta_rule_pseudo_values(k[None, :, None], v[None, :, None], beta[None, :, None])[0, :, 0],
     "calls the package's own implementation"),
    ("4.4 states of the package's recurrent op", checks.check_pseudo_values, _pseudo_from_the_recurrent_op,
     r"calls the package's own implementation \(ttr_edu\.ops\.delta_rule\.delta_rule_recurrent"),
    ("4.4 unit keys assumed", checks.check_pseudo_values,
     lambda k, v, beta: _pseudo(torch.nn.functional.normalize(k, dim=-1), v, beta), "wrong values"),
]  # fmt: skip


@pytest.mark.parametrize("label,check,answer,reason", WRONG_ANSWERS, ids=ids(WRONG_ANSWERS))
def test_a_plausible_wrong_answer_is_refused_for_its_reason(label, check, answer, reason, capsys):
    refused(check, answer, reason, capsys)


def _eigenvalues_by_trace(k, beta):  # D_k − 1 ones (derived), the last one from the trace of the built matrix
    last = torch.trace(_update_matrix(k, beta)) - (len(k) - 1)
    return torch.sort(torch.cat([last.reshape(1), _ones(k, len(k) - 1)])).values


def _eigenvalues_by_a_loop(k, beta):
    values = [1 - beta * float(k @ k)] + [1.0 for _ in range(len(k) - 1)]
    return torch.tensor(sorted(values), dtype=k.dtype)


def _pseudo_by_matrix_products(k, v, beta):  # (1, D) rows, the memory read as uᵀ = β (vᵀ − kᵀ S)
    S, u = k.new_zeros(k.shape[1], v.shape[1]), []
    for t in range(len(k)):
        u.append(beta[t] * (v[t : t + 1] - k[t : t + 1] @ S))
        S = S + k[t : t + 1].T @ u[-1]
    return torch.cat(u)


RIGHT_VARIANTS = [
    ("4.3 the recursion run T times", checks.check_predicted_memory_norm, predicted_norm_by_the_recursion, None),
    ("4.3 as a 0-d tensor", checks.check_predicted_memory_norm, predicted_norm_as_a_tensor, None),
    ("4.1 outer(v − Sᵀk, k) transposed", checks.check_delta_rule_step,
     lambda S, k, v, beta: S + beta * torch.outer(v - S.T @ k, k).T, None),
    ("4.1 (I − β k kᵀ) S + β k vᵀ", checks.check_delta_rule_step,
     lambda S, k, v, beta: (torch.eye(len(k), dtype=k.dtype) - beta * torch.outer(k, k)) @ S + beta * torch.outer(k, v),
     None),
    ("4.1 in float32", checks.check_delta_rule_step,
     lambda S, k, v, beta: (S + beta * torch.outer(k, v - S.T @ k)).float(), DTYPE_NAMED),
    ("4.2 no sort: 1 − β‖k‖² ≤ 1 comes first", checks.check_update_eigenvalues,
     lambda k, beta: torch.cat([(1 - beta * (k @ k)).reshape(1), _ones(k, len(k) - 1)]), None),
    ("4.2 the last one by the trace", checks.check_update_eigenvalues, _eigenvalues_by_trace, None),
    ("4.2 a Python list", checks.check_update_eigenvalues, _eigenvalues_by_a_loop, None),
    ("4.4 UT transform by a triangular solve", checks.check_pseudo_values, _pseudo_by_ut, None),
    ("4.4 (1, D) matrix products", checks.check_pseudo_values, _pseudo_by_matrix_products, None),
    ("4.4 in float32", checks.check_pseudo_values, lambda k, v, beta: _pseudo(k.float(), v.float(), beta.float()),
     DTYPE_NAMED),
]  # fmt: skip


@pytest.mark.parametrize("label,check,answer,expected", RIGHT_VARIANTS, ids=ids(RIGHT_VARIANTS))
def test_a_right_answer_written_differently_passes(label, check, answer, expected, capsys):
    accepted(check, answer, expected, capsys)


_LAZY_SCIPY = """
import sys, torch
from ttr_edu.checks import CheckFailed
from ttr_edu.checks import delta_rule as checks
assert "scipy.linalg" not in sys.modules  # the check resolved numpy's solvers only
def update_eigenvalues(k, beta):  # scipy imported inside the answer, after the check looked for solvers
    import scipy.linalg
    A = (torch.eye(len(k), dtype=k.dtype) - beta * torch.outer(k, k)).numpy()
    return torch.tensor(scipy.linalg.eigvalsh(A), dtype=k.dtype)
try:
    checks.check_update_eigenvalues(update_eigenvalues)
except CheckFailed as failure:
    print(failure)
"""


def test_an_eigensolver_imported_inside_the_answer_is_refused():
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_LAZY_SCIPY)],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(root)},
    )
    assert "called scipy.linalg.eigvalsh, which this exercise rules out" in result.stdout, result.stderr[-2000:]


# -- "write it yourself", held by the allow-list: any other function of the package is refused by name ---------------


def _step_by_delta_product(S, k, v, beta):  # the product of one Householder factor is the delta rule's step
    from ttr_edu.ops.delta_product import delta_product_recurrent

    one = (1, 1, 1)
    _, S_new = delta_product_recurrent(
        k.view(*one, -1), k.view(*one, -1), v.view(*one, -1), torch.full(one, beta, dtype=S.dtype), 1, scale=1.0,
        initial_state=S[None, None], output_final_state=True, check_stability="ignore",
    )  # fmt: skip
    return S_new[0, 0]


def _step_by_the_layer(S, k, v, beta):  # the linear layer's own step
    from ttr_edu.layers.linear import delta_step

    one = (1, 1, 1)
    return delta_step(
        S[None, None], k.view(*one, -1), k.view(*one, -1), v.view(*one, -1), torch.full(one, beta, dtype=S.dtype)
    )[1][0, 0]


def _pseudo_values_by_regression(k, v, beta):  # the test-time regression layer's online SGD, read back as u_t
    from ttr_edu.regression import Linear, OnlineSGD, TestTimeRegression, Uniform

    layer = TestTimeRegression(Uniform(), Linear(), OnlineSGD())
    S, u = torch.zeros(k.shape[1], v.shape[1], dtype=k.dtype), []
    for t in range(k.shape[0]):
        _, S_new = layer(
            k[None, t : t + 1, None], k[None, t : t + 1, None], v[None, t : t + 1, None],
            beta=beta[None, t : t + 1, None], scale=1.0, initial_state=S[None, None], output_final_state=True,
        )  # fmt: skip
        u.append((S_new[0, 0] - S).T @ k[t] / (k[t] @ k[t]))
        S = S_new[0, 0]
    return torch.stack(u)


def _pseudo_values_by_delta_product(k, v, beta):
    from ttr_edu.ops.delta_product import delta_product_recurrent

    S, u = torch.zeros(1, 1, k.shape[1], v.shape[1], dtype=k.dtype), []
    for t in range(k.shape[0]):
        _, S_new = delta_product_recurrent(
            k[None, t : t + 1, None], k[None, t : t + 1, None], v[None, t : t + 1, None], beta[None, t : t + 1, None],
            1, scale=1.0, initial_state=S, output_final_state=True, check_stability="ignore",
        )  # fmt: skip
        u.append((S_new - S)[0, 0].T @ k[t] / (k[t] @ k[t]))
        S = S_new
    return torch.stack(u)


def _step_by_the_harness(S, k, v, beta):  # chapter 08's check module builds I - beta k k^T for its reference
    from ttr_edu.checks.adaptive_and_deep_memories import householder_product

    return householder_product(k, torch.zeros_like(k), beta) @ S + beta * torch.outer(k, v)


def _pseudo_values_by_the_harness(k, v, beta):  # chapter 11's check module's UT transform, (I + A)^-1 diag(beta)
    from ttr_edu.checks.chunkwise_algorithms import ut_transform_spec

    return ut_transform_spec(k, beta) @ v


PACKAGE_BYPASSES = [
    (checks.check_delta_rule_step, _step_by_the_harness, "ttr_edu.checks.adaptive_and_deep_memories"),
    (checks.check_pseudo_values, _pseudo_values_by_the_harness, "ttr_edu.checks.chunkwise_algorithms"),
    (checks.check_delta_rule_step, _step_by_delta_product, "ttr_edu.ops.delta_product.delta_product_recurrent"),
    (checks.check_delta_rule_step, _step_by_the_layer, "ttr_edu.layers.linear.delta_step"),
    (checks.check_pseudo_values, _pseudo_values_by_regression, "ttr_edu.regression"),
    (checks.check_pseudo_values, _pseudo_values_by_delta_product, "ttr_edu.ops.delta_product.delta_product_recurrent"),
]


@pytest.mark.parametrize("check,answer,name", PACKAGE_BYPASSES, ids=[a.__name__ for _, a, _ in PACKAGE_BYPASSES])
def test_another_package_implementation_is_refused_in_the_kernel_by_the_allow_list(check, answer, name):
    """A reviewer passed 4.1 and 4.4 with package functions no list of names held (delta_product with one
    Householder factor, the linear layer's step, the regression layer's online SGD); the kernel's check now holds the
    answer to the exercise's allow-list, as the grading engine does: any package code not given is refused by name.
    A later review passed 4.1 and 4.4 with another chapter's check code (chapter 08's Householder product, chapter
    11's UT transform), which the grader refused and the kernel let run: it is held to the same list now."""
    with pytest.raises(CheckFailed, match=f"write this yourself; {name}.* is not given to this exercise"):
        check(answer)

"""The rules of chapters 07, 08, 09, 11 and 12 hold where the grade is given: in the grading engine, whose answers
run in a locked-down process of their own and are judged in the grader's (``ttr_edu.checks.grading``). The tests
beside this one feed the same answers to the checks in the student's kernel; here a whole notebook with those answers
in its exercise cells is graded, so a rule that only the kernel's watch enforced (11.5's sizes, read while the answer
runs) would show as a PASS, and so would one read from a Triton kernel's source once its numbers agree (12.5's int64
offsets).
"""

import inspect
import re
from pathlib import Path

import nbformat
import pytest

from tests.checks.test_adaptive_and_deep_memories import momentum_by_finite_differences, momentum_by_python_differences
from ttr_edu.checks.grading import engine

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.notebook, pytest.mark.slow]

LOCAL_LINEAR_BY_THE_PACKAGE = """
def local_linear_readout(q, k, v, scale, ridge):
    o, _ = ops.local_linear_attention(q[None, :, None], k[None, :, None], v[None, :, None], scale=scale, ridge=ridge)
    return o[0, :, 0]
"""

MOMENTUM_BY_BACKWARD = """
def momentum_step(S, U, k, v, beta, eta, alpha):
    S_ = S.clone().requires_grad_()
    (0.5 * ((S_.T @ k - v) ** 2).sum()).backward()
    U_new = eta * U - beta * S_.grad
    return (1 - alpha) * S + U_new, U_new
"""

MLP_BY_JACFWD = """
def _loss(W1, W2, k, v):
    return 0.5 * ((torch.nn.functional.gelu(k @ W1) @ W2 - v) ** 2).sum()


def mlp_gradient_step(W1, W2, k, v, lr):
    g1 = torch.func.jacfwd(_loss, argnums=0)(W1, W2, k, v)
    g2 = torch.func.jacfwd(_loss, argnums=1)(W1, W2, k, v)
    return W1 - lr * g1, W2 - lr * g2
"""

UT_BACKWARD_BY_AUTOGRAD = """
def ut_transform_backward(k, v, beta, dW, dU):
    k, v, beta = (x.detach().clone().requires_grad_() for x in (k, v, beta))
    A = torch.tril(beta[:, None] * (k @ k.T), -1)
    ut = torch.linalg.inv(torch.eye(k.shape[0], dtype=k.dtype) + A) * beta[None, :]
    return torch.autograd.grad((dW * (ut @ k)).sum() + (dU * (ut @ v)).sum(), (k, v, beta))
"""

SOLVE_TRIL_BY_NEUMANN_DOUBLING = """
def solve_tril(A, block):
    C = A.shape[0]
    eye = torch.eye(C, dtype=A.dtype)
    X, P, n = eye - A, A @ A, 2
    while n < C:
        X = X @ (eye + P)
        P = P @ P
        n *= 2
    return X
"""

SOLVE_TRIL_BY_TWO_ROW_SLABS = """
def solve_tril(A, block):
    C = A.shape[0]
    L = torch.eye(C, dtype=A.dtype) + A
    X = torch.zeros_like(L)
    for i in range(C):
        lo = max(i - 1, 0)
        rhs = torch.eye(C, dtype=A.dtype)[lo : i + 1] - L[lo : i + 1, :i] @ X[:i]
        X[lo : i + 1] = torch.stack([rhs[-2] if len(rhs) == 2 else rhs[0], rhs[-1]])[-(i + 1 - lo) :]
    return X
"""

SOLVE_TRIL_BY_BLOCKED_FORWARD_SUBSTITUTION = """
def solve_tril(A, block):
    C = A.shape[0]
    L = torch.eye(C, dtype=A.dtype) + A
    eye = torch.eye(C, dtype=A.dtype)
    X = torch.zeros_like(L)
    for a in range(0, C, block):
        b = min(a + block, C)
        X[a:b] = torch.linalg.solve_triangular(L[a:b, a:b], eye[a:b] - L[a:b, :a] @ X[:a], upper=False)
    return X
"""

RUNNING_SUM_IN_INT32 = """
@triton.jit
def running_sum_kernel(x_ptr, out_ptr, T, H, D, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    i_bh, i_d = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    cols = i_d * BLOCK_D + tl.arange(0, BLOCK_D)
    t = tl.arange(0, BLOCK_T)
    base = (i_b * T * H + i_h) * D
    carry = tl.zeros([BLOCK_D], dtype=tl.float32)
    for start in range(0, T, BLOCK_T):
        rows = start + t
        mask = (rows[:, None] < T) & (cols[None, :] < D)
        offsets = base + rows[:, None] * H * D + cols[None, :]
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
        tl.store(out_ptr + offsets, tl.cumsum(x, 0) + carry[None, :], mask=mask)
        carry += tl.sum(x, 0)
"""

UT_TRANSFORM_BY_NEUMANN = """
@triton.jit
def ut_transform_kernel(k_ptr, beta_ptr, out_ptr, C, D_k, BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr):
    t = tl.arange(0, BLOCK_C)
    dk = tl.arange(0, BLOCK_K)
    k = tl.load(k_ptr + t[:, None] * D_k + dk[None, :], mask=(t[:, None] < C) & (dk[None, :] < D_k), other=0.0)
    beta = tl.load(beta_ptr + t, mask=t < C, other=0.0)
    A = tl.where(t[:, None] > t[None, :], beta[:, None] * tl.dot(k, tl.trans(k), input_precision="ieee"), 0.0)
    eye = tl.where(t[:, None] == t[None, :], 1.0, 0.0)
    inverse = eye - A
    power = tl.dot(A, A, input_precision="ieee")
    for _ in range(3):
        inverse = tl.dot(inverse, eye + power, input_precision="ieee")
        power = tl.dot(power, power, input_precision="ieee")
    tl.store(out_ptr + t[:, None] * C + t[None, :], inverse * beta[None, :], mask=(t[:, None] < C) & (t[None, :] < C))
"""

WIRING_TUNED_BY_AUTOGRAD = """{solution}


_wired_by_hand = wire_recall_circuit


def wire_recall_circuit(model):
    _wired_by_hand(model)
    batch = mqar.mqar_batch(8, 24, 3, model.embed.weight.shape[0], generator=torch.Generator().manual_seed(0))
    (g,) = torch.autograd.grad(model.loss(batch), [model.mixer.o_proj.weight])
    with torch.no_grad():
        model.mixer.o_proj.weight -= 0.0 * g
"""

# the answer tests/checks/test_adaptive_and_deep_memories.py holds, as the notebook cell a student would write
MOMENTUM_BY_PYTHON_DIFFERENCES = "\n" + inspect.getsource(momentum_by_python_differences).replace(
    "def momentum_by_python_differences(", "def momentum_step(", 1
)

MLP_BY_A_CENTRAL_DIFFERENCE_OF_GELU = """
def mlp_gradient_step(W1, W2, k, v, lr):
    a = k @ W1
    h = torch.nn.functional.gelu(a)
    delta = h @ W2 - v
    gelu_prime = (torch.nn.functional.gelu(a + 1e-6) - torch.nn.functional.gelu(a - 1e-6)) / 2e-6
    return W1 - lr * torch.outer(k, gelu_prime * (W2 @ delta)), W2 - lr * torch.outer(h, delta)
"""

STEP_THAT_DISCARDS_THE_UT_MATRIX = """
def delta_rule_chunk_step(q, k, v, beta, S):
    ut_transform(k, beta)
    outputs = []
    for t in range(q.shape[0]):
        S = S + beta[t] * torch.outer(k[t], v[t] - S.T @ k[t])
        outputs.append(S.T @ q[t])
    return torch.stack(outputs), S
"""

SOLVE_TRIL_BY_CUMSUM_ROWS = """
def solve_tril(A, block):
    X = torch.eye(A.shape[0], dtype=A.dtype)
    for i in range(1, A.shape[0]):
        X[i] = X[i] - torch.cumsum(A[i][:, None] * X, 0)[-1]
    return X
"""

# C5/C6 (a37c's ans_modes02 and ans_fd08): the work run where torch's dispatch modes are off, through
# torch's helper (which the witness replaces while it counts) and through a reference to the C switch taken before
# the check starts (which only the profiler's record sees)
RECURRENCE_BEHIND_THE_MODES = """
from torch.utils._python_dispatch import _disable_current_modes

def fast_weight_recurrence(q, k, v):
    rows = []
    for t in range(q.shape[0]):
        with _disable_current_modes():
            o = (k[: t + 1] @ q[t]) @ v[: t + 1]      # every earlier key and value again: no state, T^2
        rows.append(o * 1.0)                           # what the counter would see: one op per token
    return torch.stack(rows)
"""

MOMENTUM_BY_DIFFERENCES_BEHIND_THE_MODES = (
    "\nfrom torch.utils._python_dispatch import _disable_current_modes\n"
    + inspect.getsource(momentum_by_finite_differences).replace(
        "def momentum_by_finite_differences(", "def _differences("
    )
    + """
def momentum_step(S, U, k, v, beta, eta, alpha):
    with _disable_current_modes():
        return _differences(S, U, k, v, beta, eta, alpha)
"""
)

SOLVE_TRIL_BEHIND_THE_DISPATCH_SWITCH = """
_off = torch._C._DisableTorchDispatch

def solve_tril(A, block):
    eye = torch.eye(A.shape[0], dtype=A.dtype)
    X = eye
    with _off():
        for _ in range(A.shape[0]):  # Horner's rule for the Neumann series: a whole product per row
            X = eye - A @ X
    return X * 1.0
"""

# (chapter, {answer cell's grade id: its source, where {solution} stands for the solution's}, {graded cell's grade
# id: (status, what its detail says)}); the graded cells not named must PASS (their answer is the solution's).
SUBMISSIONS = {
    "07: the package's local linear attention": (
        "07_test_time_regression_nonparametric",
        {"ch07_local_linear": LOCAL_LINEAR_BY_THE_PACKAGE},
        {"test_check_local_linear_readout": ("FAIL", r"calls the package's own implementation \(.*local_linear")},
    ),
    "08: autograd in 8.3 and 8.4": (
        "08_adaptive_and_deep_memories",
        {"ch08_momentum_step": MOMENTUM_BY_BACKWARD, "ch08_mlp_gradient_step": MLP_BY_JACFWD},
        {
            "test_check_momentum_step": ("FAIL", r"used autograd"),
            "test_check_mlp_gradient_step": ("FAIL", r"used autograd"),
        },
    ),
    "08: finite differences in Python floats (8.3) and of GELU alone (8.4)": (
        "08_adaptive_and_deep_memories",
        {
            "ch08_momentum_step": MOMENTUM_BY_PYTHON_DIFFERENCES,
            "ch08_mlp_gradient_step": MLP_BY_A_CENTRAL_DIFFERENCE_OF_GELU,
        },
        {
            "test_check_momentum_step": ("FAIL", r"handed \d+ numbers to Python or NumPy"),
            "test_check_mlp_gradient_step": ("FAIL", r"evaluates at a displaced copy of its own numbers"),
        },
    ),
    "02: 2.1's prefix re-read behind _disable_current_modes": (
        "02_linear_attention_is_fwp",
        {"ch02_recurrence": RECURRENCE_BEHIND_THE_MODES},
        {"test_check_fast_weight_recurrence": ("FAIL", r"while the check (counts|watches) its torch operations")},
    ),
    "08: 8.3's finite differences behind _disable_current_modes": (
        "08_adaptive_and_deep_memories",
        {"ch08_momentum_step": MOMENTUM_BY_DIFFERENCES_BEHIND_THE_MODES},
        {"test_check_momentum_step": ("FAIL", r"while the check watches its torch operations")},
    ),
    "11: 11.5's whole solve behind a kept _DisableTorchDispatch": (
        "11_chunkwise_algorithms",
        {"ch11_solve_tril": SOLVE_TRIL_BEHIND_THE_DISPATCH_SWITCH},
        {"test_check_solve_tril": ("FAIL", r"ran torch operations outside the check's modes")},
    ),
    "09: a wiring tuned by a gradient": (
        "09_associative_recall",
        {"ch09_wire_recall_circuit": WIRING_TUNED_BY_AUTOGRAD},
        {"test_check_wire_recall_circuit": ("FAIL", r"used autograd")},
    ),
    "11: autograd in 11.4, a Neumann product in 11.5": (
        "11_chunkwise_algorithms",
        {"ch11_ut_transform_backward": UT_BACKWARD_BY_AUTOGRAD, "ch11_solve_tril": SOLVE_TRIL_BY_NEUMANN_DOUBLING},
        {
            "test_check_ut_transform_backward": ("FAIL", r"used autograd"),
            "test_check_solve_tril": ("FAIL", r"more than the work of two products of the whole"),
        },
    ),
    "11: two-row slabs in 11.5": (
        "11_chunkwise_algorithms",
        {"ch11_solve_tril": SOLVE_TRIL_BY_TWO_ROW_SLABS},
        {"test_check_solve_tril": ("FAIL", r"a substitution across the whole matrix")},
    ),
    "11: ut_transform's result thrown away in 11.3, a substitution by cumsum in 11.5": (
        "11_chunkwise_algorithms",
        {"ch11_delta_rule_chunk_step": STEP_THAT_DISCARDS_THE_UT_MATRIX, "ch11_solve_tril": SOLVE_TRIL_BY_CUMSUM_ROWS},
        {
            "test_check_delta_rule_chunk_step": ("FAIL", r"does not build both outputs from what it returns"),
            "test_check_solve_tril": ("FAIL", r"operations on rows or columns wider than a block"),
        },
    ),
    "11: a blocked forward substitution in 11.5 (right)": (
        "11_chunkwise_algorithms",
        {"ch11_solve_tril": SOLVE_TRIL_BY_BLOCKED_FORWARD_SUBSTITUTION},
        {},
    ),
    "12: offsets left in int32 in 12.5 (right numbers)": (
        "12_triton_kernels",
        {"ch12_running_sum_kernel": RUNNING_SUM_IN_INT32},
        {"test_check_running_sum": ("FAIL", r"computes the right numbers here, but on a GPU:(.|\n)*int64")},
    ),
    "12: the Neumann series in 12.4 (correlated keys)": (
        "12_triton_kernels",
        {"ch12_ut_transform": UT_TRANSFORM_BY_NEUMANN},
        {"test_check_ut_transform": ("FAIL", r"first wrong element")},
    ),
}


def _submission(slug: str, answers: dict[str, str]):
    """The solved notebook with ``answers`` in place of those exercise cells, and its release."""
    solved = nbformat.read(ROOT / "solutions" / f"{slug}.ipynb", as_version=4)
    release = nbformat.read(ROOT / "chapters" / f"{slug}.ipynb", as_version=4)
    for cell in solved.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = answers.pop(grade_id).replace("{solution}", cell.source)
    assert not answers, f"no exercise cells {sorted(answers)} in {slug}"
    return solved, release


@pytest.mark.parametrize("label", SUBMISSIONS)
def test_the_rules_hold_in_the_engine(label):
    slug, answers, expected = SUBMISSIONS[label]
    report = engine.grade(*_submission(slug, dict(answers)), timeout=120)
    verdicts = {v.grade_id: v for v in report.verdicts}
    assert set(expected) <= set(verdicts)
    for grade_id, verdict in verdicts.items():
        status, says = expected.get(grade_id, ("PASS", ""))
        assert verdict.status == status, (grade_id, verdict.status, verdict.detail, report.problems)
        assert re.search(says, verdict.detail), (grade_id, verdict.detail)

"""The rules mechanism every exercise check uses (ttr_edu.checks._rules, ttr_edu.checks._guard): each rule is broken
by what the answer does, however it spells it, and honest answers pass. The engine's child (lock_down) is tested in a
process of its own, since what it does lasts for that process."""

import math
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch

from ttr_edu import hebbian
from ttr_edu.checks import CheckFailed
from ttr_edu.checks import hebbian_memory as ch01
from ttr_edu.checks._rules import OpCount, Rules, WorkCount, exercise

ROOT = Path(__file__).resolve().parents[2]


def _write_cases():
    g = torch.Generator().manual_seed(0)
    for d_k, d_v in [(2, 3), (4, 4)]:
        yield {
            "W": torch.randn(d_v, d_k, generator=g, dtype=torch.float64),
            "k": torch.randn(d_k, generator=g, dtype=torch.float64),
            "v": torch.randn(d_v, generator=g, dtype=torch.float64),
        }


# -- the package's own answer, however it is reached -------------------------------------------------------------------


def _in_a_thread(W, k, v):
    out = {}
    worker = threading.Thread(target=lambda: out.setdefault("W", hebbian.hebbian_write(W, k, v)))
    worker.start()
    worker.join()
    return out["W"]


def _after_settrace_none(W, k, v):
    sys.settrace(None)
    return hebbian.hebbian_write(W, k, v)


def _bound_before(W, k, v, write=hebbian.hebbian_write):
    return write(W, k, v)


@pytest.mark.parametrize("answer", [_in_a_thread, _after_settrace_none, _bound_before], ids=lambda f: f.__name__)
def test_the_packages_own_answer_is_refused_however_it_is_reached(answer):
    with pytest.raises(CheckFailed, match=r"calls the package's own implementation \(ttr_edu\.hebbian\.hebbian_write"):
        ch01.check_write(answer)


def test_switching_the_call_trace_off_is_refused():
    def answer(W, k, v):
        sys.setprofile(None)
        return hebbian.hebbian_write(W, k, v)

    with pytest.raises(CheckFailed, match=r"switched off the check's call trace"):
        ch01.check_write(answer)
    assert sys.getprofile() is None  # the check put back what it found


def test_the_expected_value_does_not_exist_while_the_answer_runs():
    """The reference runs after the answer: no frame below the answer holds a tensor equal to the expected one."""

    def reads_the_stack(W, k, v):
        want = W + torch.outer(v, k)
        frame = sys._getframe(1)
        while frame is not None:
            for value in frame.f_locals.values():
                if isinstance(value, torch.Tensor) and value.shape == want.shape and torch.equal(value, want):
                    return value.clone()
            frame = frame.f_back
        return torch.zeros_like(W)

    with pytest.raises(CheckFailed, match="wrong values"):
        ch01.check_write(reads_the_stack)


# -- results that could answer for themselves --------------------------------------------------------------------------


def test_a_tensor_with_an_instance_detach_is_refused():
    def answer(W, k, v):
        out = torch.zeros_like(W)
        out.detach = lambda: W + torch.outer(v, k)
        return out

    with pytest.raises(CheckFailed, match="carrying attributes of its own"):
        ch01.check_write(answer)


def test_a_subclass_whose_metaclass_claims_to_be_tensor_is_refused():
    class Meta(type(torch.Tensor)):
        def __eq__(cls, other):
            return True

        __hash__ = type.__hash__

    class Agree(torch.Tensor, metaclass=Meta):
        pass

    with pytest.raises(CheckFailed, match=r"expected a plain torch.Tensor, got Agree \(a subclass"):
        ch01.check_write(lambda W, k, v: torch.zeros_like(W).as_subclass(Agree))


def test_a_reference_replaced_by_a_library_callable_changes_nothing(monkeypatch):
    monkeypatch.setattr(hebbian, "hebbian_write", "ok".format)
    with pytest.raises(CheckFailed, match=r"ttr_edu\.hebbian\.hebbian_write was replaced"):
        ch01.check_write(lambda W, k, v: "ok")


# -- honest work -------------------------------------------------------------------------------------------------------


def test_harmless_global_settings_cost_nothing(capsys):
    """set_default_device pushes a torch mode; a warning inside the answer is the answer's business."""
    torch.set_default_device("cpu")
    try:

        def write(W, k, v):
            torch.tensor(W)  # "To copy construct from a tensor ..." UserWarning
            return W + torch.outer(v, k)

        assert ch01.check_write(write) is True
    finally:
        torch.set_default_device(None)
    assert capsys.readouterr().out.startswith("PASS write")


def test_a_right_answer_in_float32_names_the_dtype(capsys):
    def write32(W, k, v):
        return (W + torch.outer(v, k)).float()

    try:
        ch01.check_write(write32)
        message = capsys.readouterr().out
    except CheckFailed as failure:
        message = str(failure)
    assert "float32" in message and "float64" in message


# -- a rule of each kind, on a small exercise of its own ---------------------------------------------------------------


def _prefix_cases():
    g = torch.Generator().manual_seed(1)
    for t in (1, 5, 17):
        yield {"x": torch.randn(t, 3, generator=g, dtype=torch.float64)}


def _prefix_reference(x):
    return torch.cumsum(x, dim=0)


@exercise(reference=_prefix_reference, cases=_prefix_cases, rules=Rules(inputs_unchanged=True))
def check_prefix_sum(prefix_sum):
    """Check ``prefix_sum(x)``: running sums along T, leaving x as it was."""


def _linear(x):
    out, total = [], torch.zeros_like(x[0])
    for row in x:
        total = total + row
        out.append(total)
    return torch.stack(out)


def _quadratic(x):  # a T × T lower-triangular matrix of ones, times x
    return torch.ones(len(x), len(x), dtype=x.dtype).tril() @ x


def _in_place(x):
    return x.cumsum_(dim=0)


def _prefix_at_length(t: int) -> dict:
    return {"x": torch.randn(t, 8, generator=torch.Generator().manual_seed(t), dtype=torch.float64)}


@exercise(
    reference=_prefix_reference,
    cases=_prefix_cases,
    rules=Rules(work=(WorkCount(_prefix_at_length, sizes=(64, 256), high=1.4, expect="Running sums cost T."),)),
)
def check_counted_prefix_sum(prefix_sum):
    """Check ``prefix_sum(x)``: running sums along T, whose work grows linearly in T."""


def _quadratic_in_numpy(x):  # the T × T product done in numpy, where no count of torch operations sees it
    import numpy as np

    return torch.from_numpy(np.tril(np.ones((len(x), len(x)))) @ np.asarray(x))


def _prefix_by_loop_over_prefixes(x):  # every prefix summed again: T² / 2 rows read
    return torch.stack([x[: t + 1].sum(0) for t in range(len(x))])


def test_the_work_rule_passes_linear_answers_and_refuses_quadratic_ones(capsys):
    assert check_counted_prefix_sum(_linear) is True
    assert check_counted_prefix_sum(lambda x: x.cumsum(0)) is True
    for quadratic in (_quadratic, _prefix_by_loop_over_prefixes):
        with pytest.raises(CheckFailed, match=r"grows like T\^1\.[89]\d: \d+ at T = 64, \d+ at T = 256.*Running sums"):
            check_counted_prefix_sum(quadratic)


@exercise(
    reference=_prefix_reference,
    cases=_prefix_cases,
    rules=Rules(
        work=(
            WorkCount(
                _prefix_at_length, sizes=(64, 128, 256), high=math.inf, affine=True, expect="Running sums cost T."
            ),
        )
    ),
)
def check_exactly_linear_prefix_sum(prefix_sum):
    """Check ``prefix_sum(x)``: running sums along T, whose work is exactly linear in T (no exponent bound: the
    linearity alone judges)."""


def test_the_exact_linearity_passes_linear_answers_and_refuses_an_output_grown_by_cat():
    def grown(x):  # running sums per 16 rows, the growing output copied by torch.cat each time: T²/32 rows copied
        out = x[:0]
        for start in range(0, len(x), 16):
            out = torch.cat([out, x[start : start + 16].cumsum(0) + (out[-1] if len(out) else 0)])
        return out

    assert check_exactly_linear_prefix_sum(_linear) is True
    assert check_exactly_linear_prefix_sum(lambda x: x.cumsum(0)) is True
    with pytest.raises(CheckFailed, match=r"grows faster than T: \d+ at T = 64, \d+ at T = 128, \d+ at T = 256"):
        check_exactly_linear_prefix_sum(grown)


def test_the_work_rule_refuses_values_moved_out_of_torch():
    with pytest.raises(CheckFailed, match=r"moved a tensor's values out of torch \(Tensor\.__array__\)"):
        check_counted_prefix_sum(_quadratic_in_numpy)


def test_the_work_rule_refuses_an_answer_that_takes_the_counter_away():
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack, _pop_mode

    def unwatched(x):
        if _get_current_dispatch_mode_stack():  # the counter, while the work is counted
            _pop_mode()
        return _quadratic(x)

    with pytest.raises(CheckFailed, match="took the check.s modes off torch.s mode stack while the check counts"):
        check_counted_prefix_sum(unwatched)


def test_inputs_unchanged_refuses_an_in_place_answer():
    with pytest.raises(CheckFailed, match="modified its input x in place"):
        check_prefix_sum(_in_place)


#: exercises whose text asks for work on an input in place: (check module, check) -> why (none so far)
IN_PLACE_BY_DESIGN: dict[tuple[str, str], str] = {}


def test_inputs_unchanged_is_every_exercises_rule_unless_it_says_why():
    """An answer that overwrites its inputs passes its own cases (each call gets copies) but breaks the notebook's
    later cells, which pass it their tensors (chapter 04's pseudo-values written into v, chapter 06's keys scaled in
    place): so the rule is the default, and an exercise that opts out is listed above with its reason."""
    import importlib
    import pkgutil

    import ttr_edu.checks

    assert Rules().inputs_unchanged is True
    declared = 0
    for module_info in pkgutil.iter_modules(ttr_edu.checks.__path__):
        if module_info.name.startswith("_") or module_info.ispkg:
            continue
        module = importlib.import_module(f"ttr_edu.checks.{module_info.name}")
        for name, value in vars(module).items():
            exercise_ = getattr(value, "__exercise__", None)
            if exercise_ is None or not name.startswith("check_") or not hasattr(exercise_, "rules"):
                continue  # a staged check (chapter 13's capstone) judges the learner's mixer, not tensors it is given
            declared += 1
            if not exercise_.rules.inputs_unchanged:
                assert (module_info.name, name) in IN_PLACE_BY_DESIGN, f"{module_info.name}.{name} opts out silently"
    assert declared >= 30


def _feature(x):
    return torch.nn.functional.elu(x) + 1


@exercise(reference=_feature, cases=_prefix_cases, rules=Rules(keep_grad=("x",)))
def check_feature(feature):
    """Check ``feature(x) = elu(x) + 1`` with gradients flowing back to ``x``."""


def test_keep_grad_refuses_a_detached_result_and_passes_a_differentiable_one(capsys):
    assert check_feature(lambda x: torch.nn.functional.elu(x) + 1) is True
    with pytest.raises(CheckFailed, match="does not carry gradients back to x"):
        check_feature(lambda x: torch.nn.functional.elu(x.detach()) + 1)
    with pytest.raises(CheckFailed, match="gradient with respect to x is wrong"):
        check_feature(lambda x: torch.where(x > 0, x, torch.exp(x.detach()) - 1) + 1)


def test_rules_that_contradict_each_other_are_refused_at_declaration():
    with pytest.raises(ValueError, match="keep_grad needs autograd"):
        Rules(no_autograd=True, keep_grad=("x",))


def _by_hand(x):
    return 2 * x


@exercise(reference=_by_hand, cases=_prefix_cases, rules=Rules(no_autograd=True, why="write the derivative out"))
def check_derivative(derivative):
    """Check ``derivative(x)`` of ``x²``, written out."""


@pytest.mark.parametrize(
    "answer",
    [
        lambda x: torch.autograd.grad(((y := x.clone().requires_grad_()) ** 2).sum(), [y])[0],
        lambda x: torch.func.grad(lambda y: (y**2).sum())(x),
        lambda x: torch.func.vmap(torch.func.grad(lambda y: y**2))(x.flatten()).reshape(x.shape),
        lambda x: torch.ops.aten.mse_loss_backward(torch.ones_like(x), x, torch.zeros_like(x), 0),  # 2x, right
    ],
    ids=["autograd.grad", "func.grad", "vmap of func.grad", "an aten derivative kernel"],
)
def test_no_autograd_refuses_every_route_into_it(answer):
    with pytest.raises(CheckFailed, match=r"used autograd.*rules out: write the derivative out"):
        check_derivative(answer)


def test_no_autograd_passes_the_derivative_written_out(capsys):
    assert check_derivative(lambda x: 2 * x) is True


def _rows_at(n: int) -> dict:
    return {"x": torch.randn(n, 3, generator=torch.Generator().manual_seed(n), dtype=torch.float64)}


@exercise(
    reference=lambda x: x.sum(dim=0),
    cases=_prefix_cases,
    rules=Rules(
        op_count=OpCount(_rows_at, sizes=(4, 32), high=0.3, size_name="N", expect="One reduction does it."),
        why="sum the rows without a loop",
    ),
)
def check_column_sums(column_sums):
    """Check ``column_sums(x)``: the sum over the rows, without a Python loop over them."""


@exercise(
    reference=lambda x: x.sum(dim=0),
    cases=_prefix_cases,
    rules=Rules(op_count=OpCount(_rows_at, sizes=(4, 32), low=0.7, size_name="N", expect="Add one row at a time.")),
)
def check_column_sums_by_loop(column_sums):
    """Check ``column_sums(x)``, added up row by row."""


def _sum_by_loop(x):
    total = torch.zeros_like(x[0])
    for row in x:
        total = total + row
    return total


def test_op_count_tells_a_loop_from_one_operation_however_it_is_spelled(capsys):
    assert check_column_sums(lambda x: x.sum(dim=0)) is True
    assert check_column_sums(lambda x: torch.einsum("n d -> d", x)) is True
    for loop in (_sum_by_loop, lambda x: sum(x.unbind(0)), lambda x: torch.stack([x[i] for i in range(len(x))]).sum(0)):
        with pytest.raises(CheckFailed, match=r"torch operations at N = 4 and .* grows like N\^.*: sum the rows"):
            check_column_sums(loop)
    assert check_column_sums_by_loop(_sum_by_loop) is True
    with pytest.raises(CheckFailed, match=r"grows like N\^0\.0. Add one row at a time\."):
        check_column_sums_by_loop(lambda x: x.sum(dim=0))


def test_taking_the_op_counter_off_the_mode_stack_is_refused():
    from torch.utils._python_dispatch import _pop_mode

    def hides(x):
        if torch._C._len_torch_dispatch_stack():  # the count is on: take it off
            _pop_mode()
        return _sum_by_loop(x)

    with pytest.raises(CheckFailed, match="took the check.s modes off torch.s mode stack while the check counts"):
        check_column_sums(hides)


def _mean(x):
    return x.mean().item()


@exercise(reference=_mean, cases=_prefix_cases, rules=Rules(returns=float))
def check_mean(mean):
    """Check ``mean(x)``, returned as a Python float."""


def test_returns_asks_for_the_python_type_the_text_names(capsys):
    assert check_mean(lambda x: x.mean().item()) is True
    assert check_mean(lambda x: float(x.numpy().mean())) is True
    with pytest.raises(CheckFailed, match=r"asks for a Python float, your function returned a tensor of shape \(\)"):
        check_mean(lambda x: x.mean())
    with pytest.raises(CheckFailed, match=r"asks for a Python float, your function returned 'text'"):
        check_mean(lambda x: "text")


def _mixed_cases():
    yield from _prefix_cases()
    yield {"x": torch.randn(6, 3, generator=torch.Generator().manual_seed(2))}  # float32


@exercise(reference=lambda x: torch.cumsum(x, dim=0), cases=_mixed_cases, rtol=1e-12, atol=0.0)
def check_running_sums(running_sums):
    """Check ``running_sums(x)`` in float64 (to 1e-12) and float32 (to float32's tolerance)."""


def test_float32_cases_are_judged_at_float32_tolerance(capsys):
    # the same sums in another order: equal in float64 to 1e-12, and in float32 to rounding only
    assert check_running_sums(lambda x: torch.stack([x[: t + 1].flip(0).sum(0) for t in range(len(x))])) is True
    with pytest.raises(CheckFailed, match="wrong values"):
        check_running_sums(lambda x: torch.cumsum(x, dim=0) * (1 + 1e-3))


def _explained(message, case, result):
    return f" [saw {type(result).__name__}]"


@exercise(reference=_by_hand, cases=_prefix_cases, explain=_explained)
def check_double(double):
    """Check ``double(x) = 2x``; a failure says what the answer returned."""


def test_explain_sees_what_the_answer_returned():
    with pytest.raises(CheckFailed, match=r"(?s)wrong values.*\[saw Tensor\]"):
        check_double(lambda x: 3 * x)


# -- the engine's child: lock_down -------------------------------------------------------------------------------------

_CHILD = """
import os, sys, tempfile, torch, numpy
from ttr_edu import hebbian
import ttr_edu.checks.hebbian_memory as checks
from ttr_edu.checks._guard import forbidden, lock_down, package_dirs
bad = forbidden(answers=[hebbian.store], no_solvers=True, no_autograd=True, solver_modules=["numpy.linalg"])
scratch = tempfile.mkdtemp()
def end(message):
    os.write(1, ("ENDED " + message + "\\n").encode())
    os._exit(0)
lock_down(bad, end=end, scratch=scratch, code_dirs=package_dirs())
del bad
A = torch.eye(3, dtype=torch.float64)
try:
    print("RESULT", repr(({what})))
except Exception as err:
    print("REFUSED", type(err).__name__, err)
sys.stdout.flush()
os._exit(0)
"""

CHILD_CASES = {
    "hebbian.store(A, A)": "ENDED your function calls the package's own implementation (ttr_edu.hebbian.store)",
    "checks.check_store.__exercise__.reference(A, A)": "ENDED your function calls the package's own",
    "numpy.linalg.inv(A.numpy())": "ENDED your function called numpy.linalg.inv",
    "torch.linalg.inv(A)": "ENDED your function used a matrix inverse",
    "(A.clone().requires_grad_() ** 2).sum().backward()": "ENDED your function used autograd",
    "torch.ops.aten.gelu_backward(A, A)": "ENDED your function used autograd's derivative kernel",
    "torch.inference_mode().__enter__() or torch.ops.aten.tanh_backward(A, A)": "ENDED your function used autograd's",
    "__import__('importlib').reload(hebbian)": "REFUSED PermissionError",
    "open(hebbian.__file__).read()": "REFUSED PermissionError",
    "__import__('gc').get_referrers(hebbian)": "REFUSED PermissionError",
    "open('/tmp/ttr-edu-lock-down-test', 'w')": "REFUSED PermissionError",
    "__import__('subprocess').run(['true'])": "REFUSED PermissionError",
    "sys.setprofile(None)": "REFUSED PermissionError",
    "__import__('ctypes').pythonapi.Py_IsInitialized()": "REFUSED PermissionError",
    "open(os.path.join(scratch, 'notes.txt'), 'w').write('ok')": "RESULT 2",
    "(A @ A + torch.outer(A[0], A[1])).sum().item()": "RESULT 4.0",
    "torch.linalg.det(A).item()": "RESULT 1.0",
}


@pytest.mark.parametrize("what", list(CHILD_CASES))
def test_lock_down_removes_and_refuses_for_the_rest_of_the_process(what):
    code = textwrap.dedent(_CHILD).replace("{what}", what)
    env = {"PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert CHILD_CASES[what] in result.stdout, result.stdout + result.stderr[-2000:]
    assert not Path("/tmp/ttr-edu-lock-down-test").exists()


# -- a rule that depends on the case: Rules.watch ---------------------------------------------------------------------


class _NoProductWiderThanHalf:
    """Refuses a matrix product whose result is wider than half the case's size (raised and recorded)."""

    def __init__(self, case):
        from torch.utils._python_dispatch import TorchDispatchMode

        from ttr_edu.checks._guard import ForbiddenCall

        limit, watch = case["x"].shape[0] // 2, self
        self.hit = None

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if func.__name__.startswith("mm") and max(out.shape) > limit:
                    watch.hit = watch.hit or f"multiplied into a {tuple(out.shape)} result, wider than {limit}"
                    raise ForbiddenCall(watch.hit)
                return out

        self.mode = Mode()

    def __enter__(self):
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        self.mode.__exit__(*exc)


def _square_cases():
    g = torch.Generator().manual_seed(3)
    for n in (4, 8):
        yield {"x": torch.randn(n, n, generator=g, dtype=torch.float64)}


@exercise(reference=lambda x: x @ x, cases=_square_cases, rules=Rules(watch=_NoProductWiderThanHalf))
def check_square_by_halves(square):
    """Check ``square(x) = x @ x``, every product at most half as wide as ``x``."""


def _by_halves(x):
    h = x.shape[0] // 2
    top, bottom = x[:h], x[h:]
    return torch.cat(
        [torch.cat([top @ x[:, :h], top @ x[:, h:]], 1), torch.cat([bottom @ x[:, :h], bottom @ x[:, h:]], 1)]
    )


def _whole_but_caught(x):  # the refusal raised inside the answer, caught there: still reported
    try:
        return x @ x
    except Exception:
        return _by_halves(x)


def test_a_watch_judges_what_the_answer_runs_at_the_cases_size(capsys):
    assert check_square_by_halves(_by_halves) is True
    with pytest.raises(CheckFailed, match=r"square_by_halves: multiplied into a \(4, 4\) result, wider than 2"):
        check_square_by_halves(lambda x: x @ x)
    with pytest.raises(CheckFailed, match=r"square_by_halves: multiplied into a \(4, 4\) result, wider than 2"):
        check_square_by_halves(_whole_but_caught)


# -- a rule read from the answer's source: Rules.source ----------------------------------------------------------------


def _no_cumsum_in_source(answer):
    import inspect

    return "it spells cumsum, which the exercise rules out" if "cumsum" in inspect.getsource(answer) else None


@exercise(reference=_prefix_reference, cases=_prefix_cases, rules=Rules(source=_no_cumsum_in_source))
def check_prefix_sum_by_hand(prefix_sum):
    """Check ``prefix_sum(x)``, written without ``cumsum``."""


def _by_cumsum(x):
    return torch.cumsum(x, dim=0)


def _by_cumsum_but_wrong(x):
    return torch.cumsum(x, dim=0) + 1


def test_a_source_rule_is_reported_once_the_values_agree(capsys):
    assert check_prefix_sum_by_hand(_linear) is True
    with pytest.raises(CheckFailed, match=r"^prefix_sum_by_hand: it spells cumsum, which the exercise rules out$"):
        check_prefix_sum_by_hand(_by_cumsum)
    with pytest.raises(CheckFailed, match=r"prefix_sum_by_hand: wrong values"):  # a wrong answer is shown as wrong
        check_prefix_sum_by_hand(_by_cumsum_but_wrong)

"""The counted and watched rules cannot be hidden from (breaks C5/C6): work run while the check's dispatch modes are
off (torch's own helpers take them off and put them back) is refused, in the student's kernel here and in the engine
(test_rules_in_the_engine.py). Each door has its answer: a loop over t that re-reads the whole prefix (T² work, which
2.1's work rule refuses when it is seen) with that prefix's products run behind the door."""

import threading

import pytest
import torch
import torch.utils._python_dispatch as python_dispatch

from tests.checks.test_adaptive_and_deep_memories import momentum_by_finite_differences
from ttr_edu.checks import adaptive_and_deep_memories as ch08
from ttr_edu.checks import linear_attention_is_fwp as ch02
from ttr_edu.checks._core import CheckFailed
from ttr_edu.checks._witness import Witness

# references taken before the check starts: replacing the helpers in their modules does not reach these
DISABLE_CURRENT_MODES = python_dispatch._disable_current_modes
POP_MODE_TEMPORARILY = python_dispatch._pop_mode_temporarily
DISABLE_TORCH_DISPATCH = torch._C._DisableTorchDispatch
POP_STACK, PUSH_STACK = torch._C._pop_torch_dispatch_stack, torch._C._push_on_torch_dispatch_stack
DISABLE_PROFILER = torch._C._autograd._disable_profiler


def _prefix(q, k, v, t):
    return (k[: t + 1] @ q[t]) @ v[: t + 1]  # every earlier key and value again: no state, T² in all


def _behind(door):
    def fast_weight_recurrence(q, k, v):
        return torch.stack([door(lambda: _prefix(q, k, v, t)) * 1.0 for t in range(q.shape[0])])

    return fast_weight_recurrence


def _in(context):
    def run(fn):
        if not torch._C._len_torch_dispatch_stack():  # a case that is not counted: nothing to hide from
            return fn()
        with context():
            return fn()

    return run


def _all_popped(fn):
    popped = [POP_STACK(None) for _ in range(torch._C._len_torch_dispatch_stack())]
    try:
        return fn()
    finally:
        for mode in reversed(popped):
            PUSH_STACK(mode)


def _in_a_thread(fn):  # a new thread starts with an empty mode stack
    out = []
    worker = threading.Thread(target=lambda: out.append(fn()))
    worker.start()
    worker.join()
    return out[0]


def _profiler_stopped(fn):
    DISABLE_PROFILER()
    return fn()


def _function_modes_off(fn):  # the values moved to NumPy where the work rule's torch-function mode is off
    with torch._C.DisableTorchFunction():
        return fn()


DOORS = {
    "_disable_current_modes": _in(DISABLE_CURRENT_MODES),
    "_disable_current_modes, looked up late": _in(lambda: python_dispatch._disable_current_modes()),
    "_pop_mode_temporarily": _in(POP_MODE_TEMPORARILY),
    "_DisableTorchDispatch": _in(DISABLE_TORCH_DISPATCH),
    "the C stack popped and pushed back": _all_popped,
    "a thread": _in_a_thread,
    "the profiler stopped": _profiler_stopped,
    "DisableTorchFunction": _function_modes_off,
}


@pytest.mark.parametrize("door", DOORS)
def test_work_behind_a_door_is_refused_by_the_work_count(door):
    # 2.1's first case is watched (the peak-held watch) before the cases whose work is counted: either refuses it
    with pytest.raises(CheckFailed, match="while the check (counts|watches) its torch operations"):
        ch02.check_fast_weight_recurrence(_behind(DOORS[door]))


def test_the_same_work_in_the_open_is_refused_for_its_growth():  # the door, not the rule, is what the tests above see
    with pytest.raises(CheckFailed, match=r"grows like T\^1\.9"):
        ch02.check_fast_weight_recurrence(_behind(lambda fn: fn()))


def test_finite_differences_behind_the_mode_switch_are_refused_by_the_watch():
    def momentum_step(S, U, k, v, beta, eta, alpha):
        if not torch._C._len_torch_dispatch_stack():
            return momentum_by_finite_differences(S, U, k, v, beta, eta, alpha)
        with DISABLE_CURRENT_MODES():
            return momentum_by_finite_differences(S, U, k, v, beta, eta, alpha)

    with pytest.raises(CheckFailed, match="while the check watches its torch operations"):
        ch08.check_momentum_step(momentum_step)


def test_a_right_answer_that_pushes_and_pops_a_mode_of_its_own_passes(capsys):
    class Plain(python_dispatch.TorchDispatchMode):
        @classmethod
        def _should_skip_dynamo(cls):
            return False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    def fast_weight_recurrence(q, k, v):
        with Plain():
            S = torch.zeros(k.shape[1], v.shape[1], dtype=q.dtype)
            rows = []
            for t in range(q.shape[0]):
                S = S + torch.outer(k[t], v[t])
                rows.append(q[t] @ S)
            return torch.stack(rows)

    assert ch02.check_fast_weight_recurrence(fast_weight_recurrence)
    assert "PASS" in capsys.readouterr().out


def test_the_witness_passes_plain_work_and_names_unseen_work():
    x = torch.randn(8, 8)
    with Witness() as seen:
        x @ x
    assert seen.hit is None
    with Witness() as unseen:
        with DISABLE_TORCH_DISPATCH():
            x @ x
    assert unseen.hit is not None and "mm" in unseen.hit


def test_building_a_tensor_from_numbers_and_printing_one_are_no_escape():
    """``torch.tensor(data)`` runs a ``detach_`` below the modes (torch builds the tensor with the Python key
    excluded), and printing a tensor takes the modes off around its formatting: neither is work hidden from the check.
    An answer that does either is not refused for it; printing's reads then pass the check's modes."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from ttr_edu.checks._witness import Witness

    seen: list[str] = []

    class Counter(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    x = torch.randn(3, 3)
    for answer in (
        lambda: torch.tensor([[1.0, 2.0], [3.0, 4.0]]) @ x[:2, :2],
        lambda: torch.tensor(x.tolist()) + 1,
        lambda: (repr(x), x + 1)[1],
        lambda: (f"{x}", x * 2)[1],
    ):
        seen.clear()
        with Counter():
            witness = Witness()
            with witness:
                answer()
        assert witness.hit is None, witness.hit
        assert seen  # the counter below saw the answer's operations

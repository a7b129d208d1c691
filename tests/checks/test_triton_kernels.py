"""The Triton chapter's puzzle checks accept correct kernels, reject plausible wrong ones (including the GPU-only bugs
the interpreter hides: plain-tf32 products, masked loads without ``other=``, wild addresses) and report unsolved
stubs."""

import pytest

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from ttr_edu.checks import CheckFailed  # noqa: E402
from ttr_edu.checks import triton_kernels as checks  # noqa: E402

if type(triton.jit(lambda: None)).__name__ != "InterpretedFunction":
    pytest.skip("the puzzles run in Triton's interpreter (TRITON_INTERPRET=1)", allow_module_level=True)

from tests.checks.triton_puzzle_kernels import Bound as _Bound  # noqa: E402
from tests.checks.triton_puzzle_kernels import (  # noqa: E402  (the reference and wrong kernels, after the interpreter check)
    causal_chunk,
    chunk_linear_attention,
    delta_rule_chunk,
    running_sum,
    scale_tile,
    scale_tile_first_rows_only,
    scale_tile_not_power_of_two,
    scale_tile_row_loop,
    scale_tile_row_stride_block,
    scale_tile_store_unmasked,
    ut_transform,
)


class Bound(_Bound):
    """A bound kernel that the checks treat as interpreted (its kernel is, in this module)."""


def test_solutions_pass(capsys):
    assert checks.check_scale_tile(scale_tile)
    assert checks.check_causal_chunk(causal_chunk)
    assert checks.check_chunk_linear_attention(chunk_linear_attention)
    assert checks.check_ut_transform(ut_transform)
    assert checks.check_running_sum(running_sum)
    assert checks.check_delta_rule_chunk(delta_rule_chunk)
    assert capsys.readouterr().out.count("PASS") == 6


Bound.__name__ = "InterpretedFunction"  # the checks run these wrappers in the interpreter, by this name


@pytest.mark.parametrize("wrong", [scale_tile_store_unmasked, scale_tile_row_stride_block])
def test_write_outside_the_output_is_reported(wrong):
    with pytest.raises(CheckFailed, match="wrote .* outside `out`"):
        checks.check_scale_tile(wrong)


@pytest.mark.parametrize(
    "check, wrong",
    [
        (checks.check_scale_tile, scale_tile_first_rows_only),
        (checks.check_causal_chunk, Bound(causal_chunk, STRICT=True)),
        (checks.check_chunk_linear_attention, Bound(chunk_linear_attention, STATE_FIRST=True)),
        (checks.check_ut_transform, Bound(ut_transform, FORGET_BETA=True)),
        (checks.check_running_sum, Bound(running_sum, NO_CARRY=True)),
        (checks.check_delta_rule_chunk, Bound(delta_rule_chunk, NO_WS=True)),
        (checks.check_delta_rule_chunk, Bound(delta_rule_chunk, NO_S0=True)),
    ],
    ids=[
        "rows not offset by program",
        "strict mask",
        "state updated first",
        "no diag(beta)",
        "no carry",
        "pseudo-values without -WS",
        "initial state ignored",
    ],
)
def test_wrong_kernels_show_the_first_wrong_element(check, wrong):
    with pytest.raises(CheckFailed, match="first wrong element"):
        check(wrong)


def test_unsolved_kernel_is_reported_not_raised(capsys):
    @triton.jit
    def stub(x_ptr, out_ptr, T, D, scale, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
        raise NotImplementedError()

    assert checks.check_scale_tile(stub) is False
    assert "not attempted yet" in capsys.readouterr().out


@pytest.mark.parametrize(
    "check, wrong, message",
    [
        (checks.check_running_sum, Bound(running_sum, TIME_STRIDE_D=True), "first wrong element|outside"),
        (checks.check_delta_rule_chunk, Bound(delta_rule_chunk, FIRST_BLOCK=True), "first wrong element"),
    ],
    ids=["time stride D instead of H*D", "second grid axis ignored"],
)
def test_wrong_strides_and_grids_are_rejected(check, wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check(wrong)


def test_wild_stride_is_stopped_before_the_access_and_named():
    # Without the bounds check this kernel reads and writes megabytes past its tensors: garbage, or a dead process.
    with pytest.raises(CheckFailed, match="outside every tensor it was given.*`x`|outside every tensor.*`out`"):
        checks.check_running_sum(Bound(running_sum, WILD=True))


@pytest.mark.parametrize(
    "check, wrong",
    [
        (checks.check_causal_chunk, Bound(causal_chunk, DEFAULT_PRECISION=True)),
        (checks.check_delta_rule_chunk, Bound(delta_rule_chunk, PRECISION="tf32")),
    ],
    ids=["causal chunk", "delta rule"],
)
def test_plain_tf32_dot_fails_as_on_a_gpu(check, wrong):
    with pytest.raises(CheckFailed, match="wrong values"):
        check(wrong)


def test_tf32x3_dot_passes(capsys):
    assert checks.check_delta_rule_chunk(Bound(delta_rule_chunk, PRECISION="tf32x3"))


def test_masked_load_without_other_fails_when_the_lanes_enter_a_product():
    with pytest.raises(CheckFailed, match="wrong values"):
        checks.check_causal_chunk(Bound(causal_chunk, NO_OTHER=True))


def test_masked_load_without_other_passes_when_the_lanes_are_never_used():
    # scale_tile loads without other= and stores with the same mask: correct on a GPU, so it must pass here too
    assert checks.check_scale_tile(scale_tile)


def test_scalar_mask_kernel_passes():
    # a block mask combined with a scalar comparison compiles for a GPU; the bare interpreter refuses it
    assert checks.check_scale_tile(scale_tile_row_loop)


def test_other_interpreter_errors_become_an_actionable_check_failure():
    with pytest.raises(CheckFailed, match="interpreter stopped your kernel.*line of your kernel"):
        checks.check_scale_tile(scale_tile_not_power_of_two)


def test_a_compiled_kernel_without_a_gpu_says_how_to_turn_on_the_interpreter(monkeypatch):
    class Compiled:  # what @triton.jit returns without TRITON_INTERPRET
        pass

    monkeypatch.setattr(checks.torch.cuda, "is_available", lambda: False)
    with pytest.raises(CheckFailed, match="TRITON_INTERPRET.*re-run the cell that defines the kernel"):
        checks.check_scale_tile(Compiled())


def test_the_interpreter_is_restored_after_a_check():
    from triton.runtime import interpreter

    checks.check_scale_tile(scale_tile)
    assert not {"create_masked_load", "create_masked_store", "create_dot"} & set(vars(interpreter.interpreter_builder))

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
    causal_chunk_allow_tf32_false,
    causal_chunk_allow_tf32_true,
    causal_chunk_default_precision,
    causal_chunk_positional_precision,
    chunk_dv,
    chunk_linear_attention,
    chunk_linear_attention_outer_dot,
    delta_rule_chunk,
    delta_rule_chunk_int32_inputs,
    delta_rule_chunk_reassigned,
    gated_delta_rule_chunk,
    running_sum,
    running_sum_batch_widened,
    running_sum_block_pointers,
    running_sum_cast,
    running_sum_helper_int32,
    running_sum_helper_int64,
    running_sum_int32,
    running_sum_promoted,
    running_sum_promoted_by_name,
    running_sum_promoted_too_late,
    running_sum_reassigned,
    running_sum_wide_size,
    running_sum_widened_too_late,
    scale_tile,
    scale_tile_first_rows_only,
    scale_tile_not_power_of_two,
    scale_tile_row_loop,
    scale_tile_row_stride_block,
    scale_tile_store_unmasked,
    ut_transform,
    ut_transform_horner,
    ut_transform_neumann,
    ut_transform_neumann_float64,
)


class Bound(_Bound):
    """A bound kernel that the checks treat as interpreted (its kernel is, in this module)."""


@pytest.mark.slow  # minutes in the Triton interpreter on a loaded CPU; the quick loop skips it
def test_solutions_pass(capsys):
    assert checks.check_scale_tile(scale_tile)
    assert checks.check_causal_chunk(causal_chunk)
    assert checks.check_chunk_linear_attention(chunk_linear_attention)
    assert checks.check_ut_transform(ut_transform)
    assert checks.check_running_sum(running_sum)
    assert checks.check_delta_rule_chunk(delta_rule_chunk)
    assert checks.check_gated_delta_rule_chunk(gated_delta_rule_chunk)
    assert checks.check_chunk_dv(chunk_dv)
    assert capsys.readouterr().out.count("PASS") == 8


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


def test_block_pointers_are_named_not_taken_for_the_stub(capsys):
    """Review r35h: Triton's own NotImplementedError (make_block_ptr in 3.9) read as the stub's, "not attempted yet"."""
    with pytest.raises(
        CheckFailed,
        match=r"calls tl\.make_block_ptr: Triton has removed block pointers in favour of tensor descriptors",
    ):
        checks.check_running_sum(running_sum_block_pointers)
    assert "not attempted" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "check, wrong, message",
    [
        (checks.check_running_sum, Bound(running_sum, TIME_STRIDE_D=True), "first wrong element|outside"),
        pytest.param(
            checks.check_delta_rule_chunk,
            Bound(delta_rule_chunk, FIRST_BLOCK=True),
            "first wrong element",
            marks=pytest.mark.slow,  # the delta-rule kernel in the Triton interpreter: tens of seconds
        ),
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
        (checks.check_causal_chunk, causal_chunk_default_precision),
        (checks.check_delta_rule_chunk, Bound(delta_rule_chunk, PRECISION="tf32")),
    ],
    ids=["causal chunk", "delta rule"],
)
def test_plain_tf32_dot_fails_as_on_a_gpu(check, wrong):
    # the failure says why: its error is the size of TF32 rounding, and ieee products are the fix
    with pytest.raises(CheckFailed, match=r"(?s)wrong values.*size of TF32 rounding.*input_precision=\"ieee\""):
        check(wrong)


def test_the_tf32_note_is_only_for_errors_of_tf32_size():
    """A wrong kernel far off (a missing mask) or a float64 case gets no TF32 note: the hint names a cause only where
    the error's size fits it."""
    import torch

    from ttr_edu.checks.triton_kernels import _tf32_note, causal_chunk_spec

    g = torch.Generator().manual_seed(0)
    case = {name: torch.randn(8, 4, generator=g) for name in ("q", "k", "v")}
    want = causal_chunk_spec(**case)
    explain = _tf32_note(causal_chunk_spec)
    assert "TF32" in explain("", case, want * (1 + 3e-4))
    assert explain("", case, want * 1.5) == ""
    assert explain("", {k: v.double() for k, v in case.items()}, want.double() * (1 + 3e-4)) == ""


@pytest.mark.slow  # tens of seconds in the Triton interpreter on a loaded CPU; the quick loop skips it
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
    class Compiled:  # what @triton.jit returns without TRITON_INTERPRET: callable, launched as kernel[grid](...)
        def __call__(self, *args, **kwargs):
            raise RuntimeError("Cannot call @triton.jit'd outside of the scope of a kernel")

    monkeypatch.setattr(checks.torch.cuda, "is_available", lambda: False)
    with pytest.raises(CheckFailed, match="TRITON_INTERPRET.*re-run the cell that defines the kernel"):
        checks.check_scale_tile(Compiled())


def test_the_interpreter_is_restored_after_a_check():
    from triton.runtime import interpreter

    checks.check_scale_tile(scale_tile)
    assert not {"create_masked_load", "create_masked_store", "create_dot"} & set(vars(interpreter.interpreter_builder))
    assert interpreter.interpreter_builder.codegen_fns["min_dot_size"](tl.float32, tl.float32) == (1, 1, 1)


def test_a_dot_below_the_gpus_minimum_size_fails_as_it_fails_to_compile():
    # review: k vᵀ as tl.dot(k[:, None], v[None, :]) (inner size 1) passed 12.3 in the interpreter, whose minimum is
    # 1 x 1 x 1, but compiling it for sm_90 stops with "Input shapes should have M >= 1, N >= 1 and K >= 8"; the check
    # now hands the interpreter the NVIDIA backend's minimum, so Triton's own assertion refuses it
    with pytest.raises(
        CheckFailed,
        match=r"smaller than a GPU compiles: Triton says \"Input shapes should have M >= 1, "
        r"N >= 1 and K >= 8\".*k\[:, None\] \* v\[None, :\]",
    ):
        checks.check_chunk_linear_attention(chunk_linear_attention_outer_dot)


def test_the_minimum_dot_size_is_the_nvidia_backends_with_or_without_it(monkeypatch):
    import sys

    from ttr_edu.checks._triton_sanitizer import gpu_min_dot_size

    sizes = {
        name: gpu_min_dot_size()(dtype, dtype)
        for name, dtype in [("fp32", tl.float32), ("bf16", tl.bfloat16), ("fp8", tl.float8e4nv), ("fp64", tl.float64)]
    }
    assert sizes == {"fp32": (1, 1, 8), "bf16": (1, 1, 16), "fp8": (1, 1, 32), "fp64": (1, 1, 4)}
    monkeypatch.setitem(sys.modules, "triton.backends.nvidia.compiler", None)  # a Triton without its CUDA backend
    assert {
        name: gpu_min_dot_size()(d, d)
        for name, d in [("fp32", tl.float32), ("bf16", tl.bfloat16), ("fp8", tl.float8e4nv), ("fp64", tl.float64)]
    } == sizes


class _IgnoresG(_Bound):
    """Puzzle 12.6's kernel launched with the gated puzzle's arguments: the g pointer is dropped."""

    def __init__(self):
        super().__init__(delta_rule_chunk)

    def __getitem__(self, grid):
        def launch(q, k, v, beta, g, o, s0, s, *rest, **constants):
            return delta_rule_chunk[grid](q, k, v, beta, o, s0, s, *rest, **constants)

        return launch


delta_rule_chunk_ignoring_g = _IgnoresG()


@pytest.mark.parametrize(
    "check, wrong",
    [
        (checks.check_gated_delta_rule_chunk, Bound(gated_delta_rule_chunk, NO_STATE_DECAY=True)),
        (checks.check_gated_delta_rule_chunk, Bound(gated_delta_rule_chunk, NO_DECAY_IN_A=True)),
        (checks.check_gated_delta_rule_chunk, Bound(gated_delta_rule_chunk, NO_QUERY_DECAY=True)),
        (checks.check_gated_delta_rule_chunk, Bound(gated_delta_rule_chunk, SUM_NOT_CUMSUM=True)),
        (checks.check_gated_delta_rule_chunk, Bound(delta_rule_chunk_ignoring_g)),
        (checks.check_chunk_dv, Bound(chunk_dv, NO_DS=True)),
        (checks.check_chunk_dv, Bound(chunk_dv, UT_NOT_TRANSPOSED=True)),
        (checks.check_chunk_dv, Bound(chunk_dv, STRICT=True)),
        (checks.check_chunk_dv, Bound(chunk_dv, P_NOT_TRANSPOSED=True)),
    ],
    ids=[
        "gate: state not decayed",
        "gate: no decay inside A",
        "gate: QS not decayed",
        "gate: chunk total instead of the running sum",
        "gate: ignored (puzzle 12.6's kernel)",
        "dV: no dS term",
        "dV: 𝒯 where 𝒯ᵀ belongs",
        "dV: strict mask",
        "dV: P where Pᵀ belongs",
    ],
)
def test_wrong_gated_and_backward_kernels_are_rejected(check, wrong):
    with pytest.raises(CheckFailed, match="first wrong element"):
        check(wrong)


def test_a_dot_without_input_precision_is_named_by_the_lint():
    # tf32 already fails the numbers; the lint names the line, whatever the numbers say
    problems = checks.lint_kernel(causal_chunk_default_precision, needs_int64=False)
    assert len(problems) == 2 and all("input_precision" in p for p in problems)


def test_offsets_left_in_int32_are_reported_although_the_numbers_agree(capsys):
    with pytest.raises(CheckFailed, match="(?s)right numbers here.*in int32: `i_b`, `i_h` \\(from a program id\\)"):
        checks.check_running_sum(running_sum_int32)
    assert "PASS" not in capsys.readouterr().out  # the source is read before PASS: no PASS line beside the failure


def test_the_reference_kernels_pass_the_lint():
    for kernel, needs_int64 in [
        (causal_chunk, False),
        (running_sum, True),
        (delta_rule_chunk, True),
        (gated_delta_rule_chunk, True),
        (chunk_dv, False),
    ]:
        assert checks.lint_kernel(kernel, needs_int64=needs_int64) == []


def test_widening_only_the_state_offsets_is_reported():
    # i_bh widened for the state, i_b and i_h left int32 in the offsets of q, k, v, o and β: the numbers agree here,
    # and the lint names the int32 product in the inputs' offsets (a check that only asked "is some program id
    # widened?" passed this kernel)
    with pytest.raises(CheckFailed, match=r"(?s)right numbers here.*in int32: `i_b`, `i_h` \(from a program id\)"):
        checks.check_delta_rule_chunk(delta_rule_chunk_int32_inputs)


def test_a_head_offset_left_int32_beside_a_widened_batch_is_not_reported(capsys):
    # i_h * D is at most H * D: only the batch index needs int64 there
    assert checks.check_running_sum(running_sum_batch_widened)
    assert capsys.readouterr().out.startswith("PASS")


def test_the_package_kernel_passes_the_lint():
    from ttr_edu.kernels import _triton_kernels

    assert checks.lint_kernel(_triton_kernels.delta_rule_fwd_kernel, needs_int64=True) == []


@pytest.mark.parametrize(
    "kernel",
    [causal_chunk_allow_tf32_false, causal_chunk_positional_precision],
    ids=["allow_tf32=False", "input_precision positional"],
)
def test_every_spelling_of_an_accurate_product_passes(kernel, capsys):
    # fla writes tl.dot(..., allow_tf32=False); Triton 3.9 maps it to "ieee", as it does a positional "ieee"
    assert checks.check_causal_chunk(kernel)
    assert capsys.readouterr().out.startswith("PASS")


def test_allow_tf32_true_is_named_as_a_request_for_tf32():
    problems = checks.lint_kernel(causal_chunk_allow_tf32_true, needs_int64=False)
    assert len(problems) == 2 and all("asks for tf32 (allow_tf32=True)" in p for p in problems)
    with pytest.raises(CheckFailed):  # and the numbers, rounded to tf32 as on a GPU, fail before the lint
        checks.check_causal_chunk(causal_chunk_allow_tf32_true)


@pytest.mark.parametrize(
    "kernel",
    [running_sum_cast, running_sum_wide_size, running_sum_reassigned, running_sum_helper_int64],
    ids=["tl.cast", "widened size", "i_b = i_b.to(tl.int64) on the next line", "int64 index handed to a helper"],
)
def test_every_spelling_of_int64_offsets_passes(kernel, capsys):
    assert checks.check_running_sum(kernel)
    assert capsys.readouterr().out.startswith("PASS")


def test_the_neumann_series_by_doubling_fails_on_correlated_keys_and_by_horners_rule_passes(capsys):
    # by doubling: exact on near-orthogonal keys, but its powers grow far beyond the inverse once the keys are
    # correlated. By Horner's rule (review r35b) the same series is forward substitution's arithmetic: it passes, as
    # 12.4's text and the Go further say
    with pytest.raises(CheckFailed, match="first wrong element"):
        checks.check_ut_transform(ut_transform_neumann)
    capsys.readouterr()
    assert checks.check_ut_transform(ut_transform_horner)
    assert capsys.readouterr().out.startswith("PASS")


def test_a_kernel_whose_source_cannot_be_read_does_not_pass():
    # the interpreter runs a kernel without its source; a rule read from the source must then fail, not find nothing
    import inspect
    import textwrap

    namespace = {"triton": triton, "tl": tl}
    source = textwrap.dedent(inspect.getsource(running_sum.fn))
    exec(compile(source, "<a cell no cache kept>", "exec"), namespace)
    with pytest.raises(CheckFailed, match="cannot read your kernel's source"):
        checks.check_running_sum(namespace["running_sum"])


# The wrong kernels a reader tried on 12 that no other test here writes (the rest are above): low-precision operands
# and a tf32 product asked for by name (12.2), the decay forgotten in one more place (12.7), dV without β (12.8).
REVIEW_WRONG = [
    ("12.2 fp16 operands", checks.check_causal_chunk, Bound(causal_chunk, OPERANDS="fp16")),
    ("12.2 bf16 operands", checks.check_causal_chunk, Bound(causal_chunk, OPERANDS="bf16")),
    ('12.2 input_precision="tf32" by name', checks.check_causal_chunk, Bound(causal_chunk, PRECISION="tf32")),
    (
        "12.7 no decay on the scores",
        checks.check_gated_delta_rule_chunk,
        Bound(gated_delta_rule_chunk, NO_SCORE_DECAY=True),
    ),
    ("12.7 W without diag(γ)", checks.check_gated_delta_rule_chunk, Bound(gated_delta_rule_chunk, W_UNDECAYED=True)),
    (
        "12.7 keys not decayed to the chunk's end",
        checks.check_gated_delta_rule_chunk,
        Bound(gated_delta_rule_chunk, NO_KEY_DECAY=True),
    ),
    ("12.8 no β", checks.check_chunk_dv, Bound(chunk_dv, NO_BETA=True)),
]


@pytest.mark.parametrize("label,check,wrong", REVIEW_WRONG, ids=[w[0] for w in REVIEW_WRONG])
def test_the_reviews_wrong_kernels_fail_with_their_case(label, check, wrong):
    with pytest.raises(CheckFailed, match=r"inputs: "):
        check(wrong)


def test_bfloat16_tiles_are_multiplied_by_their_values_not_their_bits():
    # review: the interpreter's tl.dot multiplied bfloat16 bit patterns, "relative error 5.52e+08"; a GPU's bfloat16
    # products are about 1e-2 off, and the check now says so
    import numpy as np

    from ttr_edu.checks._triton_sanitizer import bf16_bits_to_fp32

    values = np.array([1.0, -2.5, 0.15625, 2.0**100], dtype=np.float32)  # exact in bfloat16
    assert np.array_equal(bf16_bits_to_fp32((values.view(np.uint32) >> 16).astype(np.uint16)), values)
    with pytest.raises(CheckFailed, match=r"relative error (\d\.\d+e-0[23]|0\.0\d+)\)") as failure:
        checks.check_causal_chunk(Bound(causal_chunk, OPERANDS="bf16"))
    assert float(str(failure.value).split("relative error ")[1].split(")")[0]) < 0.1


def test_a_name_widened_by_reassignment_is_int64_from_that_line_on():
    # review r35f: `i_bh = i_bh.to(tl.int64)` (12.6) and `i_b = i_b.to(tl.int64)` (12.5) were read as int32
    # everywhere, because the lint joined every assignment of a name; it now reads the one that reaches each line
    assert checks.lint_kernel(delta_rule_chunk_reassigned, needs_int64=True) == []
    assert checks.lint_kernel(running_sum_reassigned, needs_int64=True) == []


@pytest.mark.slow  # the delta-rule kernel in the Triton interpreter: tens of seconds
def test_the_delta_rule_kernel_widened_by_reassignment_passes(capsys):
    assert checks.check_delta_rule_chunk(delta_rule_chunk_reassigned)
    assert capsys.readouterr().out.startswith("PASS")


def test_a_widening_after_the_product_is_still_reported():
    # the same reassignment one line too late: the offset was already multiplied in int32
    with pytest.raises(
        CheckFailed, match=r"(?s)right numbers here.*`\(i_b \* T \* H \+ i_h\) \* D` \(line 7\) in int32"
    ):
        checks.check_running_sum(running_sum_widened_too_late)


def test_int32_offsets_computed_in_a_helper_are_reported():
    # review r35f: the product sat in a @triton.jit helper, and one unrelated widening (the column block) switched off
    # the "nothing widened" fallback; the lint now reads the helper with the caller's arguments bound
    with pytest.raises(CheckFailed, match=r"(?s)right numbers here.*line 3 of the helper `_head_offset`\) in int32"):
        checks.check_running_sum(running_sum_helper_int32)


def test_an_address_from_a_helper_the_lint_cannot_read_is_reported():
    import inspect
    import textwrap

    import tests.checks.triton_puzzle_kernels as kernels

    namespace = {"triton": triton, "tl": tl}
    exec(compile(textwrap.dedent(inspect.getsource(kernels._head_offset.fn)), "<no file>", "exec"), namespace)
    namespace["running_sum_helper_int32"] = kernels.running_sum_helper_int32.fn
    original = kernels.running_sum_helper_int32.fn.__globals__["_head_offset"]
    kernels.running_sum_helper_int32.fn.__globals__["_head_offset"] = namespace["_head_offset"]
    try:
        problems = checks.lint_kernel(running_sum_helper_int32, needs_int64=True)
    finally:
        kernels.running_sum_helper_int32.fn.__globals__["_head_offset"] = original
    assert any("`_head_offset(...)`, which the check cannot read" in p for p in problems), problems


def test_the_lint_does_not_call_fp64_products_tf32():
    # review r35f: fp64 tiles have no tf32 mode (Triton ignores the option for them); fp32 ones without a precision
    # are still named, as "fp32 tiles ... tf32"
    assert checks.lint_kernel(ut_transform_neumann_float64, needs_int64=False) == []
    problems = checks.lint_kernel(causal_chunk_default_precision, needs_int64=False)
    assert all("fp32 tiles are then multiplied in tf32" in p for p in problems)


def test_a_default_precision_kkt_in_12_4_gets_the_tf32_note():
    with pytest.raises(CheckFailed, match=r"(?s)wrong values.*size of TF32 rounding"):
        checks.check_ut_transform(Bound(ut_transform, PRECISION="tf32"))


def test_the_12_4_correlated_case_measures_substitution_well_inside_and_neumann_far_outside_the_tolerance():
    # the numbers check_ut_transform's docstring and puzzle 12.4's text state: substitution under 0.2 of the
    # tolerance, doubling over 10 times (per entry, |got - want| / (atol + rtol |want|))
    from ttr_edu.checks.chunkwise_algorithms import ut_transform_spec

    case = list(checks._ut_transform_cases())[-1]
    assert checks._mean_key_cosine(case) > 0.98
    want = ut_transform_spec(**case)

    def worst(kernel):
        got = checks._launch_ut_transform(kernel, case)
        return float(((got - want).abs() / (1e-6 + 1e-5 * want.abs())).max())

    assert worst(Bound(ut_transform)) < 0.2
    assert worst(Bound(ut_transform_neumann)) > 10


@pytest.mark.slow  # the delta-rule kernels in the Triton interpreter: tens of seconds each
@pytest.mark.parametrize(
    "check, wrong",
    [
        (checks.check_delta_rule_chunk, Bound(delta_rule_chunk, NEUMANN=True)),
        (checks.check_gated_delta_rule_chunk, Bound(gated_delta_rule_chunk, NEUMANN=True)),
    ],
    ids=["12.6", "12.7"],
)
def test_an_inverse_by_neumann_doubling_fails_the_assembled_kernels_on_correlated_keys(check, wrong):
    # review r35f: 12.6 and 12.7 had no correlated chunk, so the inverse cell 17 warns against passed them
    with pytest.raises(CheckFailed, match=r"(?s)first wrong element.*keys are correlated \(mean cosine 0\.99"):
        check(wrong)


@pytest.mark.slow  # the gated kernel in the Triton interpreter over every case: tens of seconds each
def test_a_decay_that_multiplies_by_a_0_1_mask_fails_the_strong_decay_case_and_a_where_passes(capsys):
    # review: decay = exp(G_i − G_j) · mask, with no tl.where on the scores, passed while every gate spanned at most
    # about 8 nats per chunk; at 120 nats exp overflows above the diagonal and inf · 0 is NaN. Leaving the exponent
    # unmasked is right when a tl.where selects the result (fla's output kernel does), so that passes
    with pytest.raises(CheckFailed, match=r"(?s)first wrong element.*spans 120 nats.*never multiply an exponential"):
        checks.check_gated_delta_rule_chunk(Bound(gated_delta_rule_chunk, MASK_BY_PRODUCT=True))
    capsys.readouterr()
    assert checks.check_gated_delta_rule_chunk(Bound(gated_delta_rule_chunk, UNMASKED_EXPONENT=True))
    assert capsys.readouterr().out.startswith("PASS")


def test_the_strong_decay_case_overflows_an_unmasked_exponent_and_the_solution_matches_it():
    # the case the test above rests on: its exponent reaches 120 nats inside a chunk (exp overflows fp32 past 88.7),
    # while the solution stays at fp32 rounding on it
    import torch

    case = list(checks._gated_delta_rule_chunk_cases())[-1]
    G = case["g"][0, :16, 0].cumsum(0)
    assert float(G[0] - G[-1]) > checks.FP32_EXP_LIMIT + 30
    assert torch.isinf(torch.exp(G[:, None] - G[None, :])).any()
    got = checks._launch_delta_rule(Bound(gated_delta_rule_chunk), case)
    want = checks.gated_delta_rule_chunk_spec(**case)
    assert all(torch.isfinite(w).all() and ((x - w).norm() / w.norm()) < 1e-6 for x, w in zip(got, want))


@pytest.mark.parametrize(
    "kernel", [running_sum_promoted, running_sum_promoted_by_name], ids=["+ tl.zeros int64", "named tl.full int64"]
)
def test_int64_by_type_promotion_passes(kernel, capsys):
    # review: i_bh // H + tl.zeros([], dtype=tl.int64) is int64 by Triton's promotion rules; the lint called it int32
    assert checks.lint_kernel(kernel, needs_int64=True) == []
    assert checks.check_running_sum(kernel)
    assert capsys.readouterr().out.startswith("PASS")


def test_an_int64_zero_added_after_the_product_is_still_reported():
    with pytest.raises(
        CheckFailed, match=r"(?s)right numbers here.*`\(i_b \* T \* H \+ i_h\) \* D` \(line 8\) in int32"
    ):
        checks.check_running_sum(running_sum_promoted_too_late)

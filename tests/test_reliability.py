"""Regression tests for bad inputs and broken numerics that readers once found: every bad input is now refused by
name, warned about, or computed right, and the numerics stay finite.

Each test restates one reproducer (named in its docstring) in this project's words. The input policy itself is in
``ttr_edu/_internal/validation.py`` and CONTRIBUTING.md; ``tests/test_fuzz_public_api.py`` checks it on every public
callable.
"""

import math
import re
import warnings

import pytest
import torch

import ttr_edu
from ttr_edu import layers, ops
from ttr_edu.checks import CheckFailed
from ttr_edu.checks._core import relative_error
from ttr_edu.checks._rules import run_check
from ttr_edu.tasks import images, mqar


def qkv(B=1, T=8, H=1, D=4, D_v=None, seed=0, dtype=torch.float32, unit_keys=True):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, D, generator=gen, dtype=torch.float64)
    k = torch.randn(B, T, H, D, generator=gen, dtype=torch.float64)
    k = ops.l2_norm(k) if unit_keys and D else k
    v = torch.randn(B, T, H, D_v or D, generator=gen, dtype=torch.float64)
    return q.to(dtype), k.to(dtype), v.to(dtype)


# ------------------------------------------------------------------------------------------------------------------
# Item 1: gated RLS / Mesa stays finite; ill-posed solves are named.
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bias", [0.0, -2.0, -20.0])
def test_mesa_layer_with_gates_is_finite_at_ordinary_and_strong_gates(bias):
    """mesa_gate_nan: MesaLayer(16, 2, use_gate=True) with gate bias 0 returned 3,696 NaN of 8,192 outputs."""
    torch.manual_seed(0)
    layer = layers.MesaLayer(16, 2, use_gate=True)
    torch.nn.init.constant_(layer.a_proj.bias, bias)
    x = torch.randn(2, 256, 16, requires_grad=True)
    y = layer(x)
    assert torch.isfinite(y).all()
    y.square().sum().backward()
    assert torch.isfinite(x.grad).all()


def test_mesa_layer_with_gates_is_finite_at_4096_tokens_in_fp32():
    """The issue's target: finite in fp32 up to T = 4096 (g ≈ −0.7, the bias-0 gate that broke at T = 256)."""
    torch.manual_seed(0)
    layer = layers.MesaLayer(16, 2, use_gate=True)
    torch.nn.init.constant_(layer.a_proj.bias, 0.0)
    with torch.no_grad():
        y = layer(torch.randn(1, 4096, 16))
    assert torch.isfinite(y).all()


@pytest.mark.parametrize("g_value", [-1.0, -5.0, -50.0])
def test_gated_rls_forms_agree_and_stay_finite_in_fp32(g_value):
    """rls_recurrent_decay_nan / rls_exact_strong_decay_linalg: g = −1 went NaN from t ≈ 100 in fp32, and
    rls_exact(g = −50) raised LinAlgError. With the constant ridge both forms are finite and agree."""
    q, k, v = qkv(1, 300, 2, 8, seed=7)
    g = torch.full((1, 300, 2), g_value)
    reference = ops.rls_exact(q.double(), k.double(), v.double(), ridge=1.0, g=g.double())[0]
    for form in (ops.rls_recurrent, ops.rls_exact):
        o = form(q, k, v, ridge=1.0, g=g)[0]
        assert torch.isfinite(o).all()
        assert relative_error(o, reference) < 1e-5
    recurrent64 = ops.rls_recurrent(q.double(), k.double(), v.double(), ridge=1.0, g=g.double())[0]
    assert relative_error(recurrent64, reference) < 1e-12


def test_local_linear_attention_with_identical_keys_returns_the_running_mean():
    """local_linear_identical_keys_wrong: identical keys, ridge 1e-6, fp32 gave relative error 3.75. With every key
    equal the local line is flat: the answer is the running mean of v."""
    q, k, v = qkv(1, 64, 2, 8, seed=10)
    k = k[:, :1].expand_as(k).contiguous()
    running_mean = v.double().cumsum(1) / torch.arange(1, 65, dtype=torch.float64)[None, :, None, None]
    o = ops.local_linear_attention(q, k, v, ridge=1e-6)[0]
    assert relative_error(o, running_mean) < 1e-5


def test_rls_with_collinear_keys_and_a_tiny_ridge_in_fp32_is_never_silent():
    """rls_collinear_fp32_garbage: collinear keys, ridge = 1e-8, fp32: 1.8e2 relative error and no warning."""
    q, _, v = qkv(1, 64, 1, 8, seed=8)
    base = torch.randn(8, generator=torch.Generator().manual_seed(9))
    k = base.expand(1, 64, 1, 8) * torch.linspace(0.5, 2, 64)[None, :, None, None]
    for form in (ops.rls_recurrent, ops.rls_exact):
        for g in (None, torch.full((1, 64, 1), -0.05)):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    form(q, k, v, ridge=1e-8, g=g)
                except ValueError as error:
                    assert str(error).startswith("ridge:")
                    continue
            assert any(issubclass(w.category, RuntimeWarning) and "ridge" in str(w.message) for w in caught)


def test_a_well_posed_rls_gives_no_warning():
    """The ill-conditioning warning must not cry wolf on ordinary input (unit keys, ridge = 1)."""
    q, k, v = qkv(2, 50, 2, 8, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for g in (None, -torch.rand(2, 50, 2)):
            ops.rls_recurrent(q, k, v, g=g)
            ops.rls_exact(q, k, v, g=g)
        ops.local_linear_attention(q, k, v)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_ridge_too_small_to_solve_is_named(dtype):
    """local_linear_tiny_ridge_linalg: ridge = 1e-300 raised torch's LinAlgError. In fp32 1e-300 is 0 (outside the
    dtype); in fp64 it fits but the covariance of one key is singular: both are ValueErrors naming ridge."""
    q, k, v = qkv(dtype=dtype)
    with pytest.raises(ValueError, match=r"^ridge: "):
        ops.local_linear_attention(q, k, v, ridge=1e-300)
    with pytest.raises(ValueError, match=r"^ridge: "):
        ops.rls_exact(q, k, v, ridge=1e-300, g=torch.full((1, 8, 1), -0.5, dtype=dtype))


# ------------------------------------------------------------------------------------------------------------------
# Item 2: one input policy.
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["q", "k", "v", "beta"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_inputs_are_refused_by_name(name, bad):
    q, k, v = qkv()
    inputs = {"q": q, "k": k, "v": v, "beta": torch.full((1, 8, 1), 0.5)}
    inputs[name][0, 3, 0, ...] = bad  # one token (all its features for q, k, v)
    with pytest.raises(ValueError, match=rf"^{name}: expected finite values, got [14] of"):
        ops.delta_rule_chunk(**inputs)


def test_non_finite_states_are_refused_by_name():
    q, k, v = qkv()
    S0 = torch.zeros(1, 1, 4, 4)
    S0[0, 0, 1, 2] = math.nan
    with pytest.raises(ValueError, match=r"^initial_state: expected finite"):
        ops.linear_attention_recurrent(q, k, v, initial_state=S0)
    P0 = torch.eye(4).expand(1, 1, 4, 4).clone()
    P0[0, 0, 0, 0] = math.inf
    with pytest.raises(ValueError, match=r"^initial_state\[1\]: expected finite"):
        ops.rls_recurrent(q, k, v, initial_state=(torch.zeros(1, 1, 4, 4), P0))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_the_one_pass_finite_scan_is_exact(dtype):
    """``all_finite`` sums once; a non-finite sum falls back to the entry-wise scan. Large finite entries whose sum
    overflows must pass, and +inf beside −inf (a NaN sum) or one NaN among huge values must still be named."""
    from ttr_edu._internal.validation import all_finite, check_finite

    big = torch.full((4, 1000), torch.finfo(dtype).max / 2, dtype=dtype)
    if dtype == torch.float16:  # half precision is summed in single precision: a large gate tensor is no overflow
        assert torch.isinf(torch.rand(8, 4096, 16).half().sum()) and all_finite(torch.rand(8, 4096, 16).half())
    else:
        assert torch.isinf(big.sum()) and not all_finite(big)  # the sum overflows though every entry is finite ...
    check_finite("x", big)  # ... so the fallback scan decides, and passes it
    assert all_finite(torch.randn(3, 5).to(dtype))
    for bad in ([math.inf, -math.inf], [math.nan, 0.0], [-math.inf, 1.0]):
        x = big.clone()
        x[1, 2], x[3, 4] = bad
        assert not all_finite(x)
        with pytest.raises(ValueError, match=r"^x: expected finite values, got [12] of 4000 entries"):
            check_finite("x", x)


def test_the_finite_checks_switch_turns_the_scans_off_and_back_on():
    q, k, v = qkv()
    q[0, 2, 0, 1] = math.nan
    with ttr_edu.finite_checks(False):
        assert not ttr_edu.finite_checks_enabled()
        o = ops.linear_attention_chunk(q, k, v)[0]  # NaN in, NaN out: the documented price of speed
    assert torch.isnan(o).any()
    assert ttr_edu.finite_checks_enabled()
    with pytest.raises(ValueError, match=r"^q: "):
        ops.linear_attention_chunk(q, k, v)
    with pytest.raises(TypeError, match=r"^enabled: "):
        with ttr_edu.finite_checks("no"):
            pass


def test_a_full_reset_stays_allowed_in_g():
    q, k, v = qkv()
    g = torch.full((1, 8, 1), -0.1)
    g[0, 4] = -math.inf
    assert torch.isfinite(ops.gated_linear_attention_chunk(q, k, v, g)[0]).all()
    assert torch.isfinite(ops.rls_recurrent(q, k, v, g=g)[0]).all()


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda q, k, v: ops.linear_attention_chunk(q, k, v, scale=1e300), "scale"),
        (lambda q, k, v: ops.delta_rule_recurrent(q, k, v, torch.full((1, 8, 1), 0.5), scale=1e39), "scale"),
        (lambda q, k, v: ops.rls_recurrent(q, k, v, ridge=1e300), "ridge"),
        (lambda q, k, v: ops.rls_exact(q, k, v, ridge=1e-300), "ridge"),
        (lambda q, k, v: ops.local_linear_attention(q, k, v, ridge=1e300), "ridge"),
        (lambda q, k, v: ops.l2_norm(q, eps=1e300), "eps"),
        (lambda q, k, v: ops.linear_attention_chunk(q, k, v, normalize=True, eps=1e-300), "eps"),
    ],
)
def test_scalars_that_overflow_the_compute_dtype_are_refused(call, name):
    """huge_scale_nan / l2_norm_huge_eps: scale=1e300 gave NaN; eps=1e300 a torch RuntimeError."""
    with pytest.raises(ValueError, match=rf"^{name}: .* does not fit float32"):
        call(*qkv())


def test_an_output_that_overflows_its_dtype_is_refused():
    """fp16_linear_attention_overflows / huge_scale_nan (softmax, scale 1e38): inf in o, no word."""
    q, k, v = qkv(1, 64, 1, 16, seed=14)
    with pytest.raises(ValueError, match=r"^o: .*overflows torch.float16"):
        ops.linear_attention_chunk(ops.elu_plus_one(q).half(), ops.elu_plus_one(k).half(), (v.abs() * 3e3).half())
    with pytest.raises(ValueError, match=r"^o: "):
        ops.softmax_attention(q * 10, k, v, scale=1e38)
    # The same inputs in fp32 are fine: the check flags the dtype, not large numbers.
    assert torch.isfinite(ops.linear_attention_chunk(ops.elu_plus_one(q), ops.elu_plus_one(k), v.abs() * 3e3)[0]).all()


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda q, k, v: ops.linear_attention_chunk(q, k, v, normalize="false"), "normalize"),
        (lambda q, k, v: ops.linear_attention_recurrent(q, k, v, output_final_state="false"), "output_final_state"),
        (lambda q, k, v: ops.softmax_attention(q, k, v, qk_norm=1), "qk_norm"),
        (lambda q, k, v: ops.get_feature_map("favor_plus", d_k=4, m=4, redraw="yes"), "redraw"),
        (lambda q, k, v: layers.LinearAttention(8, 2, normalize="false"), "normalize"),
        (lambda q, k, v: layers.MesaLayer(8, 2, use_gate="true"), "use_gate"),
    ],
)
def test_boolean_flags_take_booleans_only(call, name):
    """truthy_string_flags: normalize='false' normalised and output_final_state='false' returned the state."""
    with pytest.raises(TypeError, match=rf"^{name}: expected True or False"):
        call(*qkv())


@pytest.mark.parametrize(
    "shape, dim", [((0, 8, 1, 4), "B"), ((1, 8, 0, 4), "H"), ((1, 8, 1, 0), "D_k"), ((1, 0, 1, 4), "T")]
)
def test_empty_dims_are_refused_by_name(shape, dim):
    """zero_batch_delta_rule / zero_dk: ZeroDivisionError from the chunking and from the default scale."""
    B, T, H, D = shape
    q = k = torch.randn(B, T, H, D)
    v = torch.randn(B, T, H, 3)
    beta = torch.full((B, T, H), 0.5)
    for call in (
        lambda: ops.delta_rule_chunk(q, k, v, beta),
        lambda: ops.delta_rule_parallel(q, k, v, beta, scale=0.5),
        lambda: ops.gated_delta_rule_chunk(q, k, v, -beta, beta),
        lambda: ops.linear_attention_chunk(q, k, v),
        lambda: ops.rls_recurrent(q, k, v),
    ):
        with pytest.raises(ValueError, match=rf"^q: expected .*{dim}"):
            call()
    v0 = torch.randn(1, 8, 1, 0)
    with pytest.raises(ValueError, match=r"^v: expected D_v >= 1"):
        ops.linear_attention_chunk(torch.randn(1, 8, 1, 4), torch.randn(1, 8, 1, 4), v0)


@pytest.mark.parametrize("mixer", list(layers.MIXERS))
def test_layers_refuse_empty_batches_and_sequences_and_another_dtype(mixer):
    """layers_empty_sequence / layers_dtype_mismatch / zero_batch_delta_rule (DeltaNet, MesaLayer)."""
    layer = layers.MIXERS[mixer](8, 2)
    for shape in ((2, 0, 8), (0, 5, 8)):
        with pytest.raises(ValueError, match=r"^x: expected B >= 1 and T >= 1"):
            layer(torch.randn(*shape))
    with pytest.raises(TypeError, match=r"^x: expected the dtype of the module's parameters \(torch.float32\)"):
        layer(torch.randn(2, 5, 8, dtype=torch.float64))
    x = torch.randn(2, 5, 8)
    x[1, 2, 3] = math.nan
    with pytest.raises(ValueError, match=r"^x: expected finite values"):
        layer(x)


def test_chunk_size_beyond_the_sequence_is_capped():
    """huge_chunk_size: chunk_size=10**6 at T = 8 tried to allocate terabytes."""
    q, k, v = qkv()
    g = -torch.rand(1, 8, 1)
    beta = torch.full((1, 8, 1), 0.5)
    for chunk, _whole in (
        (lambda c: ops.linear_attention_chunk(q, k, v, chunk_size=c), None),
        (lambda c: ops.gated_linear_attention_chunk(q, k, v, g, chunk_size=c), None),
        (lambda c: ops.delta_rule_chunk(q, k, v, beta, chunk_size=c), None),
        (lambda c: ops.gated_delta_rule_chunk(q, k, v, g, beta, chunk_size=c), None),
    ):
        assert torch.equal(chunk(10**12)[0], chunk(8)[0])


def test_conv_size_is_bounded():
    """conv_size_unbounded: DeltaNet(8, 2, conv_size=10**6) ran a million-tap convolution for minutes."""
    with pytest.raises(ValueError, match=r"^conv_size: .*expected 1 to 64"):
        layers.DeltaNet(8, 2, conv_size=10**6)
    assert layers.DeltaNet(8, 2, conv_size=64)(torch.randn(1, 3, 8)).shape == (1, 3, 8)


def test_short_convolution_checks_its_input():
    conv = layers.ShortConvolution(6)
    with pytest.raises(TypeError, match=r"^x: expected a torch.Tensor"):
        conv([[1.0] * 6])
    with pytest.raises(ValueError, match=r"^x: expected 3 dims"):
        conv(torch.randn(4, 6))


def test_favor_plus_can_be_built_in_a_layer():
    layer = layers.LinearAttention(16, 2, feature_map="favor_plus")
    assert layer.d_k == 16  # 2m features with m = D = 8
    assert torch.isfinite(layer(torch.randn(2, 5, 16))).all()
    layer = layers.LinearAttention(16, 2, feature_map="dpfp", feature_map_params={"nu": 2})
    assert layer.d_k == 2 * 8 * 2


def test_gated_delta_rule_refuses_g_none_in_every_form():
    """gated_delta_rule_g_none: the chunk form quietly ran the ungated rule, the recurrence crashed."""
    q, k, v = qkv()
    beta = torch.full((1, 8, 1), 0.5)
    for form in (ops.gated_delta_rule_chunk, ops.gated_delta_rule_recurrent):
        with pytest.raises(TypeError, match=r"^g: expected a torch.Tensor, got NoneType"):
            form(q, k, v, None, beta)


def test_feature_map_parameters_are_checked():
    """d_dot_unchecked_params / favor_plus_module_unchecked."""
    with pytest.raises(TypeError, match=r"^nu: "):
        ops.d_dot("dpfp", 4, nu="4")
    for nu in (0, -3, 8):
        with pytest.raises(ValueError, match=r"^nu: "):
            ops.d_dot("dpfp", 4, nu=nu)
    with pytest.raises(TypeError, match=r"^x: "):
        ops.FavorPlus(4, 5)([1.0, 2.0, 3.0, 4.0])
    with pytest.raises(TypeError, match=r"^seed: "):
        ops.FavorPlus(4, 5, seed=2.0)


def test_small_named_checks_elsewhere():
    """mqar_accuracy_bool_labels / load_digits_negative_seed."""
    with pytest.raises(TypeError, match=r"^labels: "):
        mqar.mqar_accuracy(torch.randn(2, 6, 5), torch.ones(2, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"^seed: "):
        images.load_digits(seed=-3)


# ------------------------------------------------------------------------------------------------------------------
# Item 4: exercise checks that help.
# ------------------------------------------------------------------------------------------------------------------


def _reference(x):
    return 2 * x


def _cases():
    return [{"x": torch.arange(3.0) + i} for i in range(3)]


def test_only_the_untouched_stub_is_not_attempted(capsys):
    """check_partial_not_implemented: a function that raised NotImplementedError on some cases was 'not attempted'."""

    def stub(x):
        """The nbgrader stub."""
        # YOUR CODE HERE
        raise NotImplementedError()

    def partly_written(x):
        if x[0] > 0:
            raise NotImplementedError("later")
        return 2 * x

    assert run_check("double", stub, _reference, _cases()) is False
    assert "not attempted yet" in capsys.readouterr().out
    with pytest.raises(CheckFailed, match=r"raised NotImplementedError: later\n  at line \d+ of your code"):
        run_check("double", partly_written, _reference, _cases())


def test_a_wrong_answer_shows_the_message_without_the_package_traceback():
    import traceback

    def wrong(x):
        return 3 * x

    def crashes(x):
        return x @ torch.ones(5)

    for answer, text in ((wrong, "wrong values"), (crashes, "raised RuntimeError")):
        with pytest.raises(CheckFailed, match=text) as info:
            run_check("double", answer, _reference, _cases())
        frames = traceback.extract_tb(info.value.__traceback__)
        assert len(frames) <= 2, [f.name for f in frames]  # run_check and at most the test's own frame
        assert info.value.__cause__ is None and info.value.__suppress_context__
        rendered = info.value._render_traceback_()  # what Jupyter shows
        assert rendered[0].startswith("CheckFailed: double: ") and "Traceback" not in "\n".join(rendered)


def test_decayed_cumsum_validates_its_inputs():
    """decayed_cumsum_unchecked: int x -> a torch RuntimeError, chunk_size=0 -> ZeroDivisionError, a T mismatch ->
    a reshape error."""
    from ttr_edu.regression import decayed_cumsum

    g = -torch.rand(1, 1, 5)
    with pytest.raises(TypeError, match=r"^x: expected a floating-point tensor"):
        decayed_cumsum(torch.ones(1, 1, 5, dtype=torch.int64), g)
    with pytest.raises(ValueError, match=r"^chunk_size: "):
        decayed_cumsum(torch.ones(1, 1, 5), g, chunk_size=0)
    with pytest.raises(ValueError, match=r"^g: expected shape \(B, H, T\) = \(1, 1, 6\)"):
        decayed_cumsum(torch.ones(1, 1, 6), g)
    with pytest.raises(ValueError, match=r"^g: expected a log decay"):
        decayed_cumsum(torch.ones(1, 1, 5), -g)
    x = torch.randn(1, 1, 5, 2)
    want = torch.stack(
        [sum(torch.exp(g[0, 0, i + 1 : t + 1].sum()) * x[0, 0, i] for i in range(t + 1)) for t in range(5)]
    )
    assert relative_error(decayed_cumsum(x, g, chunk_size=2)[0, 0], want) < 1e-6


def test_a_lower_precision_answer_is_told_about_its_dtype():
    """check_fp32_message: 'wrong values ... got 0.104377, expected 0.104377' never mentioned float32."""

    def in_float32(x):
        return (2 * x.float() + 1e-3).to(torch.float32)

    cases = [{"x": torch.rand(3, dtype=torch.float64)}]
    with pytest.raises(
        CheckFailed, match=r"^double: wrong dtype: your result is float32, the exercise works in float64"
    ):
        run_check("double", in_float32, _reference, cases)


def test_a_singular_rls_state_is_named_not_a_linalg_error():
    q, k, v = qkv()
    state = (torch.zeros(1, 1, 4, 4), torch.zeros(1, 1, 4, 4))
    for form in (ops.rls_recurrent, ops.rls_exact):
        with pytest.raises(ValueError, match=r"^initial_state\[1\] \(P\): "):
            form(q, k, v, g=torch.full((1, 8, 1), -0.1), initial_state=state)
    for form in (ops.rls_recurrent, ops.rls_exact):
        with pytest.raises(ValueError, match=r"^initial_state\[1\] \(P\): "):
            form(q, k, v, initial_state=state)


# ==================================================================================================================
# The second set: each reproducer in the input policy's scope, named in its test's docstring. (The grading, CLI,
# experiments, MQAR and claims reproducers have their own tests beside that code.)
# ==================================================================================================================


def _step_inputs(B=2, T=7, H=2, D=4, D_v=3):
    q, k, v = qkv(B, T, H, D, D_v)
    return q, k, v, torch.rand(B, T, H) * 0.8 + 0.1


def test_the_old_layers_memory_name_imports_first_in_a_fresh_interpreter():
    """layers_memory_import_first: `import ttr_edu.layers_memory` alone failed with a circular ImportError."""
    import subprocess
    import sys

    code = "import ttr_edu.layers_memory as m; print(m.Longhorn.__name__)"
    result = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "Longhorn", result.stderr[-1000:]


def test_causal_lm_loss_of_one_token_is_refused_not_nan():
    """causal_lm_loss_T1_nan: T = 1 scores no position, and the mean of nothing was NaN."""
    from ttr_edu.models.lm import causal_lm_loss

    with pytest.raises(ValueError, match=r"^tokens: expected T >= 2"):
        causal_lm_loss(torch.randn(2, 1, 11), torch.zeros(2, 1, dtype=torch.long))
    loss = causal_lm_loss(torch.randn(2, 3, 11), torch.zeros(2, 3, dtype=torch.long))
    assert torch.isfinite(loss)


def test_lm_loss_scores_every_position_and_names_bad_targets():
    """lm_loss_ignore_index, lm_loss_target_out_of_range: a -100 target was silently skipped (all -100 gave NaN) and
    a target V raised torch's IndexError."""
    from ttr_edu.models.lm import lm_loss

    logits, targets = torch.randn(2, 5, 11), torch.randint(0, 11, (2, 5))
    targets[:, 0] = -100
    with pytest.raises(ValueError, match=r"^targets: expected values in \[0, 11\).*ignore_index"):
        lm_loss(logits, targets)
    with pytest.raises(ValueError, match=r"^targets: expected values in \[0, 11\)"):
        lm_loss(logits, torch.full((2, 5), -100))
    with pytest.raises(ValueError, match=r"^targets: expected values in \[0, 11\), got range \[11, 11\]"):
        lm_loss(logits, torch.full((2, 5), 11))
    with pytest.raises(TypeError, match=r"^targets: expected an int64 tensor"):
        lm_loss(logits, torch.zeros(2, 5))
    with pytest.raises(ValueError, match=r"^logits: expected finite values"):
        lm_loss(torch.full((2, 5, 11), float("nan")), torch.zeros(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"^logits: expected B >= 1"):
        lm_loss(torch.randn(0, 5, 11), torch.zeros(0, 5, dtype=torch.long))


def test_bits_per_byte_refuses_a_diverged_or_impossible_loss():
    """bits_per_byte_accepts_nan_and_negative: nan -> nan and -1.0 -> -1.44 passed as results."""
    from ttr_edu.models.lm import bits_per_byte

    for bad in (float("nan"), float("inf"), -1.0):
        with pytest.raises(ValueError, match=r"^loss_nats: "):
            bits_per_byte(bad)
    for bad in ("0.5", True, None):
        with pytest.raises(TypeError, match=r"^loss_nats: "):
            bits_per_byte(bad)
    assert bits_per_byte(torch.tensor(math.log(256.0))) == pytest.approx(8.0)


def test_conjugate_gradient_checks_its_system():
    """conjugate_gradient_unchecked: steps=-3 and a non-SPD A = -I returned zeros; A and b broadcast silently."""
    from ttr_edu.regression import conjugate_gradient

    gen = torch.Generator().manual_seed(0)
    m = torch.randn(3, 4, 4, generator=gen, dtype=torch.float64)
    A, b = m @ m.mT + torch.eye(4, dtype=torch.float64), torch.randn(3, 4, generator=gen, dtype=torch.float64)
    exact = torch.linalg.solve(A, b[..., None])[..., 0]
    assert relative_error(conjugate_gradient(A, b, 4), exact) < 1e-10
    assert relative_error(conjugate_gradient(A, b, 10**9), exact) < 1e-10  # capped at D = 4 steps: exact, at once
    with pytest.raises(ValueError, match=r"^steps: expected a positive int"):
        conjugate_gradient(A, b, -3)
    with pytest.raises(TypeError, match=r"^steps: "):
        conjugate_gradient(A, b, True)
    with pytest.raises(ValueError, match=r"^A: expected a symmetric positive definite matrix"):
        conjugate_gradient(-torch.eye(4, dtype=torch.float64).expand(3, 4, 4), b, 4)
    with pytest.raises(ValueError, match=r"^A: expected a symmetric positive definite matrix, got one that is not"):
        conjugate_gradient(A + torch.ones(4, 4, dtype=torch.float64).triu(1), b, 4)
    with pytest.raises(ValueError, match=r"^b: expected shape \(batch0, D\)"):
        conjugate_gradient(A, b[:1], 4)  # no broadcasting over the batch
    with pytest.raises(TypeError, match=r"^b: expected the dtype of A"):
        conjugate_gradient(A, b.float(), 4)
    with pytest.raises(ValueError, match=r"^b: expected finite values"):
        conjugate_gradient(A, b * float("nan"), 4)


def test_longhorn_step_size_checks_its_inputs_and_returns_the_shape_of_beta():
    """longhorn_step_size_unchecked: a negative beta (which the ops refuse) and a broadcasting (B, 1, H, 1) beta were
    accepted; integer dtypes and a Python float too."""
    q, k, v, beta = _step_inputs()
    eps = ops.longhorn_step_size(beta, k)
    assert eps.shape == beta.shape
    assert relative_error(eps, beta / (1 + beta * k.pow(2).sum(-1))) < 1e-6
    per_channel = torch.rand(2, 7, 2, 3)
    assert ops.longhorn_step_size(per_channel, k, per_channel=True).shape == per_channel.shape
    with pytest.raises(ValueError, match=r"^beta: expected \(B, T, H\), .* needs per_channel=True"):
        ops.longhorn_step_size(per_channel, k)
    with pytest.raises(ValueError, match=r"^beta: expected 4 dims \(B, T, H, D_v\)"):
        ops.longhorn_step_size(per_channel[..., 0], k, per_channel=True)  # its last axis dropped
    with pytest.raises(ValueError, match=r"^beta: expected a weight .* in \[0, inf\)"):
        ops.longhorn_step_size(-beta - 1, k)
    with pytest.raises(ValueError, match=r"^beta: expected shape \(B, T, H\)"):
        ops.longhorn_step_size(beta[:, :1], k)
    with pytest.raises(TypeError, match=r"^beta: "):
        ops.longhorn_step_size(0.5, k)
    with pytest.raises(TypeError, match=r"^k: expected a floating-point tensor"):
        ops.longhorn_step_size(beta, k.long())


def test_random_windows_take_byte_ids_only():
    """random_windows_float_tokens: float tokens and ids > 255 were cast to int64 silently."""
    from ttr_edu.tasks.text import eval_windows, random_windows

    bytes_ = torch.arange(40, dtype=torch.uint8)
    assert random_windows(bytes_, 2, 5).shape == (2, 6)
    assert eval_windows(bytes_.long(), 5).dtype == torch.int64
    for call in (random_windows, lambda t, *_: eval_windows(t, 5)):
        with pytest.raises(TypeError, match=r"^tokens: expected an integer tensor"):
            call(torch.rand(40) * 300, 2, 5)
        with pytest.raises(ValueError, match=r"^tokens: expected byte values in \[0, 255\]"):
            call(torch.arange(40) * 100, 2, 5)


def test_the_gated_kernel_refuses_g_none_as_its_op_does():
    """kernels_gdr_accepts_g_none: kernels.gated_delta_rule_chunk(g=None) ran the ungated rule."""
    pytest.importorskip("triton")
    from ttr_edu import kernels

    q, k, v, beta = _step_inputs()
    for fn in (kernels.gated_delta_rule_chunk, ops.gated_delta_rule_chunk):
        with pytest.raises(TypeError, match=r"^g: expected a torch.Tensor, got NoneType"):
            fn(q, k, v, None, beta, chunk_size=16)


@pytest.mark.parametrize("name", ["deltanet", "longhorn", "ttt_linear", "ttt_mlp", "titans", "gated_linear_attention"])
def test_the_regression_framework_refuses_a_non_finite_initial_state(name):
    """regression_initial_state_nan: one NaN in initial_state gave NaN outputs, with no error or warning."""
    from ttr_edu import regression as R

    q, k, v, beta = _step_inputs()
    kw = {"beta": beta} if name in ("deltanet", "longhorn", "ttt_linear", "ttt_mlp", "titans") else {}
    if name == "gated_linear_attention":
        kw["g"] = -torch.rand(2, 7, 2)
    if name in ("ttt_mlp", "titans"):
        state = [0.1 * torch.randn(2, 2, 4, 5), 0.1 * torch.randn(2, 2, 5, 3)]
        state[1][0, 0, 0, 0] = float("nan")
        pattern = r"^initial_state\[1\]: expected finite values"
    else:
        state = 0.1 * torch.randn(2, 2, 4, 3)
        state[0, 0, 0, 0] = float("inf")
        pattern = r"^initial_state: expected finite values"
    with pytest.raises(ValueError, match=pattern):
        R.named_layer(name)(q, k, v, initial_state=tuple(state) if isinstance(state, list) else state, **kw)


def test_the_regression_framework_refuses_truthy_flags_and_scales_that_overflow():
    """regression_truthy_flag_and_huge_scale: output_final_state='false' returned the state; scale=1e300 gave NaN."""
    from ttr_edu import regression as R

    q, k, v, beta = _step_inputs()
    layer = R.named_layer("deltanet")
    with pytest.raises(TypeError, match=r"^output_final_state: expected True or False"):
        layer(q, k, v, beta=beta, output_final_state="false")
    with pytest.raises(ValueError, match=r"^scale: 1e\+300 does not fit float32"):
        layer(q, k, v, beta=beta, scale=1e300)
    with pytest.raises(ValueError, match=r"^o: .* NaN or inf although every input is finite"):
        layer(q, k, v, beta=beta, scale=3e38)  # fits fp32, but the output overflows: named, not returned
    with pytest.raises(ValueError, match=r"^queries: expected finite values"):
        R.named_layer("softmax_attention").predict(k[0, :, 0], v[0, :, 0], torch.full((2, 4), float("nan")))


def test_late_or_missing_checks_now_happen_where_the_value_is_given():
    """late_or_missing_validation_misc: LMConfig(d_model=8, num_heads=3) was refused only by TinyLM, Longhorn took
    diagonal='false', titans_recurrent took TitansState(None, None) as a zero start."""
    from ttr_edu.layers import Longhorn
    from ttr_edu.models.lm import LMConfig

    with pytest.raises(ValueError, match=r"^num_heads: must divide d_model=8, got 3"):
        LMConfig(d_model=8, num_heads=3)
    with pytest.raises(TypeError, match=r"^diagonal: expected True or False"):
        Longhorn(8, 2, diagonal="false")
    q, k, v, beta = _step_inputs()
    gates = torch.rand(2, 7, 2) * 0.5
    with pytest.raises(TypeError, match=r"^initial_state.memory: expected S"):
        ops.titans_recurrent(q, k, v, beta, gates, gates, initial_state=ops.TitansState(None, None))


@pytest.mark.parametrize("form", [ops.delta_product_chunk, ops.delta_product_recurrent])
@pytest.mark.parametrize("B, H, D_k, D_v", [(0, 2, 4, 3), (2, 0, 4, 3), (2, 2, 0, 3), (2, 2, 4, 0)])
def test_delta_product_names_an_empty_dim(form, B, H, D_k, D_v):
    """delta_product_zero_dims: B = 0 or H = 0 raised ZeroDivisionError, D_k = 0 one from the default scale."""
    q, k, v = torch.randn(B, 7, H, D_k), torch.randn(B, 14, H, D_k), torch.randn(B, 14, H, D_v)
    with pytest.raises(ValueError, match=r"^(q|v): expected (B|H|D_k|D_v)(, H)? >= 1"):
        form(q, k, v, torch.rand(B, 14, H), 2)


def test_a_huge_chunk_size_is_capped_at_the_sequence_in_every_chunk_form():
    """longhorn_chunk_huge_chunk_size: longhorn_chunk and delta_product_chunk with chunk_size=10**6 at T = 7 asked
    for 16 TB; delta_rule_chunk capped the chunk at T."""
    q, k, v, beta = _step_inputs()
    for fn, extra in ((ops.longhorn_chunk, ()), (ops.delta_rule_chunk, ())):
        assert relative_error(fn(q, k, v, beta, *extra, chunk_size=10**6)[0], fn(q, k, v, beta, chunk_size=7)[0]) < 1e-6
    k2, v2 = torch.cat([k, k], 1), torch.cat([v, v], 1)
    beta2 = torch.cat([beta, beta], 1) * 0.5
    huge = ops.delta_product_chunk(q, k2, v2, beta2, 2, chunk_size=10**6)[0]
    assert relative_error(huge, ops.delta_product_recurrent(q, k2, v2, beta2, 2)[0]) < 1e-5


def test_meta_offsets_are_named():
    """cu_seqlens_meta: cu_seqlens on the meta device raised NotImplementedError 'Cannot copy out of meta tensor'."""
    q, k, v = qkv(1, 7, 2, 4)
    with pytest.raises(ValueError, match=r"^cu_seqlens: expected offsets with values"):
        ops.linear_attention_chunk(q, k, v, cu_seqlens=torch.tensor([0, 3, 7], device="meta"))


@pytest.mark.parametrize(
    "call",
    [
        lambda q, k, v, b: ops.longhorn_chunk(q, k, v, b, chunk_size=3),
        lambda q, k, v, b: ops.gla_chunk(q, k, v, -b[..., None].expand(*q.shape), chunk_size=3),
        lambda q, k, v, b: ops.gated_linear_attention_chunk(q, k, v, -b, chunk_size=3),
        lambda q, k, v, b: ops.titans_recurrent(q, k, v, b, b, b),
        lambda q, k, v, b: ops.rls_recurrent(q, k, v, g=-b),
    ],
)
def test_meta_tensors_run_for_shapes_or_are_named(call):
    """meta_tensors_item: all tensors on the meta device raised 'Tensor.item() cannot be called on meta tensors'."""
    q, k, v = (x.to("meta") for x in qkv(2, 7, 2, 4, 3))
    try:
        o = call(q, k, v, torch.rand(2, 7, 2).to("meta"))[0]
    except ValueError as error:
        assert re.match(r"^[a-z_]+: ", str(error)), error
    else:
        assert o.shape == (2, 7, 2, 3) and o.device.type == "meta"


def test_a_tiny_lm_refuses_a_state_of_another_batch_or_model():
    """tinylm_step_batch_change: a state carried from a batch of 2, then a batch of 3, raised torch.cat's error."""
    from ttr_edu.models.lm import LMConfig, TinyLM

    torch.manual_seed(0)
    model = TinyLM(LMConfig(d_model=8, num_heads=2, n_layers=1, mlp_ratio=2, vocab_size=17))
    state = model.init_state()
    model.step(torch.zeros(2, dtype=torch.long), state)
    with pytest.raises(ValueError, match=r"^token: expected the batch size of the state \(B = 2\), got B = 3"):
        model.step(torch.zeros(3, dtype=torch.long), state)
    wider = TinyLM(LMConfig(d_model=12, num_heads=2, n_layers=1, mlp_ratio=2, vocab_size=17))
    with pytest.raises(ValueError, match=r"^state: carried by another model"):
        wider.step(torch.zeros(2, dtype=torch.long), state)


def test_non_finite_values_are_also_floating_point_errors_for_training_loops():
    """A refused NaN is a ValueError naming the argument and a FloatingPointError, so that a loop that keeps a
    diverged run as a row (experiments.lm catches FloatingPointError) sees NaN logits as it sees a NaN loss."""
    from ttr_edu.models.lm import lm_loss

    logits = torch.full((2, 3, 5), float("nan"))
    for kind in (ValueError, FloatingPointError):
        with pytest.raises(kind, match=r"^logits: expected finite values"):
            lm_loss(logits, torch.zeros(2, 3, dtype=torch.long))

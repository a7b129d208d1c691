"""Regression tests for the reliability review of 2026-12-01 (issue 13): every bad input it found is now refused by
name, warned about, or computed right, and the numerics it broke stay finite.

Each test restates one reproducer of ``reviews/2026-12-01/reproducers.py`` (named in its docstring) in this
project's words. The input policy itself is in ``ttr_edu/_validation.py`` and CONTRIBUTING.md.
"""

import math
import warnings

import pytest
import torch

import ttr_edu
from ttr_edu import layers, ops
from ttr_edu.checks import CheckFailed
from ttr_edu.checks._core import relative_error, run_check
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
    with pytest.raises(CheckFailed, match=r"note: your result is float32, the reference float64"):
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

"""The chunkwise algorithms chapter's claims are really checked: change one parameter so that a claim turns false,
and the run stops with ``ClaimFailed`` naming it (CONTRIBUTING.md, "Claims")."""

import pytest

from tests.claims.mutation import run_mutated

CHAPTER = "solutions/11_chunkwise_algorithms.ipynb"


@pytest.mark.slow
@pytest.mark.notebook
def test_memory_optimum_claim_fails_when_the_heads_are_tiny():
    # With D = 4 the per-chunk states are tiny, so the delta rule's memory is smallest at the smallest chunk: the
    # prose's "smallest at an intermediate chunk size" (true at D = 32) must then stop the run.
    error = run_mutated(CHAPTER, "inputs = make_inputs(512)", "inputs = make_inputs(512, D=4)")
    assert error is not None and "ClaimFailed" in error
    assert "peak memory is smallest at a chunk size of the order of D" in error


@pytest.mark.slow
@pytest.mark.notebook
def test_backward_claim_fails_when_a_term_of_the_derivation_is_dropped():
    # without the −Wᵀ dU' term (step 2) the derived dS₀ is no longer autograd's
    error = run_mutated(CHAPTER, "dS0 = q.T @ dO + dS - W.T @ d_pseudo", "dS0 = q.T @ dO + dS")
    assert error is not None and "ClaimFailed" in error
    assert "the derived chunk backward gives autograd's five gradients to rounding" in error


def test_fla_builds_its_64_wide_inverse_from_four_diagonal_blocks_as_the_chapter_says():
    # section 3 describes fla's solve_tril: for chunks of 64, one kernel inverts the four 16 x 16 diagonal blocks and
    # builds the six off-diagonal blocks directly, down to X_41 = -X_44 (A_41 X_11 + A_42 X_21 + A_43 X_31); the
    # 32 x 32 kernel serves chunks of 32. Read from the installed fla (a test peer, never a runtime dependency).
    import inspect
    import re

    solve_tril = pytest.importorskip("fla.ops.utils.solve_tril")
    source = inspect.getsource(solve_tril)
    kernel = source[source.index("def merge_16x16_to_64x64_inverse_kernel") : source.index("def solve_tril(")]
    for block in ("11", "22", "33", "44"):  # four diagonal blocks, each by substitution
        assert f"b_Ai_{block} += m_I" in kernel
    assert sorted(set(re.findall(r"b_Ai_(\d\d) = -tl\.dot", kernel))) == ["21", "31", "32", "41", "42", "43"]
    last = kernel[kernel.index("b_Ai_41 = -tl.dot") :]
    for j in "123":  # X_41 = -X_44 (A_41 X_11 + A_42 X_21 + A_43 X_31)
        assert f"tl.dot(b_A_4{j}, b_Ai_{j}1" in last
    dispatch = source[source.index("def solve_tril(") :]
    assert "BT == 32" in dispatch and "merge_16x16_to_32x32_inverse_kernel" in dispatch
    assert "BT == 64" in dispatch and "merge_16x16_to_64x64_inverse_kernel" in dispatch


def _cell_namespace(anchor_setup: str, anchor_cell: str):
    """The chapter's setup cell run in a fresh namespace, and the source of the cell containing ``anchor_cell``."""
    import nbformat
    import torch

    from tests.claims.mutation import ROOT
    from ttr_edu import ops, profiling, viz
    from ttr_edu.course import claims

    cells = [c.source for c in nbformat.read(ROOT / CHAPTER, as_version=4).cells if c.cell_type == "code"]
    (setup,) = [c for c in cells if anchor_setup in c]
    (cell,) = [c for c in cells if anchor_cell in c]
    namespace = {"torch": torch, "ops": ops, "profiling": profiling, "viz": viz, "claims": claims}
    threads = torch.get_num_threads()
    try:
        exec(setup, namespace)  # sets one thread for its timings: restored below
    finally:
        torch.set_num_threads(threads)
    return namespace, cell


def test_the_chunk_size_claim_holds_whatever_the_machine_load_does_to_the_timings():
    # The claim of the chunk-size cell once failed on a loaded machine: it compared two wall-clock minima (C = 4 at
    # least 1.5 x as slow as C = 64) measured one after the other, so a burst of load over the C = 64 runs turned the
    # ratio around. Here the timings are as a swamped machine gives them, all equal, and the cell still runs: its
    # claim counts operations. The old claim, on the same timings, is what failed.
    from ttr_edu.course import claims

    namespace, cell = _cell_namespace("def make_inputs(", "chunk_sizes = [4, 8, 16, 32, 64, 128]")
    namespace["best_seconds"] = lambda fn, repeats=5: 0.01  # every timing the same: the load decides them all
    exec(cell, namespace)
    by_chunk = namespace["by_chunk"]
    with pytest.raises(claims.ClaimFailed, match="C = 4 is over 1.5 times as slow as C = 64"):
        claims.less(
            "C = 4 is over 1.5 times as slow as C = 64 for the delta rule (the per-step overhead dominates)",
            1.5 * by_chunk["delta rule"][namespace["chunk_sizes"].index(64)],
            by_chunk["delta rule"][0],
            names=("1.5 × C = 64", "C = 4"),
        )


def test_the_chunk_size_claim_fails_when_small_chunks_cost_no_more_operations(monkeypatch):
    from ttr_edu import profiling
    from ttr_edu.course import claims

    namespace, cell = _cell_namespace("def make_inputs(", "chunk_sizes = [4, 8, 16, 32, 64, 128]")
    namespace["best_seconds"] = lambda fn, repeats=5: 0.01
    monkeypatch.setattr(profiling, "operation_count", lambda fn: 100)  # a loop over chunks batched away
    with pytest.raises(claims.ClaimFailed, match="C = 4 runs over twice as many PyTorch operations as C = 64"):
        exec(cell, namespace)


def test_the_length_claims_hold_whatever_the_machine_load_does_to_the_timings():
    # The time-against-length cell once claimed a speed-up of the chunk form over the token loop from two wall-clock
    # minima; here every timing is the same, as a swamped machine may give them, and the cell still runs: its claims
    # count operations and flops.
    namespace, cell = _cell_namespace("def make_inputs(", "lengths = [32, 64, 128, 256, 512]")
    namespace["best_seconds"] = lambda fn, repeats=5: 0.01
    exec(cell, namespace)
    assert (
        namespace["operations"]["delta rule, recurrent"][-1]
        > 10 * namespace["operations"]["delta rule, chunk C=32"][-1]
    )


def test_the_token_loop_claim_fails_when_its_operations_do_not_grow_with_the_length(monkeypatch):
    from ttr_edu import profiling
    from ttr_edu.course import claims

    namespace, cell = _cell_namespace("def make_inputs(", "lengths = [32, 64, 128, 256, 512]")
    namespace["best_seconds"] = lambda fn, repeats=5: 0.01
    monkeypatch.setattr(profiling, "operation_count", lambda fn: 100)  # a token loop fused into one operation
    with pytest.raises(claims.ClaimFailed, match="the token loop dispatches a number of operations proportional to T"):
        exec(cell, namespace)


def _flop_rate_namespace():
    """The flop-rate cell's source and a namespace holding what it needs from the intensity cell before it."""
    import nbformat

    from tests.claims.mutation import ROOT

    namespace, cell = _cell_namespace("def make_inputs(", "heads = 8  # 8 heads")
    cells = [c.source for c in nbformat.read(ROOT / CHAPTER, as_version=4).cells if c.cell_type == "code"]
    (intensity,) = [c for c in cells if "intensity = [" in c]
    exec(intensity, namespace)
    return namespace, cell


def test_the_flop_rate_cell_runs_when_the_load_grows_through_its_timings(monkeypatch):
    # A load that rises while the cell times its products makes the flop rate fall with C; the cell used to claim the
    # opposite order from these timings. It still runs: what it claims is the count of calls for the same flops.
    import time

    clock = {"now": 0.0, "step": 1e-6}

    def rising_load():
        clock["now"] += clock["step"]
        clock["step"] *= 1.2
        return clock["now"]

    namespace, cell = _flop_rate_namespace()
    monkeypatch.setattr(time, "perf_counter", rising_load)
    exec(cell, namespace)
    gflops = namespace["gflops"]
    assert gflops.index(max(gflops)) == 0  # the timings say the matrix-vector step is fastest


def test_the_flop_rate_cell_claim_fails_when_the_calls_do_not_fall_with_the_rows(monkeypatch):
    from ttr_edu import profiling
    from ttr_edu.course import claims

    namespace, cell = _flop_rate_namespace()
    monkeypatch.setattr(profiling, "operation_count", lambda fn: 100)  # the products batched into one call
    with pytest.raises(claims.ClaimFailed, match="the operations dispatched for the same flops fall as 1/C"):
        exec(cell, namespace)


def _fla_source(module: str) -> str:
    import inspect

    return inspect.getsource(pytest.importorskip(module))


def test_fla_keeps_the_inverse_and_recomputes_the_states_in_its_backward_as_the_chapter_says():
    # section 3: the forward saves A, solve_tril's inverse, and no chunk states; the backward recomputes w, u from A
    # and the chunk states h with the forward's state loop
    source = _fla_source("fla.ops.delta_rule.chunk")
    saved = source[source.index("ctx.save_for_backward(") :].split("\n", 1)[0]
    assert " A," in saved and "initial_state" in saved and " h" not in saved
    backward = source[source.index("def chunk_delta_rule_bwd(") : source.index("class ChunkDeltaRuleFunction")]
    assert backward.index("recompute_w_u_fwd(") < backward.index("chunk_gated_delta_rule_fwd_h(")
    assert "A=A" in backward[: backward.index("chunk_gated_delta_rule_fwd_h(")]
    wy = _fla_source("fla.ops.delta_rule.wy_fast")
    forward = wy[wy.index("def prepare_wy_repr_fwd(") : wy.index("def recompute_w_u_fwd(")]
    calls = ["chunk_scaled_dot_kkt_fwd(", "solve_tril(", "recompute_w_u_fwd("]  # the WY part: three kernels in a row
    assert [forward.index(c) for c in calls] == sorted(forward.index(c) for c in calls)


def test_fla_solve_tril_multiplies_in_ieee_unless_asked_as_the_chapter_says():
    # the default is ieee, and any other precision is tried only on a GPU with TMA (the wording of the condition
    # differs between fla releases; the sources ledger quotes the pinned commit)
    import os
    import re

    source = _fla_source("fla.ops.utils.solve_tril")
    assert "os.environ.get('FLA_TRIL_PRECISION', 'ieee')" in source
    assert re.search(r"DOT_PRECISION_AUTOTUNE_LIST = \[\"ieee\"\]", source)
    tma_first = r"IS_TMA_SUPPORTED[^\n]*\n?[^\n]*DOT_PRECISION_AUTOTUNE_LIST"
    assert re.search(tma_first, source) or re.search(r"DOT_PRECISION_AUTOTUNE_LIST[^\n]*IS_TMA", source)
    if "FLA_TRIL_PRECISION" not in os.environ:
        assert pytest.importorskip("fla.ops.utils.solve_tril").FLA_TRIL_PRECISION == "ieee"


@pytest.mark.slow
@pytest.mark.notebook
def test_neumann_instability_claim_fails_when_the_steps_are_small():
    # at beta = 0.1 instead of 1 the powers of A shrink and the series is accurate: the stability cell's claim that it
    # loses everything on correlated keys must then stop the run
    error = run_mutated(
        CHAPTER, "A_s = torch.tril(keys @ keys.T, diagonal=-1)", "A_s = torch.tril(0.1 * keys @ keys.T, diagonal=-1)"
    )
    assert error is not None and "ClaimFailed" in error
    assert "the Neumann series evaluated by doubling is off by more than 100 %" in error


@pytest.mark.slow
@pytest.mark.notebook
def test_horner_claim_fails_when_horner_forms_the_powers():
    # review r35b: the series by Horner's rule is as accurate as substitution. Evaluated instead as the sum of its
    # powers, term by term (P ← −A P, X ← X + P), it cancels the same large terms as the doubling, and the claim
    # that it stays at fp32 rounding must stop the run
    error = run_mutated(
        CHAPTER,
        "    X = eye\n    for _ in range(A.shape[0]):\n        X = eye - A @ X",
        "    X = P = eye\n    for _ in range(A.shape[0] - 1):\n        P = -A @ P\n        X = X + P",
    )
    assert error is not None and "ClaimFailed" in error
    assert "the same series evaluated by Horner's rule stays at fp32 rounding" in error


@pytest.mark.parametrize("head", [64, 128])
def test_the_length_claims_hold_for_a_larger_head(head):
    # Review B: at D = 64 "the flops grow as T²" (a fitted slope of 1.79) and "memory grows 3–4× per doubling" (2.94)
    # failed: the T² terms take over only once T is large against D. The claims now say that, and hold at any head.
    import nbformat
    import torch

    from tests.claims.mutation import ROOT
    from ttr_edu import ops, profiling, viz
    from ttr_edu.course import claims

    cells = [c.source for c in nbformat.read(ROOT / CHAPTER, as_version=4).cells if c.cell_type == "code"]
    (setup,) = [c for c in cells if "def make_inputs(" in c]
    (lengths,) = [c for c in cells if "lengths = [32, 64, 128, 256, 512]" in c]
    (memory,) = [c for c in cells if "lengths_memory = [" in c]
    assert "HEADS, D_HEAD = 2, 32" in setup
    namespace = {"torch": torch, "ops": ops, "profiling": profiling, "viz": viz, "claims": claims}
    threads = torch.get_num_threads()
    try:
        exec(setup.replace("HEADS, D_HEAD = 2, 32", f"HEADS, D_HEAD = 2, {head}"), namespace)
    finally:
        torch.set_num_threads(threads)
    namespace["best_seconds"] = lambda fn, repeats=5: 0.01
    exec(lengths, namespace)
    exec(memory, namespace)

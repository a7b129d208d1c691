"""Chapters 01–06's declared exercises keep the grading engine's contract: in a process locked down to an exercise's
rules (:func:`ttr_edu.checks._guard.lock_down`), its cases, its operation-count and cost cases are built and a right
answer runs on each without breaking a rule. A case built with a ruled-out solver (RLS's earlier state by an inverse)
would end that process, whatever the answer.

One subprocess imports everything once and forks a child per exercise, since a lock-down lasts for its process.
"""

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: (check module, check, test module, a right answer there)
EXERCISES = [
    ("hebbian_memory", "check_write", "test_hebbian_memory", "write"),
    ("hebbian_memory", "check_store", "test_hebbian_memory", "store"),
    ("hebbian_memory", "check_crosstalk_energy", "test_hebbian_memory", "crosstalk_energy"),
    ("hebbian_memory", "check_recall_accuracy", "test_hebbian_memory", "recall_accuracy"),
    ("hebbian_memory", "check_cleanup_scores", "test_hebbian_memory", "cleanup_scores"),
    ("hebbian_memory", "check_rival_score_variance", "test_hebbian_memory", "rival_score_variance"),
    ("linear_attention_is_fwp", "check_fast_weight_recurrence", "test_linear_attention_is_fwp", "recurrence"),
    ("linear_attention_is_fwp", "check_causal_linear_attention", "test_linear_attention_is_fwp", "parallel"),
    ("linear_attention_is_fwp", "check_normalized_linear_attention", "test_linear_attention_is_fwp", "normalized"),
    ("linear_attention_is_fwp", "check_chunk_linear_attention", "test_linear_attention_is_fwp", "_chunk_reference"),
    (
        "linear_attention_is_fwp",
        "check_normalized_chunk_linear_attention",
        "test_linear_attention_is_fwp",
        "_normalized_chunk",
    ),
    ("feature_maps_and_capacity", "check_dpfp", "test_feature_maps_and_capacity", "dpfp"),
    ("feature_maps_and_capacity", "check_favor_plus", "test_feature_maps_and_capacity", "favor_plus"),
    ("feature_maps_and_capacity", "check_favor_variance", "test_feature_maps_and_capacity", "favor_variance"),
    ("feature_maps_and_capacity", "check_retrieval_loss", "test_feature_maps_and_capacity", "loss"),
    ("feature_maps_and_capacity", "check_sum_rule_retrieve", "test_feature_maps_and_capacity", "_sum_rule"),
    ("delta_rule", "check_delta_rule_step", "test_delta_rule", "step"),
    ("delta_rule", "check_update_eigenvalues", "test_delta_rule", "eigenvalues"),
    ("delta_rule", "check_predicted_memory_norm", "test_delta_rule", "predicted_norm_in_closed_form"),
    ("delta_rule", "check_pseudo_values", "test_delta_rule", "pseudo_values"),
    ("dual_form", "check_dual_output", "test_dual_form", "dual_output"),
    ("dual_form", "check_momentum_rescale", "test_dual_form", "momentum_rescale"),
    ("dual_form", "check_class_votes", "test_dual_form", "class_votes"),
    ("dual_form", "check_record_training", "test_dual_form", "record_training"),
    ("test_time_regression_parametric", "check_decay_weights", "test_test_time_regression_parametric", "decay_weights"),
    (
        "test_time_regression_parametric",
        "check_sweep_operator",
        "test_test_time_regression_parametric",
        "sweep_operator",
    ),
    ("test_time_regression_parametric", "check_ridge_readout", "test_test_time_regression_parametric", "ridge_readout"),
    ("test_time_regression_parametric", "check_rls_memory", "test_test_time_regression_parametric", "rls_memory"),
]

_RUN = """
import importlib, os, sys, tempfile
import numpy, scipy.linalg
from ttr_edu.checks import _rules
from ttr_edu.checks._guard import lock_down, package_dirs

def run(module, check, test_module, answer_name):
    declared = getattr(importlib.import_module("ttr_edu.checks." + module), check).__exercise__
    answer = getattr(importlib.import_module("tests.checks." + test_module), answer_name)
    bad = declared.forbidden(solver_modules=["numpy.linalg", "scipy.linalg"])
    def end(message):
        print("ENDED", check, message, flush=True)
        os._exit(1)
    lock_down(bad, end=end, scratch=tempfile.mkdtemp(), code_dirs=package_dirs())
    calls = [(case, {}) for case in declared.cases()]
    rules = declared.rules
    if rules.op_count is not None:
        calls += [(rules.op_count.case(n), {"count_ops": True}) for n in rules.op_count.sizes]
    for rule in rules.work:
        calls += [(rule.case(n), {"count_work": True}) for n in rule.sizes]
    for index, (case, options) in enumerate(calls):
        outcome = _rules.answer_outcome(declared, answer, case, index, **options)
        wrong = outcome.broke_rule or outcome.raised or outcome.called or outcome.not_attempted
        if wrong or (options and outcome.ops is None) or (options.get("count_work") and outcome.work is None):
            print("FAILED", check, index, wrong, flush=True)
            os._exit(1)
    print("OK", check, len(calls), flush=True)
    os._exit(0)

for exercise in {exercises!r}:
    importlib.import_module("ttr_edu.checks." + exercise[0])
    importlib.import_module("tests.checks." + exercise[2])
for exercise in {exercises!r}:
    pid = os.fork()
    if pid == 0:
        run(*exercise)
    os.waitpid(pid, 0)
"""


def test_every_exercise_runs_a_right_answer_in_a_locked_down_process():
    code = textwrap.dedent(_RUN).replace("{exercises!r}", repr(EXERCISES))
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT)},
    )
    lines = result.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [["OK", check] for _, check, _, _ in EXERCISES], (
        result.stdout + result.stderr[-3000:]
    )

"""A public-API fuzz under the input policy (``ttr_edu/_validation.py``, CONTRIBUTING.md): no outcome is silent
(NaN/inf or any output for a bad input, a wrong output for a good one) or obscure (an exception other than a
``ValueError``/``TypeError`` whose message starts with the name of what was wrong).

Each example takes one public callable, builds valid small inputs for it, and applies one mutation to one argument.
Valid mutations must compute the right thing (finite, and equal in fp32 to the fp64 reference form where the op
has one); bad mutations must be refused by name or announced by a warning.
"""

from __future__ import annotations

import math
import os
import re
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import fla_inputs, relative_error
from ttr_edu import layers, ops

# ------------------------------------------------------------------------------------------------------------------
# Targets: name -> (callable, the per-token tensors it takes, its scalars, its bool flags, its fp64 reference).
# ------------------------------------------------------------------------------------------------------------------

OPS = {
    "linear_attention_recurrent": ((), ("scale", "eps"), ("normalize", "output_final_state"), None),
    "linear_attention_parallel": (
        (),
        ("scale", "eps"),
        ("normalize", "output_final_state"),
        "linear_attention_recurrent",
    ),
    "linear_attention_chunk": (
        (),
        ("scale", "eps", "chunk_size"),
        ("normalize", "output_final_state"),
        "linear_attention_recurrent",
    ),
    "delta_rule_recurrent": (("beta",), ("scale",), ("output_final_state",), None),
    "delta_rule_parallel": (("beta",), ("scale",), ("output_final_state",), "delta_rule_recurrent"),
    "delta_rule_chunk": (("beta",), ("scale", "chunk_size"), ("output_final_state",), "delta_rule_recurrent"),
    "gated_linear_attention_recurrent": (("g",), ("scale",), ("output_final_state",), None),
    "gated_linear_attention_chunk": (
        ("g",),
        ("scale", "chunk_size"),
        ("output_final_state",),
        "gated_linear_attention_recurrent",
    ),
    "gated_delta_rule_recurrent": (("g", "beta"), ("scale",), ("output_final_state",), None),
    "gated_delta_rule_chunk": (
        ("g", "beta"),
        ("scale", "chunk_size"),
        ("output_final_state",),
        "gated_delta_rule_recurrent",
    ),
    "rls_recurrent": (("g",), ("scale", "ridge"), ("output_final_state",), "rls_exact"),
    "rls_exact": (("g",), ("scale", "ridge"), ("output_final_state",), "rls_recurrent"),
    "rls_chunk": ((), ("scale", "ridge", "chunk_size"), ("output_final_state",), "rls_recurrent"),
    "softmax_attention": ((), ("scale",), ("qk_norm",), None),
    "local_linear_attention": ((), ("scale", "ridge"), ("qk_norm",), None),
}
FEATURE_MAPS = {"elu_plus_one": (), "l2_norm": ("eps",), "sum_norm": ("eps",), "dpfp": ("nu",)}
LAYERS = list(layers.MIXERS)

BAD_SCALARS = [-1.0, math.nan, math.inf, 1e300, "1", True, [1.0]]
BAD_CHUNKS = [0, -4, 2.5, True, "8"]
BAD_FLAGS = ["false", 1, None, 0.0]
MUTATIONS = [
    "valid",
    "reset",
    "nan",
    "posinf",
    "neginf",
    "int_dtype",
    "not_tensor",
    "drop_dim",
    "mismatch_T",
    "other_dtype",
    "empty_B",
    "empty_H",
    "empty_D",
    "empty_T",
    "scalar",
    "flag",
    "chunk_huge",
    "state_nan",
    "state_shape",
]


def make_inputs(name, per_token, B, T, H, D_k, D_v, seed, dtype=torch.float32):
    """Unit keys (β‖k‖² = β: stable), and the per-token tensors the op takes: β ∈ (0, 1), g ∈ (−0.5, 0]."""
    return fla_inputs(
        B,
        T,
        H,
        D_k,
        D_v,
        dtype=dtype,
        seed=seed,
        beta=(0.0, 1.0) if "beta" in per_token else None,
        max_decay=0.5 if "g" in per_token else None,
    )


def positive_features(args):
    """Normalised linear attention divides by z·q: keep features positive so the valid case is well posed."""
    args["q"], args["k"] = ops.elu_plus_one(args["q"]), ops.elu_plus_one(args["k"])


def mutate_tensor(x, mutation, T):
    if mutation in ("nan", "posinf", "neginf"):
        x = x.clone()
        x.view(-1)[x.numel() // 2] = {"nan": math.nan, "posinf": math.inf, "neginf": -math.inf}[mutation]
        return x
    if mutation == "int_dtype":
        return x.to(torch.int64)
    if mutation == "not_tensor":
        return x.tolist()
    if mutation == "drop_dim":
        return x[..., 0]
    if mutation == "mismatch_T":
        return torch.cat([x, x[:, :1]], dim=1)
    if mutation == "other_dtype":
        return x.double()
    raise AssertionError(mutation)


def apply_mutation(draw, mutation, args, kwargs, per_token, scalars, flags, T):
    """Change one argument; return (is_valid, the argument's name)."""
    tensors = ["q", "k", "v", *per_token]
    if mutation == "valid":
        return True, None
    if mutation == "reset":
        if "g" not in args:
            return True, None
        g = args["g"].clone()
        g[:, draw(st.integers(0, T - 1))] = -math.inf
        args["g"] = g
        return True, "g"
    if mutation in ("nan", "posinf", "neginf", "int_dtype", "not_tensor", "drop_dim", "mismatch_T", "other_dtype"):
        target = draw(st.sampled_from(tensors), label="tensor")
        args[target] = mutate_tensor(args[target], mutation, T)
        # g = −inf is a reset; beta and g may have any floating dtype (they are upcast with the rest)
        valid = (mutation == "neginf" and target == "g") or (mutation == "other_dtype" and target in ("g", "beta"))
        return valid, target
    if mutation == "scalar":
        names = [s for s in scalars if s != "chunk_size"]
        if not names:
            return True, None
        target = draw(st.sampled_from(names), label="scalar")
        kwargs[target] = draw(st.sampled_from(BAD_SCALARS), label="value")
        return False, target
    if mutation == "chunk_huge":
        if "chunk_size" not in scalars:
            return True, None
        kwargs["chunk_size"] = 10**12  # capped at T: valid, and must allocate nothing for it
        return True, None
    if mutation == "flag":
        if not flags:
            return True, None
        target = draw(st.sampled_from(list(flags)), label="flag")
        kwargs[target] = draw(st.sampled_from(BAD_FLAGS), label="value")
        return False, target
    if mutation in ("state_nan", "state_shape"):
        if "output_final_state" not in flags:
            return True, None
        return None, "initial_state"  # built by the caller, which knows the state's form
    if mutation.startswith("empty_"):
        return None, mutation
    if mutation == "chunk":
        if "chunk_size" not in scalars:
            return True, None
        kwargs["chunk_size"] = draw(st.sampled_from(BAD_CHUNKS))
        return False, "chunk_size"
    raise AssertionError(mutation)


NAMED = re.compile(r"^([A-Za-z_][A-Za-z_0-9]*)(\[\d\])*( \([A-Za-z]\))?: ")


def classify(call, valid, allowed_names):
    """Run ``call``; return ("clear" | "ok" | "announced", output) or fail the test for silent/obscure outcomes."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = call()
        except (ValueError, TypeError) as error:
            match = NAMED.match(str(error))
            assert match and match.group(1) in allowed_names, f"obscure message: {type(error).__name__}: {error}"
            assert not valid, f"a valid input was refused: {type(error).__name__}: {error}"
            return "clear", None
        except Exception as error:  # anything else is obscure by definition
            pytest.fail(f"obscure: {type(error).__name__}: {error}")
    announced = [w for w in caught if issubclass(w.category, (RuntimeWarning, UserWarning))]
    if not valid:
        assert announced, "silent: a bad input was accepted without a word"
        return "announced", out
    return "ok", out


def first_tensor(out):
    return out[0] if isinstance(out, tuple) else out


#: ``TTR_FUZZ_SCALE=10 pytest tests/test_fuzz_public_api.py -s`` runs ten times the CI examples and prints the tally.
SCALE = int(os.environ.get("TTR_FUZZ_SCALE", "1"))
SIZES = dict(
    B=st.integers(1, 2),
    T=st.integers(1, 6),
    H=st.integers(1, 2),
    D_k=st.integers(1, 4),
    D_v=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
COUNTS: dict[str, int] = {}


def _record(kind):
    COUNTS[kind] = COUNTS.get(kind, 0) + 1


@settings(max_examples=250 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(OPS)), mutation=st.sampled_from(MUTATIONS + ["chunk"]), data=st.data(), **SIZES)
def test_ops_are_never_silent_or_obscure(name, mutation, data, B, T, H, D_k, D_v, seed):
    per_token, scalars, flags, reference = OPS[name]
    fn = getattr(ops, name)
    if mutation.startswith("empty_"):
        B, T, H, D_k = (0 if mutation == f"empty_{d}" else n for d, n in zip("BTHD", (B, T, H, D_k)))
    args = make_inputs(name, per_token, B, T, H, D_k, D_v, seed)
    normalize = data.draw(st.booleans(), label="normalize") if "normalize" in flags else False
    if normalize and B * T * H * D_k:
        positive_features(args)
    kwargs = {"normalize": True} if normalize else {}
    if mutation.startswith("empty_"):
        valid, target = False, None
    else:
        valid, target = apply_mutation(data.draw, mutation, args, kwargs, per_token, scalars, flags, T)
    if target == "initial_state":
        state = (torch.zeros(B, H, D_k, D_v),)
        if name.startswith("rls"):
            state = (torch.zeros(B, H, D_k, D_v), torch.eye(D_k).expand(B, H, D_k, D_k).clone())
        elif normalize:
            state = (torch.zeros(B, H, D_k, D_v), torch.zeros(B, H, D_k))
        if mutation == "state_nan":
            state[0][..., 0, 0] = math.nan
        else:
            state = tuple(s[..., :-1] if i == 0 else s for i, s in enumerate(state))
        kwargs["initial_state"] = state if len(state) > 1 else state[0]
        valid = False
    allowed = {
        "q",
        "k",
        "v",
        "g",
        "beta",
        "o",
        "initial_state",
        "scale",
        "ridge",
        "eps",
        "chunk_size",
        "normalize",
        "output_final_state",
        "qk_norm",
    }
    ordered = [args.pop(n) for n in ("q", "k", "v")]
    positional = ordered + [
        args[n] for n in ("g", "beta") if n in per_token and n in args and not name.startswith("rls")
    ]
    if name.startswith("rls") and "g" in args:
        kwargs["g"] = args["g"]
    kind, out = classify(lambda: fn(*positional, **kwargs), valid, allowed)
    _record(kind)
    if kind != "ok":
        return
    o = first_tensor(out)
    assert torch.isfinite(o).all(), "silent: NaN/inf output for a valid input"
    if reference is not None:  # the same input in fp64 through the reference form: no wrong output
        up = lambda x: x.double() if isinstance(x, torch.Tensor) else x
        ref_kwargs = {n: up(x) for n, x in kwargs.items() if n not in ("chunk_size",)}
        ref = first_tensor(getattr(ops, reference)(*[up(x) for x in positional], **ref_kwargs))
        assert relative_error(o, ref) < 1e-3, f"wrong output: relative error {relative_error(o, ref):.2g}"


_LAYER_CACHE: dict[str, torch.nn.Module] = {}


def _layer(name):
    if name not in _LAYER_CACHE:
        torch.manual_seed(0)
        _LAYER_CACHE[name] = layers.MIXERS[name](8, 2)
    return _LAYER_CACHE[name]


@settings(max_examples=80 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(LAYERS),
    data=st.data(),
    mutation=st.sampled_from(
        [
            "valid",
            "nan",
            "posinf",
            "int_dtype",
            "not_tensor",
            "drop_dim",
            "other_dtype",
            "empty_B",
            "empty_T",
            "wide",
            "scale_up",
        ]
    ),
    B=st.integers(1, 2),
    T=st.integers(1, 7),
    seed=st.integers(0, 2**16),
)
def test_layers_are_never_silent_or_obscure(name, data, mutation, B, T, seed):
    layer = _layer(name)
    x = torch.randn(B, T, 8, generator=torch.Generator().manual_seed(seed))
    valid = mutation in ("valid", "scale_up")
    if mutation == "scale_up":
        x = x * 100.0  # large but valid activations
    elif mutation == "empty_B":
        x = x[:0]
    elif mutation == "empty_T":
        x = x[:, :0]
    elif mutation == "wide":
        x = torch.cat([x, x], dim=-1)
    elif mutation != "valid":
        x = mutate_tensor(x, mutation, T)
    kind, out = classify(lambda: layer(x), valid, {"x"})
    _record(f"layer {kind}")
    if kind == "ok":
        assert out.shape == (B, T, 8) and torch.isfinite(out).all()


@settings(max_examples=60 * SCALE, deadline=None)
@given(
    name=st.sampled_from(sorted(FEATURE_MAPS)),
    data=st.data(),
    mutation=st.sampled_from(["valid", "nan", "int_dtype", "not_tensor", "scalar"]),
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    seed=st.integers(0, 2**16),
)
def test_feature_maps_are_never_silent_or_obscure(name, data, mutation, shape, seed):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
    kwargs = {}
    valid = mutation == "valid"
    if mutation == "scalar":
        if not FEATURE_MAPS[name]:
            valid = True
        else:
            param = FEATURE_MAPS[name][0]
            kwargs[param] = data.draw(
                st.sampled_from(
                    [-1, 0, 1e300, math.nan, "2", True] if param == "nu" else [-1.0, math.nan, 1e300, "1", True]
                )
            )
    elif mutation != "valid":
        x = mutate_tensor(x, mutation, 1)
    if name == "dpfp" and "nu" not in kwargs and valid:
        kwargs["nu"] = 1
    kind, out = classify(lambda: getattr(ops, name)(x, **kwargs), valid, {"x", "nu", "eps", "o"})
    _record(f"feature map {kind}")
    if kind == "ok":
        assert torch.isfinite(out).all()


# ==================================================================================================================
# Every public callable: enumerated from each public module's __all__, one recipe each
# (tests/helpers/fuzz_targets.py), every argument broken in every way its kind knows (tests/helpers/fuzz.py).
# ==================================================================================================================

import importlib  # noqa: E402
import json  # noqa: E402
import pkgutil  # noqa: E402

from hypothesis import Phase  # noqa: E402

import ttr_edu  # noqa: E402
from tests.helpers import fuzz  # noqa: E402
from tests.helpers.fuzz_targets import KERNEL_TARGETS, TARGETS, kernels_runnable  # noqa: E402

#: Whole folders outside the input policy of the numerical API, each with its reason.
EXCLUDED_MODULES = {
    "ttr_edu.checks": "exercise checks and the engine that grades them: each check is proven to reject wrong answers "
    "by name in tests/checks, the engine's verdicts and refusals in tests/grading",
    "ttr_edu.course": "the CLI and notebook tooling: one-line errors and exit codes are tested in tests/course",
    "ttr_edu.experiments": "command-line grids: argument errors and resume are tested in tests/experiments",
}
#: Public modules without ``__all__``: namespaces whose names live in submodules.
NAMESPACES = {
    "ttr_edu.models": "a namespace of submodules (retrieval, mqar, lm) plus the old flat names, for one release",
    "ttr_edu.tasks": "a namespace of submodules (retrieval, mqar, images, text) plus the old flat names",
}
#: Public callables that are not fuzzed, each with its reason.
_RECORD = "a record of results, returned by {} (fuzzed); users read it, never build it"
EXCLUDED = {
    "ttr_edu.ops.TitansState": "a NamedTuple (memory, momentum): titans_recurrent checks its fields by name, fuzzed as "
    "its initial_state",
    "ttr_edu.layers.base.MixerState": "the state Mixer.initial_state returns and step carries: fuzzed as every "
    "layer's step(state=...)",
    "ttr_edu.layers.base.Mixer": "the template every mixer subclasses; it mixes nothing itself (mix and mix_step "
    "raise): fuzzed as every registered mixer",
    "ttr_edu.layers.register": "changes the registry the other tests read; its errors are tested in "
    "tests/layers/test_registry.py",
    "ttr_edu.layers.unregister": "as register",
    "ttr_edu.layers.SpecView": "a read-only view of the registry that the package builds (MIXERS, MODELS, "
    "LM_MIXERS); tested in tests/layers/test_registry.py",
    "ttr_edu.models.lm.LMState": "the state TinyLM.init_state returns and TinyLM.step carries: fuzzed as step's state",
    "ttr_edu.dual_form.LinearMemory": "built by DualFormRecorder (fuzzed) from the layer it hooks; fuzzed as the "
    "memory "
    "argument of dual_linear, spotlight_scores and top_patterns",
    "ttr_edu.dual_form.InexactDualWarning": "a warning class, raised by the recorder, never called",
    "ttr_edu.dual_form.TopPatterns": _RECORD.format("top_patterns"),
    "ttr_edu.tasks.retrieval.RetrievalBatch": _RECORD.format("capacity_batch and overwrite_batch"),
    "ttr_edu.tasks.retrieval.SwitchingStream": _RECORD.format("switching_regression"),
    "ttr_edu.tasks.mqar.MQARBatch": _RECORD.format("mqar_batch"),
    "ttr_edu.tasks.images.ImageDataset": _RECORD.format("load_digits and load_mnist"),
    "ttr_edu.train.TrainResult": _RECORD.format("train"),
    "ttr_edu.tasks.images.download_mnist": "downloads from OpenML, and no test reaches the network; its name and "
    "data_home checks are load_mnist's (fuzzed)",
    "ttr_edu.kernels.ptxas_report.compile_report": "compiles a Triton kernel for sm_90 with ptxas (a CUDA toolchain): "
    "tests/kernels/test_ptxas_report.py",
    "ttr_edu.kernels.ptxas_report.compile_kernel_report": "as compile_report",
    "ttr_edu.viz.line_figure": "plotly data (lists and dicts of numbers), passed to plotly, which validates it; no "
    "tensor input",
    "ttr_edu.viz.slider_figure": "plotly traces, passed to plotly (fuzzed through block_decomposition_figure and "
    "tile_map_figure)",
    "ttr_edu.viz.dual_form.table_figure": "plotly data (a header and rows of cells); no tensor input",
    "ttr_edu.viz.widgets.hebbian_recall_explorer": "an ipywidgets widget that needs a running kernel; its figure is "
    "recall_scores_figure (fuzzed)",
    **{
        f"ttr_edu.regression.{name}": "the design space's catalogue: built from named choices and parameters, whose "
        "errors (unknown names, invalid points) tests/regression/test_design_space.py checks; no tensor input"
        for name in (
            "design_space.Choice",
            "design_space.Identity",
            "design_space.Neighbour",
            "design_space.Param",
            "design_space.Point",
            "design_space.identify",
            "design_space.named_point",
            "design_space.neighbours",
            "update_rule.Formula",
            "update_rule.UpdateRule",
            "update_rule.update_rule",
            "cost.Cost",
            "cost.cost",
            "cost.matched_hidden",
        )
    },
    **{
        f"ttr_edu.viz.{name}": "the design-space explorer's figures and widget: they draw the diagnostics of a Point "
        "(tests/viz/test_design_space.py); no tensor input"
        for name in (
            "design_space.frontier_costs",
            "design_space.point_figure",
            "design_space.point_of",
            "design_space.point_text",
            "design_space.static_explorer",
            "explorer.DesignSpaceExplorer",
            "explorer.design_space_explorer",
        )
    },
    "ttr_edu.layers.RegressionMixer": "the generic path's mixer, built at a design-space Point: registered by "
    "register_point, it runs the layer suite (shapes, gradients, causality, step == forward, named bad input) in "
    "tests/layers/test_regression_mixer.py, and its point's errors are the catalogue's",
    "ttr_edu.layers.register_point": "registers a RegressionMixer at a Point (no tensor input): tested in "
    "tests/layers/test_regression_mixer.py",
}
#: Modules another branch is rewriting: their targets run and are counted, and a bad outcome is an expected failure
#: (xfail, not strict) until that branch lands, with the reason.
OWNED_ELSEWHERE: dict[str, str] = {}
#: Size ranges drawn for each named dim (a recipe may override them).
SIZE_RANGES = dict(B=(1, 2), T=(1, 5), H=(1, 2), D_k=(1, 4), D_v=(1, 3), N=(1, 4), M=(1, 4), D_h=(1, 3))
#: Seconds before a case counts as a hang (the machine may be loaded: generous).
CASE_SECONDS = float(os.environ.get("TTR_FUZZ_CASE_SECONDS", "20"))
TALLY: dict[str, dict[str, int]] = {}
BY_CLASS: dict[str, dict[str, int]] = {}  # input class (fuzz.CLASSES) -> outcome -> cases
FAILURES: dict[str, list[str]] = {}


def public_modules():
    """Every public module of the package (no part of its name private), with whether it is fuzzed."""
    names = ["ttr_edu"]
    names += [m.name for m in pkgutil.walk_packages(ttr_edu.__path__, "ttr_edu.")]
    for name in sorted(names):
        parts = name.split(".")
        if any(p.startswith("_") for p in parts[1:]):
            continue
        yield name, not any(name == x or name.startswith(x + ".") for x in EXCLUDED_MODULES)


def public_callables() -> dict[int, tuple[object, list[str]]]:
    """id -> (object, its public paths) for every callable listed in the ``__all__`` of a fuzzed public module."""
    found: dict[int, tuple[object, list[str]]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for name, fuzzed in public_modules():
            if not fuzzed:
                continue
            module = importlib.import_module(name)
            for attr in getattr(module, "__all__", ()):
                obj = getattr(module, attr)
                if callable(obj):
                    found.setdefault(id(obj), (obj, []))[1].append(f"{name}.{attr}")
    return found


def test_every_public_module_lists_its_names():
    missing = []
    for name, fuzzed in public_modules():
        module = importlib.import_module(name)
        if fuzzed and name != "ttr_edu" and not hasattr(module, "__all__") and name not in NAMESPACES:
            missing.append(name)
    assert not missing, f"public modules without __all__ (add one, or a reason in NAMESPACES): {missing}"


def test_every_public_callable_is_fuzzed_or_excluded():
    """A new public function cannot escape the fuzz: it needs a recipe in tests/helpers/fuzz_targets.py or a reason
    in EXCLUDED."""

    def covered(path):
        return path in EXCLUDED or path in TARGETS or any(t.startswith(path + ".") for t in TARGETS)

    missing = sorted(paths[0] for _, paths in public_callables().values() if not any(covered(p) for p in paths))
    assert not missing, f"public callables with no fuzz recipe and no reason in EXCLUDED: {missing}"
    known = {p for _, paths in public_callables().values() for p in paths}

    def public(name):  # the name itself or a method of a public class (name.method, name.method.variant)
        parts = name.split(".")
        return any(".".join(parts[:i]) in known for i in range(len(parts), 2, -1))

    stale = sorted(n for n in [*TARGETS, *EXCLUDED] if not public(n))
    assert not stale, f"recipes or exclusions for names that are not public: {stale}"


def _cases(target, sizes, seed, dtype):
    """(label, thunk building the call's args, expectation) for the valid call and each mutation."""

    def ctx_for(sz):
        shared = {}
        for kind in target.args.values():
            for sub in getattr(kind, "parts", (kind,)):
                for d in {d for d in getattr(sub, "dims", ()) if isinstance(d, str)}:
                    shared[d] = shared.get(d, 0) + 1
        linked = sum(1 for k in target.args.values() if isinstance(k, fuzz.F) and k.linked)
        return fuzz.Ctx(
            dict(sz),
            torch.Generator().manual_seed(seed),
            dtype,
            frozenset(d for d, n in shared.items() if n > 1),
            linked,
        )

    def build(sz):
        ctx = ctx_for(sz)
        return {name: kind.make(ctx) for name, kind in target.args.items()}, ctx

    yield "valid", lambda: build(sizes)[0], "valid"
    base, ctx = build(sizes)
    for name, kind in target.args.items():
        for label, thunk, expect in kind.mutations(base[name], ctx):
            if f"{name}:{label}" in target.skip or (label == "beyond_int64" and f"{name}:huge" in target.skip):
                continue

            def make(name=name, thunk=thunk):
                args = build(sizes)[0]
                args[name] = thunk()
                return args

            yield f"{name}:{label}", make, expect
    for d in target.empty:
        if d in sizes:
            yield f"empty:{d}", lambda d=d: build({**sizes, d: 0})[0], "bad"
    if "all_meta" not in target.skip and any(_to_meta(v) is not v for v in base.values()):  # shapes only
        yield "all_meta", lambda: {n: _to_meta(v) for n, v in build(sizes)[0].items()}, "either"


def _to_meta(value):
    """``value`` with every tensor (inside tuples and lists too) moved to the meta device."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("meta")
    if isinstance(value, tuple) and value and any(isinstance(v, torch.Tensor) for v in value):
        items = [_to_meta(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, list) and any(isinstance(v, torch.Tensor) for v in value):
        return [_to_meta(v) for v in value]
    return value


def _run_target(target, data):
    sizes = {}
    for d in sorted(target.dims()):
        lo, hi = target.sizes.get(d) or SIZE_RANGES.get(d, (1, 3))
        sizes[d] = data.draw(st.integers(lo, hi), label=d)
    seed = data.draw(st.integers(0, 2**16), label="seed")
    dtype = (
        data.draw(st.sampled_from([torch.float32, torch.float64]), label="dtype")
        if target.dtype is None
        else (target.dtype)
    )
    allowed = set(target.args) | set(target.names) | {"o"}  # o: an output that overflows its dtype (guarded)
    tally = TALLY.setdefault(target.name, {})
    invalid_sizes = target.valid_when is not None and not target.valid_when(sizes)
    for label, make, expect in _cases(target, sizes, seed, dtype):
        if invalid_sizes and expect == "valid":  # at these sizes the call itself is bad (causal_lm_loss at T = 1)
            expect = "bad"
        try:
            args = make()
        except Exception as error:  # a recipe that cannot build its case is a bug of the test
            raise AssertionError(f"{target.name} {label}: the recipe failed: {error!r}") from error
        for arg, value in args.items():  # a mutation that breaks the input only at some sizes says so itself
            if isinstance(value, fuzz.As):
                args[arg], expect = value.value, value.expect
        outcome = fuzz.classify(
            lambda: target.call(**args),
            expect,
            allowed,
            target.check,
            target.limit or CASE_SECONDS,
            target.errors,
            target.finite,
        )
        tally[outcome.kind] = tally.get(outcome.kind, 0) + 1
        by_class = BY_CLASS.setdefault(fuzz.class_of(label), {})
        by_class[outcome.kind] = by_class.get(outcome.kind, 0) + 1
        if outcome.kind != "clean":
            FAILURES.setdefault(target.name, []).append(
                f"{outcome.kind}: {label} (expect {expect}; sizes {sizes}, {dtype}): {outcome.detail}"
            )


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_public_callable_is_never_silent_obscure_or_hanging(name):
    target = TARGETS[name]
    if name in KERNEL_TARGETS and not kernels_runnable():
        pytest.skip("the kernels run on a GPU or in Triton's interpreter (TRITON_INTERPRET=1 before triton loads)")
    FAILURES.pop(name, None)

    # two examples per scale unit: hypothesis's first is the simplest (the smallest sizes, float32), the rest vary
    @settings(max_examples=2 * SCALE, deadline=None, database=None, phases=[Phase.generate])
    @given(data=st.data())
    def run(data):
        _run_target(target, data)

    run()
    failures = FAILURES.get(name, [])
    owner = next((reason for prefix, reason in OWNED_ELSEWHERE.items() if name.startswith(prefix)), None)
    if failures and owner:
        pytest.xfail(f"{owner}: {len(failures)} bad outcomes, e.g. {failures[0]}")
    assert not failures, f"{len(failures)} bad outcomes:\n" + "\n".join(failures[:30])


def teardown_module():
    print(f"\nfuzz outcomes: {dict(sorted(COUNTS.items()))}")
    totals: dict[str, int] = {}
    for counts in TALLY.values():
        for kind, n in counts.items():
            totals[kind] = totals.get(kind, 0) + n
    print(
        f"public-callable fuzz: {sum(totals.values())} cases over {len(TALLY)} targets: {dict(sorted(totals.items()))}"
    )
    for name, counts in sorted(BY_CLASS.items()):
        print(f"  {name}: {dict(sorted(counts.items()))}")
    report = os.environ.get("TTR_FUZZ_REPORT")
    if report:
        with open(report, "w") as out:
            summary = {"totals": totals, "by_class": BY_CLASS, "targets": TALLY, "failures": FAILURES}
            json.dump(summary, out, indent=1, sort_keys=True)

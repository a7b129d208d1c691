"""Checks for the Triton kernels chapter (12_triton_kernels), puzzle style (after Triton-Puzzles).

The student writes a ``@triton.jit`` kernel; its check launches it on seeded random inputs and compares the result
with a plain PyTorch **spec**, reporting the first wrong element. Where the kernel runs:

* defined with ``TRITON_INTERPRET=1`` set (``@triton.jit`` reads the variable when it decorates the function), it is
  an interpreted function and runs on CPU tensors in Triton's interpreter, made GPU-honest by
  :mod:`ttr_edu.checks._triton_sanitizer`: plain-tf32 ``tl.dot`` products are rounded to tf32, masked-off lanes of a
  load without ``other=`` are NaN, and an address outside every tensor is refused before the access;
* defined without it, on a machine with CUDA, it is compiled and runs on CUDA tensors (the GPU itself then shows
  tf32 and undefined lanes);
* defined without it and without CUDA, the check says how to turn the interpreter on.

Two guards make the usual kernel bugs visible in both cases:

* every input and output sits inside a band of NaN in memory, so an unmasked read just past the end turns into NaN
  in the result (a wrong element), and a write past the end of an output is reported by name (inputs and outputs use
  NaNs with different bit patterns, so even copying an input's NaN into an output's band is seen);
* outputs start as NaN, so an element the kernel never writes is a wrong element too.

A ``tl.dot`` below the GPU's minimum size (an inner size of 1, say) is refused as the compiler refuses it: the
interpreter is told the NVIDIA backend's minimum for the check's launches.

Two GPU bugs cannot show at test sizes in any run, so once a kernel computes the right numbers its **source** is read
(:func:`lint_kernel`, with :mod:`ast`): every ``tl.dot`` must state its precision (``input_precision=``, by keyword
or as the fourth argument, or the deprecated ``allow_tf32=False``; without either an fp32 product runs in tf32 on a
GPU, whatever the interpreter does), and a kernel addressing the ``(B, T, H, D)`` layout must compute its offsets in
int64 (a program id or a size widened with ``.to(tl.int64)``, ``tl.cast(…, tl.int64)`` or by promotion, adding an int64
``tl.zeros``, before the product), or they
overflow int32 once a tensor has 2³¹ elements.

No Triton import happens at import time: launching a kernel needs only the kernel object.

Each puzzle is declared once (:func:`ttr_edu.checks._rules.exercise`): its spec, its cases, how the kernel is launched
on a case (the declaration's ``call``) and, as a rule read from the kernel's source, the lint (``Rules.source``),
reported once every case agrees.
"""

from __future__ import annotations

import ast
import inspect
import math
import textwrap
from collections.abc import Callable, Iterator

import torch

from ttr_edu import ops
from ttr_edu.checks._core import CheckFailed, relative_error
from ttr_edu.checks._rules import Rules, exercise
from ttr_edu.checks._triton_sanitizer import DOT_TOO_SMALL, KernelMemoryError, sanitized
from ttr_edu.checks.chunkwise_algorithms import ut_transform_spec

__all__ = [
    "check_scale_tile",
    "check_causal_chunk",
    "check_chunk_linear_attention",
    "check_ut_transform",
    "check_running_sum",
    "check_delta_rule_chunk",
    "check_gated_delta_rule_chunk",
    "check_chunk_dv",
    "lint_kernel",
    "scale_tile_spec",
    "causal_chunk_spec",
    "chunk_linear_attention_spec",
    "running_sum_spec",
    "delta_rule_chunk_spec",
    "gated_delta_rule_chunk_spec",
    "chunk_dv_spec",
]

GUARD = 4096  # NaN elements on each side of every tensor handed to a kernel
#: ``(rtol, atol)`` of the puzzles whose products must be fp32-accurate: an ``ieee`` kernel is within about 3e-6 of the
#: references here, a plain-tf32 one about 1e-4 relative or more off, so both sides keep a margin of several times.
DOT_TOLERANCE = (2e-5, 2e-5)
INPUT_NAN, OUTPUT_NAN = 0x7FC01111, 0x7FC02222  # two quiet-NaN bit patterns (as int32) for the bands


#: relative errors (‖got − want‖ / ‖want‖) that tf32 products give on fp32 inputs: tf32 keeps 10 bits of mantissa
#: (a rounding of 2⁻¹¹ ≈ 4.9e-4 per operand), which sums over a product's terms to about 1e-4 to 1e-3
TF32_BAND = (5e-5, 5e-3)


def _tf32_note(reference):
    """The ``explain`` hook of a puzzle whose products must be fp32-accurate: when a failure's relative error is the
    size of tf32 rounding on fp32 inputs, say so and name the fix (``tl.dot(..., input_precision="ieee")``)."""

    def explain(message: str, case: dict, result) -> str:
        if not all(t.dtype == torch.float32 for t in case.values() if isinstance(t, torch.Tensor)):
            return ""
        cosine = _mean_key_cosine(case)
        if cosine is not None and cosine > 0.9:
            return (
                f"\n  this case's keys are correlated (mean cosine {cosine:.3f}) and β = 1: an inverse of I + A built "
                "from a few products (the Neumann series by doubling) cancels terms far larger than the inverse here, "
                "and forward substitution (puzzle 12.4) does not. If your products are ieee, look at the inverse."
            )
        want = reference(**case)
        pairs = zip(result, want) if isinstance(want, tuple) and isinstance(result, tuple | list) else [(result, want)]
        errors = [
            relative_error(g, w)
            for g, w in pairs
            if isinstance(g, torch.Tensor) and isinstance(w, torch.Tensor) and g.shape == w.shape
        ]
        if not errors or not TF32_BAND[0] <= max(errors) <= TF32_BAND[1]:
            return ""
        return (
            f"\n  an error of {max(errors):.2g} relative on fp32 inputs is the size of TF32 rounding: a tl.dot "
            "without input_precision multiplies in tf32 on a GPU (10 bits of mantissa), and so does this check. Write "
            'tl.dot(a, b, input_precision="ieee") for fp32-accurate products (fla writes allow_tf32=False).'
        )

    return explain


def _mean_key_cosine(case: dict) -> float | None:
    """The mean cosine between distinct keys of a case's first chunk (16 rows) when its β is all ones, else None: the
    correlated-keys cases of 12.4, 12.6 and 12.7, where an unstable inverse fails with errors of tf32's size."""
    k, beta = case.get("k"), case.get("beta")
    if not isinstance(k, torch.Tensor) or not isinstance(beta, torch.Tensor) or not bool((beta == 1).all()):
        return None
    rows = k.reshape(-1, k.shape[-1])[:16] if k.dim() == 2 else k[0, :16, 0]
    if rows.shape[0] < 2:
        return None
    unit = rows / rows.norm(dim=-1, keepdim=True)
    cosines = unit @ unit.T
    n = rows.shape[0]
    return float((cosines.sum() - cosines.diagonal().sum()) / (n * (n - 1)))


def _pow2(n: int, least: int = 16) -> int:
    """The smallest power of two ≥ max(n, least). Tile sides must be powers of two; ``least = 16`` keeps every
    ``tl.dot`` side at 16 or more, which any GPU target accepts (Triton 3.9 needs only K ≥ 8 for fp32 on NVIDIA)."""
    return max(least, 1 << max(0, math.ceil(math.log2(max(n, 1)))))


def _is_interpreted(kernel) -> bool:
    return type(kernel).__name__ == "InterpretedFunction"


def _device_for(kernel) -> torch.device:
    """Where the check runs ``kernel``: the interpreter on CPU tensors, or the compiled kernel on a CUDA device."""
    if _is_interpreted(kernel):
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    raise RuntimeError(
        "your kernel is compiled for a GPU, and there is none here: run os.environ['TRITON_INTERPRET'] = '1' "
        "(the first code cell does), then re-run the cell that defines the kernel. @triton.jit reads the variable "
        "when it decorates the function, so only the definition has to run again."
    )


class _Guarded:
    """A tensor living in the middle of a NaN-filled buffer on ``device``; ``.tensor`` is the (contiguous) view."""

    def __init__(self, name: str, shape, values: torch.Tensor | None = None, device: torch.device | str = "cpu"):
        n = math.prod(shape)
        self.name = name
        self.pattern = OUTPUT_NAN if values is None else INPUT_NAN
        self.bits = torch.full((n + 2 * GUARD,), self.pattern, dtype=torch.int32, device=device)
        self.tensor = self.bits.view(torch.float32)[GUARD : GUARD + n].view(*shape)
        if values is not None:
            self.tensor.copy_(values)

    @property
    def address_range(self) -> tuple[str, int, int]:
        """``(name, first byte, one past the last byte)`` of the whole buffer, guard bands included."""
        start = self.bits.data_ptr()
        return self.name, start, start + self.bits.numel() * self.bits.element_size()

    def result(self) -> torch.Tensor:
        """The output, checked for writes into its bands, as a CPU tensor."""
        self.check_untouched()
        return self.tensor.detach().cpu().clone()

    def check_untouched(self) -> None:
        bands = torch.cat([self.bits[:GUARD], self.bits[-GUARD:]])
        if not (bands == self.pattern).all():
            written = int((bands != self.pattern).sum())
            raise CheckFailed(
                f"your kernel wrote {written} element(s) outside `{self.name}` (shape {tuple(self.tensor.shape)}): "
                "a store without a mask, or with the wrong one"
            )


def _interpreter_unsupported(error: BaseException) -> str | None:
    """What to tell a student whose kernel called something Triton's CPU interpreter does not implement, or None.

    A ``NotImplementedError`` raised inside Triton itself is not the exercise's stub (which raises it in the student's
    own function): in Triton 3.9.0, ``tl.make_block_ptr`` and ``tl.advance`` are builtins whose only statement raises
    it ("Block pointers have been removed in favor of the tensor descriptor API", ``triton/language/core.py``
    lines 2518-2538 of the 3.9.0 wheel, on every backend, not only in the interpreter), so a kernel written with block
    pointers would otherwise read as "not attempted yet" (its last frame is the first statement of the function that
    raised).
    """
    import sys
    from pathlib import Path

    triton = sys.modules.get("triton")
    if triton is None or triton.__file__ is None:
        return None
    triton_dir = str(Path(triton.__file__).resolve().parent)
    seen: set[int] = set()
    err: BaseException | None = error
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, NotImplementedError):
            tb = err.__traceback__
            while tb is not None and tb.tb_next is not None:
                tb = tb.tb_next
            if tb is not None and str(Path(tb.tb_frame.f_code.co_filename).resolve()).startswith(triton_dir):
                called = tb.tb_frame.f_code.co_name
                if called in ("make_block_ptr", "advance"):
                    return (
                        f"your kernel calls tl.{called}: Triton has removed block pointers in favour of tensor "
                        f"descriptors (in Triton {getattr(triton, '__version__', '?')} tl.{called} raises "
                        f"NotImplementedError: {err}, on a GPU as in the interpreter the check runs), so this kernel "
                        "cannot run; address the tiles with pointer arithmetic (a base pointer plus offsets from "
                        "tl.arange, masked at the edges) instead"
                    )
                return (
                    f"your kernel calls {called}, which Triton's CPU interpreter does not implement "
                    f"(NotImplementedError: {err}); the check cannot run it: write it with what the interpreter runs"
                )
        err = err.__cause__ or err.__context__
    return None


def _launch(kernel, grid, buffers: list[_Guarded], *scalars, **constants) -> None:
    """Launch ``kernel[grid](*tensors, *scalars, **constants)``, the tensors being the views of ``buffers``.

    Interpreted kernels run under :func:`sanitized` with the buffers as the only memory they may touch. An unsolved
    stub surfaces as ``NotImplementedError``; one raised inside Triton (block pointers,
    :func:`_interpreter_unsupported`) is a :class:`CheckFailed` that says so; an access outside every buffer and
    any other error the interpreter reports become a :class:`CheckFailed` that says what to look at.
    """
    tensors = [b.tensor for b in buffers]
    if not _is_interpreted(kernel):  # compiled, on CUDA (see _device_for): the GPU is the judge
        kernel[grid](*tensors, *scalars, **constants)
        torch.cuda.synchronize()
        return
    try:
        with sanitized([b.address_range for b in buffers]):
            kernel[grid](*tensors, *scalars, **constants)
    except Exception as error:  # the interpreter wraps what the kernel body raised in an InterpreterError
        cause = error.__cause__ or error
        unsupported = _interpreter_unsupported(error)
        if unsupported is not None:
            raise CheckFailed(unsupported) from error
        if isinstance(error, NotImplementedError) or isinstance(cause, NotImplementedError):
            raise NotImplementedError() from error
        if isinstance(cause, KernelMemoryError):
            raise CheckFailed(str(cause)) from None
        if isinstance(cause, AssertionError) and str(cause).startswith(DOT_TOO_SMALL):
            raise CheckFailed(
                f'a tl.dot in your kernel multiplies tiles smaller than a GPU compiles: Triton says "{cause}" '
                "(its NVIDIA backend's minimum, printed in section 2). Triton's own interpreter lets it run, the "
                "check does not, because compiled for a GPU this kernel stops with that error. The traceback above "
                "(scroll up) points at the line. An outer product of two vectors, k vᵀ, is k[:, None] * v[None, :] "
                "(a broadcast), not a tl.dot with an inner size of 1; or multiply whole tiles, K_nᵀ V_n."
            ) from error
        if type(error).__name__ == "InterpreterError":
            raise CheckFailed(
                f"Triton's interpreter stopped your kernel: {type(cause).__name__}: {cause}. The traceback above "
                "this message (scroll up) points at the line of your kernel. The interpreter runs a subset of "
                "Triton: tile sides must be powers of two, `tl.constexpr` parameters must be passed by name, and "
                "shapes must broadcast as in NumPy."
            ) from error
        raise


# ---------------------------------------------------------------------------------------------------------------
# Reading the kernel's source: what no run at test sizes can show.


def _kernel_source(kernel) -> str | None:
    """The Python source of a ``@triton.jit`` kernel (interpreted or compiled), or None when it is not available."""
    fn = getattr(getattr(kernel, "kernel", kernel), "fn", None)  # a wrapper with .kernel (tests), then JITFunction.fn
    try:
        return textwrap.dedent(inspect.getsource(fn)) if fn is not None else None
    except (OSError, TypeError):
        return None


def _is_tl(node: ast.AST, name: str) -> bool:
    """``node`` is ``tl.<name>`` (or ``triton.language.<name>``)."""
    return isinstance(node, ast.Attribute) and node.attr == name


def _argument(call: ast.Call, position: int, keyword: str) -> ast.AST | None:
    """The argument of ``call`` passed at ``position`` (0-based, after the callee's own object) or as ``keyword``."""
    for item in call.keywords:
        if item.arg == keyword:
            return item.value
    return call.args[position] if len(call.args) > position else None


def _int64_cast(call: ast.Call) -> ast.AST | None:
    """The operand that ``call`` converts to int64, or None: ``x.to(tl.int64)`` (also ``dtype=``) and
    ``tl.cast(x, tl.int64)`` (also ``dtype=``), the two spellings of a widening conversion."""
    if isinstance(call.func, ast.Attribute) and call.func.attr == "to":
        dtype = _argument(call, 0, "dtype")
        return call.func.value if dtype is not None and _is_tl(dtype, "int64") else None
    if _is_tl(call.func, "cast"):
        dtype = _argument(call, 1, "dtype")
        return _argument(call, 0, "input") if dtype is not None and _is_tl(dtype, "int64") else None
    return None


def _int64_tile(call: ast.Call) -> bool:
    """``call`` makes an int64 tile from constants: ``tl.zeros(shape, tl.int64)`` or ``tl.full(shape, value,
    tl.int64)`` (the dtype by position or as ``dtype=``). Added to an int32 index it widens it by type promotion
    (int32 with int64 is int64), a third spelling of the conversion."""
    for name, position in (("zeros", 1), ("full", 2)):
        if _is_tl(call.func, name):
            dtype = _argument(call, position, "dtype")
            return dtype is not None and _is_tl(dtype, "int64")
    return False


def _dot_precision_problem(call: ast.Call) -> str | None:
    """Why a ``tl.dot`` call runs in tf32 on a GPU, or None when it states another precision.

    Triton 3.9's ``tl.dot(input, other, acc, input_precision, allow_tf32, ...)``: a stated ``input_precision`` (by
    keyword or as the fourth argument) is used as written; ``allow_tf32=False`` (the deprecated spelling, fla's)
    means ``"ieee"``; with neither, an fp32 product defaults to tf32 on a GPU from sm_80 on."""
    if _argument(call, 3, "input_precision") is not None:
        return None
    allow = _argument(call, 4, "allow_tf32")
    if allow is None:
        return "has no input_precision: on a GPU, fp32 tiles are then multiplied in tf32"
    if isinstance(allow, ast.Constant) and allow.value is True:
        return "asks for tf32 (allow_tf32=True)"
    return None  # allow_tf32=False, or a name the kernel sets: stated, not left to the default


class _Width:
    """What :func:`lint_kernel` knows of an integer expression: whether it depends on a program id, and whether it is
    int64 (a ``.to(tl.int64)`` in it, or a name assigned from one: int32 with int64 promotes to int64)."""

    def __init__(self, pid: bool = False, wide: bool = False, runtime: bool = False) -> None:
        self.pid, self.wide, self.runtime = pid, wide, runtime  # runtime: depends on a non-constexpr argument


def _join(widths: list[_Width]) -> _Width:
    """A name that may hold any of ``widths`` (assigned in a branch, or around a loop): int64 only if all are."""
    return _Width(
        any(w.pid for w in widths), bool(widths) and all(w.wide for w in widths), any(w.runtime for w in widths)
    )


class _Definition:
    """One assignment of a name (``value``), or the name as a parameter of the function (``value`` None)."""

    def __init__(self, value: ast.AST | None, position: tuple[int, int], chain: tuple, kills: bool) -> None:
        # chain: the blocks around the statement, outermost first, as (id(statement), field); kills: a plain
        # assignment (not ``+=``), so the name's earlier values are gone after it
        self.value, self.position, self.chain, self.kills = value, position, chain, kills


_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_BUILTINS = {"min", "max", "range", "int", "float", "abs", "len", "static_range"}  # calls that are not helpers


def _helper_function(obj) -> Callable | None:
    """The Python function of a ``@triton.jit`` helper (compiled or interpreted), or None for anything else."""
    fn = getattr(obj, "fn", None)
    return fn if inspect.isfunction(fn) and type(obj).__name__ in ("JITFunction", "InterpretedFunction") else None


class _OffsetWidths:
    """Follows the names of a kernel's source through their assignments and finds, in every address a ``tl.load``,
    ``tl.store`` or ``tl.make_block_ptr`` computes, a product of a program id with a runtime size done in int32.

    A name is read at its use from the assignments that reach that line: the last one before it in straight-line
    code (``i_b = i_bh // H`` then ``i_b = i_b.to(tl.int64)``: int64 from the second line on), all of them where a
    branch or a loop joins (int64 only if every one is). Calls to ``@triton.jit`` helpers the kernel's module defines
    are followed with the caller's arguments bound to their parameters (``helpers``: the kernel's globals); a call
    the lint cannot read is remembered in ``unreadable``.
    """

    def __init__(
        self,
        tree: ast.AST,
        helpers: dict | None = None,
        bindings: list[_Width] | None = None,
        keywords: dict[str, _Width] | None = None,
        name: str = "",
        depth: int = 0,
    ) -> None:
        function = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)), None)
        self.function, self.label, self.depth = function, name, depth
        self.helpers = helpers or {}
        self.constexprs, self.arguments = set(), set()
        self.definitions: dict[str, list[_Definition]] = {}
        self.where: dict[int, tuple[tuple[int, int], tuple]] = {}  # id(node) -> (statement position, chain)
        self.parameter_widths: dict[str, _Width] = {}
        if function is not None:
            for i, arg in enumerate(function.args.args):
                self.arguments.add(arg.arg)
                constexpr = arg.annotation is not None and "constexpr" in ast.unparse(arg.annotation)
                if constexpr:
                    self.constexprs.add(arg.arg)
                if bindings is not None and i < len(bindings):
                    self.parameter_widths[arg.arg] = bindings[i]
                elif keywords is not None and arg.arg in keywords:
                    self.parameter_widths[arg.arg] = keywords[arg.arg]
                else:
                    self.parameter_widths[arg.arg] = _Width(runtime=not constexpr)
                self.definitions[arg.arg] = [_Definition(None, (0, 0), (), kills=True)]
            for statement in function.body:
                self._index(statement, ())
        self._cache: dict[tuple[int, ...], _Width] = {}
        self._visiting: set[int] = set()
        self.unreadable: dict[str, int] = {}  # helper name -> line of a call the lint could not follow
        self.unreadable_in_address: dict[str, int] = {}  # the same, for a call inside an address with int32 ids
        self._children: dict[int, _OffsetWidths | None] = {}

    # --- where every name is assigned and used

    def _index(self, statement: ast.stmt, chain: tuple) -> None:
        position = (statement.lineno, statement.col_offset)
        blocks = {"body", "orelse", "finalbody", "handlers"}
        for field, child in ast.iter_fields(statement):
            if field in blocks and isinstance(child, list):
                for inner in child:
                    if isinstance(inner, ast.stmt):
                        self._index(inner, chain + ((id(statement), field, isinstance(statement, _LOOPS)),))
            elif isinstance(child, ast.AST):
                for node in ast.walk(child):
                    self.where[id(node)] = (position, chain)
            elif isinstance(child, list):
                for item in child:
                    if isinstance(item, ast.AST):
                        for node in ast.walk(item):
                            self.where[id(node)] = (position, chain)
        self.where[id(statement)] = (position, chain)
        if isinstance(statement, ast.Assign):
            for target in statement.targets:
                self._bind(target, statement.value, position, chain, kills=True)
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            self._bind(statement.target, statement.value, position, chain, kills=True)
        elif isinstance(statement, ast.AugAssign):
            self._bind(statement.target, statement.value, position, chain, kills=False)
        elif isinstance(statement, (ast.For, ast.AsyncFor)):
            self._bind(statement.target, statement.iter, position, chain + ((id(statement), "body", True),), True)

    def _bind(self, target: ast.AST, value: ast.AST, position, chain, kills: bool) -> None:
        if isinstance(target, ast.Name):
            self.definitions.setdefault(target.id, []).append(_Definition(value, position, chain, kills))
        elif isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
                for t, v in zip(target.elts, value.elts):
                    self._bind(t, v, position, chain, kills)
            else:
                for t in target.elts:
                    self._bind(t, value, position, chain, kills)

    def reaching(self, node: ast.Name) -> list[_Definition]:
        """The assignments of ``node.id`` whose value ``node`` may read: the last dominating one and any after it on
        the way (in a branch, ``+=``), plus those later in a loop around both (the value of the previous iteration)."""
        definitions = self.definitions.get(node.id, [])
        if id(node) not in self.where:  # a node the index never saw: every assignment (the old, joined reading)
            return list(definitions)
        position, chain = self.where[id(node)]
        before = sorted((d for d in definitions if d.position < position), key=lambda d: d.position)
        found: list[_Definition] = []
        for d in reversed(before):
            found.append(d)
            if d.kills and chain[: len(d.chain)] == d.chain:  # it dominates the use: nothing earlier survives it
                break
        for d in definitions:
            if d.position >= position and d.value is not None:
                shared = 0
                while shared < min(len(chain), len(d.chain)) and chain[shared] == d.chain[shared]:
                    shared += 1
                if any(block[2] for block in chain[:shared]):  # both inside one loop: the previous iteration's value
                    found.append(d)
        return found

    # --- widths

    def _definition_width(self, name: str, d: _Definition) -> _Width:
        if d.value is None:
            return self.parameter_widths.get(name, _Width())
        if id(d) in self._visiting:  # a loop-carried name: no new information
            return _Width()
        self._visiting.add(id(d))
        try:
            return self.expr(d.value)
        finally:
            self._visiting.discard(id(d))

    def name(self, node: ast.Name) -> _Width:
        found = self.reaching(node)
        if not found:
            runtime = node.id in self.arguments and node.id not in self.constexprs
            return _Width(runtime=runtime)
        key = tuple(sorted(id(d) for d in found))
        if key not in self._cache:
            width = _join([self._definition_width(node.id, d) for d in found])
            if not any(id(d) in self._visiting for d in found):
                self._cache[key] = width
            return width
        return self._cache[key]

    def helper(self, call: ast.Call) -> _OffsetWidths | None:
        """The lint of the ``@triton.jit`` helper ``call`` calls, its parameters bound to the call's arguments; None
        when ``call`` is no call of a helper by name. A helper whose source cannot be read is put in ``unreadable``."""
        if not isinstance(call.func, ast.Name) or call.func.id in _BUILTINS or call.func.id in self.definitions:
            return None
        if id(call) in self._children:
            return self._children[id(call)]
        self._children[id(call)] = None  # a helper calling itself: read once
        fn = _helper_function(self.helpers.get(call.func.id))
        source = None
        if fn is not None and self.depth < 4:
            try:
                source = textwrap.dedent(inspect.getsource(fn))
            except (OSError, TypeError):
                source = None
        if source is None:
            self.unreadable.setdefault(call.func.id, call.lineno)
            return None
        child = _OffsetWidths(
            ast.parse(source),
            helpers=getattr(fn, "__globals__", {}),
            bindings=[self.expr(a) for a in call.args],
            keywords={k.arg: self.expr(k.value) for k in call.keywords if k.arg is not None},
            name=call.func.id,
            depth=self.depth + 1,
        )
        self._children[id(call)] = child
        return child

    def returns(self) -> list[ast.AST]:
        if self.function is None:
            return []
        return [n.value for n in ast.walk(self.function) if isinstance(n, ast.Return) and n.value is not None]

    def expr(self, node: ast.AST) -> _Width:
        if isinstance(node, ast.Name):
            return self.name(node)
        if isinstance(node, ast.Constant):
            return _Width()
        if isinstance(node, ast.Call):
            if _is_tl(node.func, "program_id"):
                return _Width(pid=True)
            widened = _int64_cast(node)
            if widened is not None:
                inner = self.expr(widened)
                return _Width(inner.pid, True, inner.runtime)
            if isinstance(node.func, ast.Attribute) and node.func.attr == "to":  # another dtype: narrows again
                inner = self.expr(node.func.value)
                return _Width(inner.pid, False, inner.runtime)
            if _is_tl(node.func, "load"):  # data, not an index computed here
                return _Width()
            if _int64_tile(node):  # an int64 zero (or constant): what it is added to or multiplies is promoted
                return _Width(wide=True)
            child = self.helper(node)
            if child is not None:
                return _join([child.expr(value) for value in child.returns()])
            parts = [self.expr(a) for a in node.args]
            return _Width(any(p.pid for p in parts), any(p.wide for p in parts), any(p.runtime for p in parts))
        if isinstance(node, ast.BinOp):
            left, right = self.expr(node.left), self.expr(node.right)
            return _Width(left.pid or right.pid, left.wide or right.wide, left.runtime or right.runtime)
        if isinstance(node, ast.UnaryOp):
            return self.expr(node.operand)
        if isinstance(node, ast.Subscript):
            return self.expr(node.value)
        return _Width()

    def float64(self, node: ast.AST, seen: set[int] | None = None) -> bool:
        """``node`` is a tile of fp64 values: converted with ``.to(tl.float64)`` (or ``tl.cast``), made with
        ``dtype=tl.float64``, or computed from such a tile (fp32 with fp64 promotes to fp64); a later conversion to
        another dtype ends it. Loads count as fp32 (the puzzles' tensors)."""
        seen = set() if seen is None else seen
        if isinstance(node, ast.Name):
            found = [d for d in self.reaching(node) if d.value is not None and id(d) not in seen]
            seen.update(id(d) for d in found)
            return any(d.value is not None and self.float64(d.value, seen) for d in found)
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and node.func.attr == "to":
                dtype = _argument(node, 0, "dtype")
                return dtype is not None and _is_tl(dtype, "float64")
            if _is_tl(node.func, "cast"):
                dtype = _argument(node, 1, "dtype")
                return dtype is not None and _is_tl(dtype, "float64")
            if _is_tl(node.func, "load"):
                return False
            dtype = next((k.value for k in node.keywords if k.arg == "dtype"), None)
            if dtype is not None:
                return _is_tl(dtype, "float64")
            return any(self.float64(a, seen) for a in node.args)
        if isinstance(node, ast.BinOp):
            return self.float64(node.left, seen) or self.float64(node.right, seen)
        if isinstance(node, (ast.UnaryOp, ast.Subscript)):
            return self.float64(node.operand if isinstance(node, ast.UnaryOp) else node.value, seen)
        return False

    def _bounded_index(self, node: ast.AST) -> bool:
        """A name assigned only from ``x % N`` (a head index ``i_bh % H``): times one size it stays below a row of the
        tensor (``i_h * D``), so that product alone cannot overflow."""
        if not isinstance(node, ast.Name):
            return False
        found = self.reaching(node)
        return bool(found) and all(isinstance(d.value, ast.BinOp) and isinstance(d.value.op, ast.Mod) for d in found)

    def _narrow(self, product: ast.BinOp) -> bool:
        left, right = self.expr(product.left), self.expr(product.right)
        if left.wide or right.wide:
            return False
        for index, size in ((product.left, product.right), (product.right, product.left)):
            if self._bounded_index(index) and isinstance(size, (ast.Name, ast.Constant)):
                return False
        return (left.pid and (right.runtime or right.pid)) or (right.pid and (left.runtime or left.pid))

    def narrow_products(self, node: ast.AST, seen: set[int] | None = None) -> list[tuple[ast.BinOp, _OffsetWidths]]:
        """The outermost int32 products of a program id with a runtime size inside ``node``, following names and the
        values helpers return, each with the lint of the function it is written in."""
        seen = set() if seen is None else seen
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) and self._narrow(node):
            return [(node, self)]
        if isinstance(node, ast.Name):
            found = []
            for d in self.reaching(node):
                if d.value is not None and id(d) not in seen:
                    seen.add(id(d))
                    found.extend(self.narrow_products(d.value, seen))
            return found
        if isinstance(node, ast.Call):
            child = self.helper(node)
            if child is not None:
                found = [p for value in child.returns() for p in child.narrow_products(value)]
                return found + [p for a in node.args for p in self.narrow_products(a, seen)]
            if (
                isinstance(node.func, ast.Name)
                and node.func.id in self.unreadable
                and any(self.expr(a).pid and not self.expr(a).wide for a in node.args)
            ):
                self.unreadable_in_address.setdefault(node.func.id, node.lineno)
        return [p for child in ast.iter_child_nodes(node) for p in self.narrow_products(child, seen)]

    def helper_calls(self) -> Iterator[tuple[ast.Call, _OffsetWidths]]:
        """Every call of a readable ``@triton.jit`` helper in this function, with the helper's bound lint."""
        for node in ast.walk(self.function) if self.function is not None else ():
            if isinstance(node, ast.Call):
                child = self.helper(node)
                if child is not None:
                    yield node, child


def _addresses(tree: ast.AST) -> Iterator[tuple[ast.Call, ast.AST]]:
    """``(call, address expression)`` for every pointer a kernel loads from, stores to or builds a block pointer on."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if _is_tl(node.func, "load") or _is_tl(node.func, "store"):
            pointer = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "pointer"), None)
            if pointer is not None:
                yield node, pointer
        elif _is_tl(node.func, "make_block_ptr"):
            for keyword in node.keywords:
                if keyword.arg in ("base", "offsets"):
                    yield node, keyword.value


def lint_kernel(kernel, *, needs_int64: bool) -> list[str]:
    """Problems a GPU would show and the interpreter cannot, found in ``kernel``'s source (empty: none found).

    * a ``tl.dot`` that leaves its precision to the default (no ``input_precision``, by keyword or fourth argument,
      and no ``allow_tf32=False``) or asks for tf32: on a GPU an fp32 product then runs in tf32;
    * with ``needs_int64``: an address (of a ``tl.load``, a ``tl.store`` or a block pointer) that multiplies a program
      id, or a name computed from one, by a runtime size (``T``, ``H``, ``D``: not a ``tl.constexpr``) with neither
      factor in int64, such as ``i_b * T`` in ``((i_b * T + t) * H + i_h) * D`` with ``i_b`` and ``T`` left int32:
      past 2³¹ elements it overflows. Widening either factor (``i_b.to(tl.int64)``, ``tl.cast(i_b, tl.int64)``,
      ``T.to(tl.int64)``, or by promotion, ``i_b + tl.zeros([], dtype=tl.int64)``) makes the product int64. Every
      address is checked, so widening one program id (for the state) while the inputs' offsets stay int32 is still
      reported. A kernel with no int64 conversion at all (of a
      program id or a size) is reported too.

    Products of in-sequence indices (``t * H * D``, from ``tl.arange`` and a loop over ``T``) are not reported: they
    stay below ``T * H * D``, which the package's wrappers keep under 2³⁰
    (:data:`ttr_edu.kernels._dispatch.MAX_SLICE`).
    """
    source = _kernel_source(kernel)
    if source is None:
        return []
    tree = ast.parse(source)
    fn = getattr(getattr(kernel, "kernel", kernel), "fn", None)
    widths = _OffsetWidths(tree, helpers=getattr(fn, "__globals__", {}))
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _is_tl(node.func, "dot"):
            operands = [_argument(node, 0, "input"), _argument(node, 1, "other")]
            if all(o is not None and widths.float64(o) for o in operands):
                continue  # fp64 tiles: Triton ignores the precision options for them, there is no tf32 to fear
            problem = _dot_precision_problem(node)
            if problem is not None:
                problems.append(
                    f"line {node.lineno} of your kernel: `{ast.unparse(node)}` {problem} (about 1e-4 to 1e-3 relative "
                    'error, section 7). Pass input_precision="ieee" (or "tf32x3").'
                )
    if needs_int64:
        problems.extend(_int64_problems(tree, widths))
    return problems


def _int64_problems(tree: ast.AST, widths: _OffsetWidths) -> list[str]:
    """The int32 offsets :func:`lint_kernel` reports, in the kernel's addresses and in those of the helpers it calls."""
    found: list[tuple[int, ast.AST, ast.BinOp, _OffsetWidths]] = []  # (kernel line, callee, product, where written)

    def collect(owner: _OffsetWidths, function: ast.AST | None, line: int | None) -> None:
        if function is None:
            return
        for call, address in _addresses(function):
            for product, written in owner.narrow_products(address):
                found.append((line or call.lineno, call.func, product, written))
        for call, child in list(owner.helper_calls()):
            collect(child, child.function, line or call.lineno)

    collect(widths, tree, None)
    reported, narrow = set(), []
    for line, callee, product, written in found:
        text = ast.unparse(product)
        if (text, written.label) in reported:
            continue
        reported.add((text, written.label))
        names = sorted(
            {
                n.id
                for n in ast.walk(product)
                if isinstance(n, ast.Name) and written.expr(n).pid and not written.expr(n).wide
            }
        )
        source = ", ".join(f"`{n}`" for n in names) + " (from a program id)" if names else "a program id"
        place = f"line {product.lineno}" + (f" of the helper `{written.label}`" if written.label else "")
        narrow.append(
            f"line {line} of your kernel: the address of `{ast.unparse(callee)}` multiplies `{text}` ({place}) in "
            f"int32: {source} times a size, with neither factor in int64, overflows once a tensor holds 2**31 "
            "elements (B = 8, T = 65536, H = 32, D = 128 is enough), far beyond what a check can run. Widen a factor "
            "with .to(tl.int64) (or tl.cast(..., tl.int64)) before it is multiplied, in every offset that uses it."
        )
    if len(narrow) > 2:
        narrow = narrow[:2] + [f"(and {len(narrow) - 2} more addresses like these)"]
    for name, line in widths.unreadable_in_address.items():
        narrow.append(
            f"line {line} of your kernel: an address is computed by `{name}(...)`, which the check cannot read (it "
            "reads @triton.jit functions defined in a notebook cell or a file), from a program id still in int32, so "
            "it cannot tell whether the offset is int64. Widen the program id with .to(tl.int64) before you pass it."
        )

    def widens(owner: _OffsetWidths) -> bool:
        for node in ast.walk(owner.function) if owner.function is not None else ():
            operand = _int64_cast(node) if isinstance(node, ast.Call) else None
            if operand is not None and (owner.expr(operand).pid or owner.expr(operand).runtime):
                return True
            if isinstance(node, ast.BinOp):  # promotion: an index or a size combined with an int64 tile
                sides = [owner.expr(node.left), owner.expr(node.right)]
                if any(w.wide for w in sides) and any(w.pid or w.runtime for w in sides):
                    return True
        return any(widens(child) for _, child in owner.helper_calls())

    if not widens(widths) and not found and not widths.unreadable_in_address:
        narrow.append(
            "no program id and no size in your kernel is converted to int64, so its offsets, like "
            "((i_b * T + t) * H + i_h) * D, are int32 and overflow once a tensor holds 2**31 elements (B = 8, "
            "T = 65536, H = 32, D = 128 is enough), far beyond what a check can run. Convert the batch index (or "
            "i_bh) with .to(tl.int64) before you multiply, as the package's kernel does."
        )
    return narrow


def _on_a_gpu(*, needs_int64: bool) -> Callable[[Callable], str | None]:
    """A puzzle's rule read from the kernel's source (:attr:`ttr_edu.checks._rules.Rules.source`): what a GPU would
    show and the interpreter cannot (:func:`lint_kernel`), reported once the numbers agree, before ``PASS``."""

    def read_source(kernel) -> str | None:
        if _kernel_source(kernel) is None:  # nothing to read would be nothing found: a rule that could not fail
            return (
                "the check cannot read your kernel's source, so it cannot tell what a GPU would do with it; define "
                "the kernel with @triton.jit in a notebook cell or a file"
            )
        problems = lint_kernel(kernel, needs_int64=needs_int64)
        if not problems:
            return None
        return "your kernel computes the right numbers here, but on a GPU:\n  - " + "\n  - ".join(problems)

    return read_source


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------------------------------------------------
# Puzzle 1: a 2-D tile, loaded and stored with masks.


def scale_tile_spec(x: torch.Tensor, scale: float) -> torch.Tensor:
    """``out = scale · x`` for ``x`` of shape ``(T, D)``."""
    return scale * x


def _scale_tile_cases() -> Iterator[dict]:
    for i, (T, D) in enumerate([(4, 4), (5, 3), (9, 16), (1, 1), (13, 7)]):
        yield {"x": torch.randn(T, D, generator=_generator(1000 + i)), "scale": 0.5 + i}


def _launch_scale_tile(kernel, case: dict) -> torch.Tensor:
    x, scale = case["x"], case["scale"]
    T, D = x.shape
    device = _device_for(kernel)
    x_in, out = _Guarded("x", (T, D), x, device), _Guarded("out", (T, D), device=device)
    _launch(kernel, (math.ceil(T / 4),), [x_in, out], T, D, scale, BLOCK_T=4, BLOCK_D=_pow2(D, 1))
    return out.result()


@exercise(reference=scale_tile_spec, cases=_scale_tile_cases, call=_launch_scale_tile, rtol=1e-6, atol=1e-6)
def check_scale_tile(kernel) -> bool:
    """Check ``kernel(x_ptr, out_ptr, T, D, scale, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr)``.

    Launched on ``cdiv(T, BLOCK_T)`` programs with ``BLOCK_T = 4`` and ``BLOCK_D`` the next power of two ≥ D,
    program ``i`` owning rows ``[i·BLOCK_T, (i+1)·BLOCK_T)``; it must write ``out = scale · x``.
    """


# ---------------------------------------------------------------------------------------------------------------
# Puzzle 2: tl.dot, the causal product inside one chunk.


def causal_chunk_spec(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``(Q Kᵀ ⊙ M) V`` for one chunk, ``M`` the causal mask with its diagonal: ``q, k`` ``(C, D_k)``, ``v``
    ``(C, D_v)``."""
    return torch.tril(q @ k.T) @ v


def _causal_chunk_cases() -> Iterator[dict]:
    for i, (C, d_k, d_v) in enumerate([(16, 16, 16), (10, 5, 7), (16, 32, 8), (1, 3, 2), (13, 20, 24)]):
        g = _generator(1100 + i)
        yield {
            "q": torch.randn(C, d_k, generator=g),
            "k": torch.randn(C, d_k, generator=g),
            "v": torch.randn(C, d_v, generator=g),
        }


def _launch_causal_chunk(kernel, case: dict) -> torch.Tensor:
    q, k, v = case["q"], case["k"], case["v"]
    (C, d_k), d_v = q.shape, v.shape[1]
    device = _device_for(kernel)
    inputs = [_Guarded(n, t.shape, t, device) for n, t in (("q", q), ("k", k), ("v", v))]
    out = _Guarded("out", (C, d_v), device=device)
    _launch(kernel, (1,), inputs + [out], C, d_k, d_v, BLOCK_C=16, BLOCK_K=_pow2(d_k), BLOCK_V=_pow2(d_v))
    return out.result()


@exercise(
    reference=causal_chunk_spec,
    cases=_causal_chunk_cases,
    call=_launch_causal_chunk,
    rules=Rules(source=_on_a_gpu(needs_int64=False)),
    rtol=DOT_TOLERANCE[0],
    atol=DOT_TOLERANCE[1],
    explain=_tf32_note(causal_chunk_spec),
)
def check_causal_chunk(kernel) -> bool:
    """Check ``kernel(q_ptr, k_ptr, v_ptr, out_ptr, C, D_k, D_v, BLOCK_C, BLOCK_K, BLOCK_V)`` (block sizes constexpr).

    One program (grid ``(1,)``); ``C ≤ BLOCK_C``; it must write ``out = (Q Kᵀ ⊙ M) V`` to fp32 accuracy, so its
    products need ``input_precision="ieee"`` (or ``"tf32x3"``): a plain-tf32 ``tl.dot`` fails, as it would on a GPU.
    """


# ---------------------------------------------------------------------------------------------------------------
# Puzzle 3: a loop over chunks carrying the state.


def chunk_linear_attention_spec(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    """Causal linear attention on one head from a zero state, ``scale = 1``: returns ``(o, S_T)``."""
    o, S = ops.linear_attention_recurrent(
        q[None, :, None], k[None, :, None], v[None, :, None], scale=1.0, output_final_state=True
    )
    return o[0, :, 0], S[0, 0]


def _chunk_linear_attention_cases() -> Iterator[dict]:
    for i, (T, d_k, d_v) in enumerate([(16, 16, 16), (37, 8, 12), (1, 4, 4), (50, 16, 20)]):
        g = _generator(1200 + i)
        yield {
            "q": torch.randn(T, d_k, generator=g),
            "k": torch.randn(T, d_k, generator=g) / d_k**0.5,
            "v": torch.randn(T, d_v, generator=g),
        }


def _launch_chunk_linear_attention(kernel, case: dict):
    q, k, v = case["q"], case["k"], case["v"]
    (T, d_k), d_v = q.shape, v.shape[1]
    device = _device_for(kernel)
    inputs = [_Guarded(n, t.shape, t, device) for n, t in (("q", q), ("k", k), ("v", v))]
    o, S = _Guarded("o", (T, d_v), device=device), _Guarded("s", (d_k, d_v), device=device)
    _launch(kernel, (1,), inputs + [o, S], T, d_k, d_v, BLOCK_T=16, BLOCK_K=_pow2(d_k), BLOCK_V=_pow2(d_v))
    return o.result(), S.result()


@exercise(
    reference=chunk_linear_attention_spec,
    cases=_chunk_linear_attention_cases,
    call=_launch_chunk_linear_attention,
    rules=Rules(source=_on_a_gpu(needs_int64=False)),
    rtol=DOT_TOLERANCE[0],
    atol=DOT_TOLERANCE[1],
    explain=_tf32_note(chunk_linear_attention_spec),
)
def check_chunk_linear_attention(kernel) -> bool:
    """Check ``kernel(q_ptr, k_ptr, v_ptr, o_ptr, s_ptr, T, D_k, D_v, BLOCK_T, BLOCK_K, BLOCK_V)``.

    One program (grid ``(1,)``) walks the chunks of ``BLOCK_T = 16`` tokens with the state ``S`` ``(D_k, D_v)`` in
    registers, starting from zero; it writes ``o`` ``(T, D_v)`` and the final state to ``s_ptr``.
    """


# ---------------------------------------------------------------------------------------------------------------
# Puzzle 4: the UT transform by forward substitution.


def _ut_transform_cases() -> Iterator[dict]:
    for i, (C, d_k) in enumerate([(16, 16), (5, 3), (1, 4), (12, 20)]):
        g = _generator(1300 + i)
        k = torch.randn(C, d_k, generator=g)
        yield {"k": k / k.norm(dim=-1, keepdim=True), "beta": torch.rand(C, generator=g)}
    g = _generator(1301)  # correlated keys: one direction plus a little noise
    centre = torch.randn(16, generator=g)
    k = centre + 0.1 * centre.norm() / 4 * torch.randn(16, 16, generator=g)
    yield {"k": k / k.norm(dim=-1, keepdim=True), "beta": torch.ones(16)}


def _launch_ut_transform(kernel, case: dict) -> torch.Tensor:
    k, beta = case["k"], case["beta"]
    C, d_k = k.shape
    device = _device_for(kernel)
    k_in, beta_in = _Guarded("k", k.shape, k, device), _Guarded("beta", beta.shape, beta, device)
    out = _Guarded("out", (C, C), device=device)
    _launch(kernel, (1,), [k_in, beta_in, out], C, d_k, BLOCK_C=16, BLOCK_K=_pow2(d_k))
    return out.result()


@exercise(
    reference=ut_transform_spec,
    cases=_ut_transform_cases,
    call=_launch_ut_transform,
    rules=Rules(source=_on_a_gpu(needs_int64=False)),
    rtol=1e-5,
    atol=1e-6,
    explain=_tf32_note(ut_transform_spec),
)
def check_ut_transform(kernel) -> bool:
    """Check ``kernel(k_ptr, beta_ptr, out_ptr, C, D_k, BLOCK_C, BLOCK_K)`` against
    :func:`ttr_edu.checks.chunkwise_algorithms.ut_transform_spec`: ``out`` ``(C, C)`` is the UT matrix
    ``𝒯 = (I + tril(diag(β) K Kᵀ, −1))⁻¹ diag(β)``.

    One program (grid ``(1,)``), ``C ≤ BLOCK_C = 16``. The last case has correlated keys (mean cosine about 0.99) and
    ``β = 1``: forward substitution stays at fp32 rounding there (within a fifth of the tolerance in every entry),
    while the Neumann series ``Σ (−A)ⁿ`` by doubling, exact on the near-orthogonal cases, cancels terms far larger than
    the inverse and misses some entry by more than 10 times the tolerance (both bound by the check's tests; chapter 11
    measures why).
    """


# ---------------------------------------------------------------------------------------------------------------
# Puzzle 5: the (B, T, H, D) layout, head strides and a 2-D grid.


def running_sum_spec(x: torch.Tensor) -> torch.Tensor:
    """``out[b, t, h, d] = Σ_{s ≤ t} x[b, s, h, d]`` for ``x`` of shape ``(B, T, H, D)``."""
    return torch.cumsum(x, dim=1)


def _running_sum_cases() -> Iterator[dict]:
    # several heads and batches (the strides), D > BLOCK_D (the second grid axis), T not a multiple of BLOCK_T
    for i, shape in enumerate([(1, 16, 1, 16), (2, 37, 3, 20), (3, 5, 2, 40), (1, 1, 1, 1), (2, 20, 4, 7)]):
        yield {"x": torch.randn(*shape, generator=_generator(1400 + i))}


def _launch_running_sum(kernel, case: dict) -> torch.Tensor:
    x = case["x"]
    B, T, H, D = x.shape
    device = _device_for(kernel)
    x_in, out = _Guarded("x", x.shape, x, device), _Guarded("out", x.shape, device=device)
    _launch(kernel, (B * H, math.ceil(D / 16)), [x_in, out], T, H, D, BLOCK_T=16, BLOCK_D=16)
    return out.result()


@exercise(
    reference=running_sum_spec,
    cases=_running_sum_cases,
    call=_launch_running_sum,
    rules=Rules(source=_on_a_gpu(needs_int64=True)),
    rtol=1e-5,
    atol=1e-5,
)
def check_running_sum(kernel) -> bool:
    """Check ``kernel(x_ptr, out_ptr, T, H, D, BLOCK_T, BLOCK_D)`` on contiguous ``(B, T, H, D)`` tensors.

    Grid ``(B·H, cdiv(D, BLOCK_D))`` with ``BLOCK_T = BLOCK_D = 16``: program ``(i_bh, i_d)`` owns head
    ``i_bh % H`` of batch ``i_bh // H`` and columns ``[i_d·BLOCK_D, (i_d+1)·BLOCK_D)``, and walks the sequence in
    chunks of ``BLOCK_T`` rows. Element ``(b, t, h, d)`` sits at ``((b·T + t)·H + h)·D + d``.
    """


# ---------------------------------------------------------------------------------------------------------------
# Puzzle 6: the chunked delta-rule kernel, assembled.


def delta_rule_chunk_spec(q, k, v, beta, initial_state):
    """The package's chunked delta rule, ``scale = 1``: ``q, k`` ``(B, T, H, D_k)``, ``v`` ``(B, T, H, D_v)``,
    ``beta`` ``(B, T, H)``, ``initial_state`` ``(B, H, D_k, D_v)``; returns ``(o, final_state)``."""
    return ops.delta_rule_chunk(
        q, k, v, beta, scale=1.0, initial_state=initial_state, output_final_state=True, chunk_size=16
    )


#: the chunk length (``BLOCK_T``) that puzzles 12.6 and 12.7 are launched with
DELTA_BLOCK_T = 16


def _launch_delta_rule(kernel, case: dict):
    """Launch puzzle 12.6's kernel, or 12.7's when the case has a gate ``g`` (its pointer after ``beta``'s)."""
    q, v, initial_state = case["q"], case["v"], case["initial_state"]
    B, T, H, d_k = q.shape
    d_v = v.shape[-1]
    device = _device_for(kernel)
    named = [(n, case[n]) for n in ("q", "k", "v", "beta", "g") if n in case]
    inputs = [_Guarded(n, t.shape, t, device) for n, t in named]
    o = _Guarded("o", v.shape, device=device)
    s0 = _Guarded("s0", initial_state.shape, initial_state, device)
    s = _Guarded("s", initial_state.shape, device=device)
    grid = (B * H, math.ceil(d_v / 16))
    _launch(kernel, grid, inputs + [o, s0, s], T, H, d_k, d_v, BLOCK_T=DELTA_BLOCK_T, BLOCK_K=_pow2(d_k), BLOCK_V=16)
    return o.result(), s.result()


def _delta_rule_cases(seed: int, gated: bool) -> Iterator[dict]:
    # (B, T, H, D_k, D_v): one chunk; tail chunks with several heads and two value blocks; D_v not a multiple of 16
    for i, (B, T, H, d_k, d_v) in enumerate(
        [(1, 16, 1, 16, 16), (2, 20, 2, 8, 20), (1, 40, 1, 16, 24), (2, 5, 1, 4, 3)]
    ):
        g = _generator(seed + i)
        k = torch.randn(B, T, H, d_k, generator=g)
        case = {
            "q": torch.randn(B, T, H, d_k, generator=g),
            "k": k / k.norm(dim=-1, keepdim=True),
            "v": torch.randn(B, T, H, d_v, generator=g),
            "beta": torch.rand(B, T, H, generator=g),
        }
        if gated:  # decays from none to moderate: γ over a chunk of 16 falls as low as e^-8 (the strong one is last)
            case["g"] = -torch.rand(B, T, H, generator=g) * (0.5 if i % 2 else 0.1)
        case["initial_state"] = torch.randn(B, H, d_k, d_v, generator=g)  # nonzero: U − W S matters
        yield case
    # one chunk of correlated keys (one direction plus a little noise, mean cosine about 0.99) with β = 1, as in
    # puzzle 12.4's last case: an inverse by a few products (the Neumann series by doubling) misses here
    g = _generator(seed + 99)
    centre = torch.randn(16, generator=g)
    k = centre + 0.1 * centre.norm() / 4 * torch.randn(1, 16, 1, 16, generator=g)
    case = {
        "q": torch.randn(1, 16, 1, 16, generator=g),
        "k": k / k.norm(dim=-1, keepdim=True),
        "v": torch.randn(1, 16, 1, 16, generator=g),
        "beta": torch.ones(1, 16, 1),
    }
    if gated:  # a weak decay, which keeps the keys' correlation inside A
        case["g"] = -torch.rand(1, 16, 1, generator=g) * 0.01
    case["initial_state"] = torch.randn(1, 1, 16, 16, generator=g)
    yield case
    if gated:  # a strong decay: the running sum of g falls by STRONG_DECAY nats per token, 120 nats over a chunk
        g = _generator(seed + 98)
        k = torch.randn(1, 32, 1, 16, generator=g)
        yield {
            "q": torch.randn(1, 32, 1, 16, generator=g),
            "k": k / k.norm(dim=-1, keepdim=True),
            "v": torch.randn(1, 32, 1, 16, generator=g),
            "beta": torch.rand(1, 32, 1, generator=g),
            "g": torch.full((1, 32, 1), -STRONG_DECAY),
            "initial_state": torch.randn(1, 1, 16, 16, generator=g),
        }


#: the log decay per token of 12.7's strong-decay case: over a chunk of DELTA_BLOCK_T = 16 the exponent G_i − G_j
#: spans 15 · 8 = 120 nats, and exp overflows fp32 past log(3.4e38) ≈ 88.7 nats, so an exponential above the diagonal
#: is inf there
STRONG_DECAY = 8.0
FP32_EXP_LIMIT = math.log(torch.finfo(torch.float32).max)  # ≈ 88.72


def _strong_decay_note(inner: Callable[[str, dict, object], str]) -> Callable[[str, dict, object], str]:
    """The ``explain`` hook of puzzle 12.7: when a case whose decay spans more than fp32's ``exp`` range inside one
    chunk gets NaN or inf back, say why (an exponential above the diagonal overflowed, and a 0/1 mask multiplied it);
    else ``inner``'s note."""

    def explain(message: str, case: dict, result) -> str:
        g = case.get("g")
        outputs = result if isinstance(result, tuple | list) else [result]
        broken = any(isinstance(o, torch.Tensor) and not bool(torch.isfinite(o).all()) for o in outputs)
        if isinstance(g, torch.Tensor) and broken:
            chunks = g[0, :, 0].split(DELTA_BLOCK_T)  # the chunks the check launches the kernel with
            span = max(float(-c.sum() + c[0]) for c in chunks)  # G_last − G_first: the largest |G_i − G_j| in a chunk
            if span > FP32_EXP_LIMIT:
                return (
                    f"\n  this case's decay is strong (g = {float(g.min()):g} per token): inside a chunk the running "
                    f"sum of g spans {span:.0f} nats, and exp overflows fp32 past {FP32_EXP_LIMIT:.1f}. Above the "
                    "diagonal G_i − G_j is positive, its exponential is inf there, and inf times a 0/1 mask is NaN. "
                    "Either mask the exponent before the exponential (tl.where on G_i − G_j), or select the result "
                    "with tl.where, which discards the inf; never multiply an exponential by a 0/1 mask."
                )
        return inner(message, case, result)

    return explain


def _delta_rule_chunk_cases() -> Iterator[dict]:
    return _delta_rule_cases(1500, gated=False)


@exercise(
    reference=delta_rule_chunk_spec,
    cases=_delta_rule_chunk_cases,
    call=_launch_delta_rule,
    rules=Rules(source=_on_a_gpu(needs_int64=True)),
    rtol=DOT_TOLERANCE[0],
    atol=DOT_TOLERANCE[1],
    explain=_tf32_note(delta_rule_chunk_spec),
)
def check_delta_rule_chunk(kernel) -> bool:
    """Check ``kernel(q_ptr, k_ptr, v_ptr, beta_ptr, o_ptr, s0_ptr, s_ptr, T, H, D_k, D_v, BLOCK_T, BLOCK_K,
    BLOCK_V)``: the chunked delta rule (Yang et al. 2024, WY/UT form) on contiguous ``(B, T, H, D)`` tensors.

    Grid ``(B·H, cdiv(D_v, BLOCK_V))`` with ``BLOCK_T = 16``, ``BLOCK_V = 16`` and ``BLOCK_K`` the next power of two
    ≥ ``D_k``: program ``(i_bh, i_v)`` owns one head and one block of value columns, starts from its block of
    ``s0`` ``(B, H, D_k, D_v)``, writes ``o`` and stores its block of the final state at ``s_ptr``. Products must be
    fp32-accurate (``input_precision="ieee"``).
    """


# ---------------------------------------------------------------------------------------------------------------
# Puzzle 7: the gate.


def gated_delta_rule_chunk_spec(q, k, v, beta, g, initial_state):
    """The package's chunked gated delta rule, ``scale = 1``, chunks of 16: ``g`` ``(B, T, H)`` is the log decay;
    returns ``(o, final_state)``."""
    return ops.gated_delta_rule_chunk(
        q, k, v, g, beta, scale=1.0, initial_state=initial_state, output_final_state=True, chunk_size=16
    )


def _gated_delta_rule_chunk_cases() -> Iterator[dict]:
    return _delta_rule_cases(1700, gated=True)


@exercise(
    reference=gated_delta_rule_chunk_spec,
    cases=_gated_delta_rule_chunk_cases,
    call=_launch_delta_rule,
    rules=Rules(source=_on_a_gpu(needs_int64=True)),
    rtol=DOT_TOLERANCE[0],
    atol=DOT_TOLERANCE[1],
    explain=_strong_decay_note(_tf32_note(gated_delta_rule_chunk_spec)),
)
def check_gated_delta_rule_chunk(kernel) -> bool:
    """Check ``kernel(q_ptr, k_ptr, v_ptr, beta_ptr, g_ptr, o_ptr, s0_ptr, s_ptr, T, H, D_k, D_v, BLOCK_T, BLOCK_K,
    BLOCK_V)``: puzzle 12.6 with the gate (Yang et al. 2025; the gated chunk form of the chunkwise chapter).

    Launched as :func:`check_delta_rule_chunk`; ``g`` ``(B, T, H)`` is the log decay ``log α_t ≤ 0``, at
    ``(b T + t) H + h`` like ``beta``. The last case decays by :data:`STRONG_DECAY` nats per token, so inside a chunk
    ``G_i − G_j`` reaches 120 nats, past fp32's ``exp`` range (about 88.7): an exponential above the diagonal is inf
    there, and a kernel that multiplies it by a 0/1 mask (instead of masking the exponent, or selecting the result
    with ``tl.where``) returns NaN.
    """


# ---------------------------------------------------------------------------------------------------------------
# Puzzle 8: the backward pass, dV of one chunk.


def chunk_dv_spec(q, k, beta, do, ds):
    """``dV`` of one chunk of the delta rule (one head, ``scale = 1``) by **autograd** through
    :func:`ttr_edu.ops.delta_rule_chunk`: the gradient of ``⟨dO, O⟩ + ⟨dS, S_C⟩`` with respect to the values, for the
    chunk's ``q, k`` ``(C, D_k)``, ``beta`` ``(C,)``, ``do`` ``(C, D_v)`` and ``ds`` ``(D_k, D_v)``. It does not depend
    on ``v`` or on the initial state (both enter linearly), so neither is an input.

    Written out (the chunkwise chapter's backward): ``dV = 𝒯ᵀ ((Q Kᵀ ⊙ M)ᵀ dO + K dS)``.
    """
    C, d_v = do.shape
    v = torch.zeros(1, C, 1, d_v, dtype=torch.float64, requires_grad=True)
    S0 = torch.zeros(1, 1, k.shape[1], d_v, dtype=torch.float64)
    o, S = ops.delta_rule_chunk(
        q.double()[None, :, None],
        k.double()[None, :, None],
        v,
        beta.double()[None, :, None],
        scale=1.0,
        initial_state=S0,
        output_final_state=True,
        chunk_size=C,
        check_stability="ignore",
    )
    (dv,) = torch.autograd.grad((o[0, :, 0] * do.double()).sum() + (S[0, 0] * ds.double()).sum(), v)
    return dv[0, :, 0].to(do.dtype)


def _chunk_dv_cases() -> Iterator[dict]:
    for i, (C, d_k, d_v) in enumerate([(16, 16, 16), (10, 5, 7), (1, 3, 2), (13, 20, 24)]):
        g = _generator(1800 + i)
        k = torch.randn(C, d_k, generator=g)
        yield {
            "q": torch.randn(C, d_k, generator=g),
            "k": k / k.norm(dim=-1, keepdim=True),
            "beta": torch.rand(C, generator=g),
            "do": torch.randn(C, d_v, generator=g),
            "ds": torch.randn(d_k, d_v, generator=g),
        }


def _launch_chunk_dv(kernel, case: dict) -> torch.Tensor:
    q, do = case["q"], case["do"]
    (C, d_k), d_v = q.shape, do.shape[1]
    device = _device_for(kernel)
    inputs = [_Guarded(n, case[n].shape, case[n], device) for n in ("q", "k", "beta", "do", "ds")]
    dv = _Guarded("dv", (C, d_v), device=device)
    _launch(kernel, (1,), inputs + [dv], C, d_k, d_v, BLOCK_C=16, BLOCK_K=_pow2(d_k), BLOCK_V=_pow2(d_v))
    return dv.result()


@exercise(
    reference=chunk_dv_spec,
    cases=_chunk_dv_cases,
    call=_launch_chunk_dv,
    rules=Rules(source=_on_a_gpu(needs_int64=False)),
    rtol=DOT_TOLERANCE[0],
    atol=DOT_TOLERANCE[1],
    explain=_tf32_note(chunk_dv_spec),
)
def check_chunk_dv(kernel) -> bool:
    """Check ``kernel(q_ptr, k_ptr, beta_ptr, do_ptr, ds_ptr, dv_ptr, C, D_k, D_v, BLOCK_C, BLOCK_K, BLOCK_V)``:
    ``dV = 𝒯ᵀ ((Q Kᵀ ⊙ M)ᵀ dO + K dS)`` for one chunk, on one program, ``C ≤ BLOCK_C = 16``; ``do`` is ``(C, D_v)``,
    ``ds`` ``(D_k, D_v)``, all row-major."""

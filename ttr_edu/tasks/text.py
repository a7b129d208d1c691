"""A real text corpus that every install has, offline: the source code of Python's own standard library.

Provenance and licence. The text is the source of a fixed list of pure-Python modules of the *running*
interpreter's standard library (CPython, written by the Python developers, not by this project), read from disk
with no network. It is distributed with Python under the Python Software Foundation License Version 2 (PSF-2.0),
which allows copying and derived works; this package ships none of it, it only reads the copy you already have.

Tokens are bytes (a vocabulary of 256). The modules are concatenated in the fixed order of :data:`MODULES`, each
preceded by a one-line header ``# ==== <module> ====``; the byte stream is then cut into contiguous train / valid /
test parts (90 / 5 / 5 %), so valid and test are text (whole modules near the end of the list) the model never saw.
A different Python version has different sources: :attr:`TextCorpus.sha256` (of the whole stream) names the corpus
in every result, so numbers from two corpora are never compared by mistake.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from ttr_edu._internal.validation import check_allocation, check_positive_int, guarded

__all__ = ["MODULES", "SPLITS", "TextCorpus", "load_stdlib_corpus", "random_windows", "eval_windows"]

#: The standard-library modules read, in order (each exists, as pure Python, from 3.10 to 3.13).
MODULES: tuple[str, ...] = (
    "argparse",
    "ast",
    "calendar",
    "collections",
    "configparser",
    "csv",
    "dataclasses",
    "datetime",
    "difflib",
    "enum",
    "fractions",
    "functools",
    "heapq",
    "inspect",
    "ipaddress",
    "json.decoder",
    "json.encoder",
    "logging",
    "optparse",
    "pprint",
    "random",
    "shutil",
    "statistics",
    "string",
    "subprocess",
    "tarfile",
    "textwrap",
    "threading",
    "typing",
    "tokenize",
    "gettext",
    "locale",
    "pickle",
    "ftplib",
    "smtplib",
    "doctest",
)
#: Fractions of the byte stream in each split, in stream order.
SPLITS: dict[str, float] = {"train": 0.90, "valid": 0.05, "test": 0.05}


class CorpusError(RuntimeError):
    """The standard library's source is not on disk (some minimal Python builds ship only compiled files)."""


@dataclass(frozen=True)
class TextCorpus:
    """The byte corpus, split. Each split is a 1-D ``torch.uint8`` tensor of byte values.

    Attributes:
        train, valid, test: the three contiguous parts of the stream.
        sha256: hex digest of the whole stream (all three parts): the corpus's name in every result.
        python_version: the interpreter whose standard library was read, e.g. ``"3.11.7"``.
        modules: the modules read, in order.
    """

    train: torch.Tensor
    valid: torch.Tensor
    test: torch.Tensor
    sha256: str
    python_version: str
    modules: tuple[str, ...]

    def split(self, name: str) -> torch.Tensor:
        """The split called ``name`` (``"train"``, ``"valid"`` or ``"test"``)."""
        if name not in SPLITS:
            raise ValueError(f"name: expected one of {', '.join(SPLITS)}, got {name!r}")
        return getattr(self, name)

    def describe(self) -> str:
        """One line to print beside every result: source, sizes and hash."""
        sizes = ", ".join(f"{n} {len(self.split(n)):,} B" for n in SPLITS)
        return (
            f"corpus: Python {self.python_version} standard library, {len(self.modules)} modules "
            f"(PSF-2.0), bytes; {sizes}; sha256 {self.sha256[:16]}"
        )


def _module_source(name: str) -> bytes:
    spec = importlib.util.find_spec(name)
    origin = getattr(spec, "origin", None)
    if spec is None or origin is None or not origin.endswith(".py") or not Path(origin).is_file():
        raise CorpusError(
            f"the source of the standard-library module {name!r} is not on disk (found {origin!r}); "
            "this corpus needs a Python installed with its .py sources"
        )
    return Path(origin).read_bytes()


_CACHE: dict[str, TextCorpus] = {}


def load_stdlib_corpus() -> TextCorpus:
    """Read and split the corpus (cached per process; about 2 MB).

    Returns:
        A :class:`TextCorpus`.

    Raises:
        CorpusError: a module's ``.py`` source is missing.
    """
    version = ".".join(map(str, sys.version_info[:3]))
    if version not in _CACHE:
        stream = b"".join(f"# ==== {name} ====\n".encode() + _module_source(name) for name in MODULES)
        data = torch.frombuffer(bytearray(stream), dtype=torch.uint8)
        ends = [0]
        for fraction in SPLITS.values():
            ends.append(ends[-1] + round(fraction * len(data)))
        ends[-1] = len(data)
        parts = [data[a:b].clone() for a, b in zip(ends, ends[1:])]
        _CACHE[version] = TextCorpus(*parts, hashlib.sha256(stream).hexdigest(), version, MODULES)
    return _CACHE[version]


def _check_tokens(tokens: torch.Tensor, seq_len: int) -> None:
    """``tokens``: a 1-D integer tensor of byte values ``0..255`` (``uint8``, or any integer dtype), long enough."""
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"tokens: expected a 1-D tensor of byte values, got {type(tokens).__name__}")
    if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise TypeError(f"tokens: expected an integer tensor of byte values (uint8 or int64), got {tokens.dtype}")
    if tokens.dim() != 1:
        raise ValueError(f"tokens: expected a 1-D tensor (N,), got shape {tuple(tokens.shape)}")
    if tokens.device.type != "meta" and tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) > 255):
        raise ValueError(
            f"tokens: expected byte values in [0, 255], got range [{int(tokens.min())}, {int(tokens.max())}]"
        )
    if len(tokens) < seq_len + 1:
        raise ValueError(f"seq_len: needs at least seq_len + 1 = {seq_len + 1} tokens, the split has {len(tokens)}")


@guarded
def random_windows(
    tokens: torch.Tensor, batch_size: int, seq_len: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """``batch_size`` windows of ``seq_len + 1`` consecutive tokens at random offsets, ``(B, seq_len + 1)`` int64.

    The model reads positions ``[:-1]`` and predicts ``[1:]``.

    Raises:
        TypeError: ``tokens`` not an integer tensor, a size not an int, ``generator`` not a ``torch.Generator``.
        ValueError: ``tokens`` not 1-D byte values ``0..255`` or shorter than ``seq_len + 1``; a size < 1 or too
            large for memory.
    """
    check_positive_int("batch_size", batch_size)
    check_positive_int("seq_len", seq_len)
    _check_tokens(tokens, seq_len)
    check_allocation("batch_size", (batch_size, seq_len + 1), dtype=torch.int64, what="the windows")
    starts = torch.randint(0, len(tokens) - seq_len, (batch_size,), generator=generator)
    offsets = torch.arange(seq_len + 1)
    return tokens[starts[:, None] + offsets].long()


@guarded
def eval_windows(tokens: torch.Tensor, seq_len: int, max_windows: int | None = None) -> torch.Tensor:
    """Non-overlapping windows tiling the split from its start, ``(N, seq_len + 1)`` int64 (deterministic).

    Consecutive windows share one token (the last target of one is the first input of the next), so every token
    but the first is predicted exactly once. ``max_windows`` keeps the first ones only.

    Raises:
        TypeError / ValueError: as :func:`random_windows`.
    """
    check_positive_int("seq_len", seq_len)
    _check_tokens(tokens, seq_len)
    n = (len(tokens) - 1) // seq_len
    if max_windows is not None:
        n = min(n, check_positive_int("max_windows", max_windows))
    starts = torch.arange(n) * seq_len
    return tokens[starts[:, None] + torch.arange(seq_len + 1)].long()

"""The sources ledger: ``sources.yaml`` (the record) and ``sources.md`` (its book page, generated from it).

Every statement a chapter makes about a source (a paper's setting, protocol, equation or number; the authors' code;
flash-linear-attention) is checked against that source, at a pinned commit for code or at a section, equation or
table for a paper, and recorded once in ``sources.yaml`` at the root of the course. The chapter links the entry from
the sentence, in a Markdown cell: ``[source](../sources.md#<id>)``. ``ttr-edu generate`` writes ``sources.md`` from
the YAML (``--check`` reports a stale page), and a test fails on an entry no chapter links and on a link to an id
that is not in the ledger.

The schema is in the header of ``sources.yaml``. An entry's ``source`` is one mapping, or a list of them when the
claim rests on several places: a paper (``paper``, ``where``, optionally ``url``) or code read at a commit (``repo``,
``commit`` of 40 hex digits, ``path``, ``lines``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "SourcesError",
    "Source",
    "Entry",
    "ENTRY_ID",
    "SOURCE_LINK",
    "load_entries",
    "sources_markdown",
    "linked_ids",
    "ledger_problems",
]

#: an entry's id: kebab-case, starting with the two-digit number of the chapter that first links it
ENTRY_ID = re.compile(r"^(\d\d)-[a-z0-9]+(?:-[a-z0-9]+)*$")
#: a chapter's link to an entry, ``[source](../sources.md#04-authors-evaluation)``; group 1 is the id
SOURCE_LINK = re.compile(r"\]\(\s*(?:\.\./)?sources\.md#([^)\s]+)\s*\)")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_LINES = re.compile(r"^(\d+)(?:-(\d+))?$")
_PAPER_KEYS, _CODE_KEYS = {"paper", "where", "url"}, {"repo", "commit", "path", "lines"}


class SourcesError(ValueError):
    """``sources.yaml`` does not follow its schema; the message names the entry and the field."""


@dataclass(frozen=True)
class Source:
    """One place a claim was checked against: a paper's section/equation/table, or lines of code at a commit."""

    paper: str = ""
    where: str = ""
    url: str = ""
    repo: str = ""
    commit: str = ""
    path: str = ""
    lines: str = ""

    @property
    def is_code(self) -> bool:
        return bool(self.repo)

    def markdown(self) -> str:
        """The source as one line of Markdown; code links to the lines on GitHub at the pinned commit."""
        if not self.is_code:
            text = f"{self.paper}, {self.where}"
            return f"[{text}]({self.url})" if self.url else text
        first, _, last = self.lines.partition("-")
        anchor = f"#L{first}-L{last}" if last else f"#L{first}"
        url = f"https://github.com/{self.repo}/blob/{self.commit}/{self.path}{anchor}"
        return f"[{self.repo} at {self.commit[:7]}, `{self.path}`, lines {self.lines.replace('-', '–')}]({url})"


@dataclass(frozen=True)
class Entry:
    """One ledger entry: what a chapter claims, where the source says it, and what it says there."""

    id: str
    claim: str
    sources: tuple[Source, ...]
    says: str

    @property
    def chapter(self) -> str:
        """The two-digit number of the chapter that first links the entry (the id's prefix)."""
        return self.id[:2]


def _text(entry: dict, field: str, where: str) -> str:
    value = entry.get(field)
    if not isinstance(value, str) or not value.strip():
        raise SourcesError(f"sources.yaml: {where}: '{field}' must be a non-empty text, got {value!r}")
    return " ".join(value.split())


def _source(raw, where: str) -> Source:
    if not isinstance(raw, dict):
        raise SourcesError(f"sources.yaml: {where}: a source is a mapping (paper/where or repo/commit/path/lines)")
    keys = set(raw)
    if "repo" in keys:
        if keys != _CODE_KEYS:
            raise SourcesError(
                f"sources.yaml: {where}: code needs exactly repo, commit, path and lines; got {sorted(keys)}"
            )
        source = Source(**{key: str(raw[key]).strip() for key in _CODE_KEYS})
        if not re.fullmatch(r"[\w.-]+/[\w.-]+", source.repo):
            raise SourcesError(f"sources.yaml: {where}: repo must be owner/name, got {source.repo!r}")
        if not _COMMIT.match(source.commit):
            raise SourcesError(f"sources.yaml: {where}: commit must be 40 hex digits, got {source.commit!r}")
        match = _LINES.match(source.lines)
        if not match or (match[2] and int(match[2]) < int(match[1])):
            raise SourcesError(f"sources.yaml: {where}: lines must be N or N-M with M >= N, got {source.lines!r}")
        return source
    if not {"paper", "where"} <= keys <= _PAPER_KEYS:
        raise SourcesError(
            f"sources.yaml: {where}: a paper needs paper and where (and at most url); got {sorted(keys)}"
        )
    return Source(**{key: _text(raw, key, where) for key in keys})


def load_entries(path: Path) -> list[Entry]:
    """The entries of a ledger file, in file order.

    Raises:
        SourcesError: the file is not YAML, is not a list of entries, or an entry breaks the schema (an id that is
            not kebab-case with a chapter prefix, a repeated id, a missing field, a commit that is not 40 hex digits).
    """
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise SourcesError(f"{path.name}: not valid YAML ({str(err).splitlines()[0]})") from err
    if data is None:
        return []
    if not isinstance(data, list):
        raise SourcesError(f"{path.name}: expected a list of entries at the top level, got {type(data).__name__}")
    entries, seen = [], set()
    for i, raw in enumerate(data):
        if not isinstance(raw, dict):
            raise SourcesError(f"{path.name}: entry {i + 1} is not a mapping")
        where = f"entry {i + 1} ({raw.get('id', 'no id')})"
        extra = set(raw) - {"id", "claim", "source", "says"}
        if extra:
            raise SourcesError(
                f"{path.name}: {where}: unknown fields {sorted(extra)}; an entry has id, claim, source, says"
            )
        entry_id = raw.get("id")
        if not isinstance(entry_id, str) or not ENTRY_ID.match(entry_id):
            raise SourcesError(f"{path.name}: {where}: id must be kebab-case starting with a chapter number, 'NN-...'")
        if entry_id in seen:
            raise SourcesError(f"{path.name}: {where}: the id {entry_id} is used twice")
        seen.add(entry_id)
        raw_sources = raw.get("source")
        raw_sources = raw_sources if isinstance(raw_sources, list) else [raw_sources]
        if not raw_sources:
            raise SourcesError(f"{path.name}: {where}: 'source' is empty")
        sources = tuple(_source(s, where) for s in raw_sources)
        entries.append(Entry(entry_id, _text(raw, "claim", where), sources, _text(raw, "says", where)))
    return entries


HEADER = """---
title: Sources
---

<!-- Generated by `ttr-edu generate` from sources.yaml; edit that file, not this page. -->

Every statement a chapter makes about a source, a paper's setting, protocol, equation or number, the authors' code,
or a library's implementation, was checked against that source and is recorded here: code at a pinned commit, with
the lines read, and papers at a section, equation or table. Each entry says what the chapter claims, where the source
says it, and what it says there, in our words. The chapters link each entry from its sentence.
"""


def sources_markdown(entries: list[Entry], titles: dict[str, tuple[str, str]] | None = None) -> str:
    """The book page of the ledger: one section per chapter, one labelled heading per entry.

    Args:
        entries: as :func:`load_entries` returns them.
        titles: chapter number -> (notebook file name, title), for the section headings; a number without one
            gets a plain "Chapter NN".
    """
    titles = titles or {}
    parts = [HEADER]
    for chapter in sorted({entry.chapter for entry in entries}):
        if chapter in titles:
            filename, title = titles[chapter]
            parts.append(f"## [{title}](chapters/{filename})\n")
        else:
            parts.append(f"## Chapter {chapter}\n")
        for entry in (e for e in entries if e.chapter == chapter):
            sources = entry.sources
            if len(sources) == 1:
                where = f"- **Source:** {sources[0].markdown()}"
            else:
                where = "- **Sources:**" + "".join(f"\n  - {s.markdown()}" for s in sources)
            parts.append(
                f"({entry.id})=\n### {entry.id}\n\n"
                f"- **The chapter says:** {entry.claim}\n"
                f"{where}\n"
                f"- **What it says there:** {entry.says}\n"
            )
    return "\n".join(parts)


def linked_ids(markdown: str) -> list[str]:
    """The ledger ids that a piece of Markdown links, in order (``[source](../sources.md#<id>)``)."""
    return SOURCE_LINK.findall(markdown)


def _cells(path: Path) -> list[tuple[str, str]]:
    """(cell type, text) of every cell of a notebook; a Markdown page is one Markdown cell."""
    import json

    if path.suffix == ".md":
        return [("markdown", path.read_text(encoding="utf-8"))]
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [(c["cell_type"], "".join(c["source"]) if isinstance(c["source"], list) else c["source"]) for c in cells]


def ledger_problems(entries: list[Entry], pages: list[Path]) -> list[str]:
    """What is wrong between a ledger and the pages that cite it, one line each (empty when nothing is).

    - a link ``[…](../sources.md#<id>)`` to an id that is not in the ledger;
    - a link in a code cell (the student copy rewrites links in Markdown cells only, so it would break there);
    - an entry that no page links;
    - an entry whose id does not start with the number of the first chapter (``NN_slug.ipynb``) that links it.

    Args:
        entries: the ledger, as :func:`load_entries` returns it.
        pages: the chapter notebooks and the Markdown pages that may link it (``sources.md`` itself is skipped).
    """
    ids, problems = {e.id for e in entries}, []
    linked, first = set(), {}  # the ids linked anywhere; id -> the smallest chapter number that links it
    for path in pages:
        if path.name == "sources.md":
            continue
        chapter = path.name[:2] if re.match(r"^\d\d_", path.name) else None
        for kind, text in _cells(path):
            for entry_id in linked_ids(text):
                if kind != "markdown":
                    problems.append(f"{path.name}: a code cell links sources.md#{entry_id}; link from Markdown")
                elif entry_id not in ids:
                    problems.append(f"{path.name}: links sources.md#{entry_id}, which is not in the ledger")
                else:
                    linked.add(entry_id)
                    if chapter and chapter < first.get(entry_id, "99"):
                        first[entry_id] = chapter
    for entry in entries:
        if entry.id not in linked:
            problems.append(f"sources.yaml: {entry.id} is linked by no chapter")
        elif entry.id in first and first[entry.id] != entry.chapter:
            problems.append(
                f"sources.yaml: {entry.id} is first linked by chapter {first[entry.id]}, not {entry.chapter}"
            )
    return problems

"""What a student's course folder holds: every notebook and page as JupyterLab shows it, as the book does.

The course is written for the book: citations are MyST's ``[@key]`` (resolved against ``references.bib`` when MyST
builds), and links point where the files lie in the repository (``../notation.md`` from ``chapters/``). JupyterLab,
where students work, resolves neither: jupyterlab-myst has no bibliography, and a student's folder is flat (the
notebooks side by side, no ``../``). So ``ttr-edu copy`` writes each file through :func:`render`:

- every citation becomes its formatted reference, ``(Schlag et al., 2021, eq. 13)``, each name a link to the paper
  (its DOI, else its URL), and the notebook ends with the list of the references it cites, as a book page does;
- every relative link is rewritten to where its target lands in the student's folder (a chapter notebook beside the
  others, any other course file at its path from the course root), and the pages a notebook links to are copied
  along. A Markdown page (``notation.md``) stays Markdown, its front matter's title as its heading: ``ttr-edu start``
  makes JupyterLab open Markdown rendered (by jupyterlab-myst), so a linked page starts no kernel of its own;
- a notebook carries the kernel metadata JupyterLab writes when it opens one with this Python's kernel, so opening a
  chapter does not change it.

``chapters/`` itself keeps ``[@key]``: the book builds from it. Only markdown changes; code cells are copied as
they are, so nbgrader's checksums of locked cells still match. Stdlib only (``ttr-edu copy`` stays light): the
bibliography is the course's own ``references.bib``, and a test renders every entry.
"""

from __future__ import annotations

import json
import platform
import posixpath
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

__all__ = [
    "Reference",
    "parse_bibtex",
    "load_bibliography",
    "render_citations",
    "student_path",
    "render",
    "references_markdown",
    "linked_pages",
    "bibliography_of",
    "kernel_metadata",
    "REFERENCES_CELL",
    "MARKDOWN_LINK",
    "CITATION_KEY",
]

#: a MyST citation key as the course writes them (``@schlag2021linear``)
CITATION_KEY = re.compile(r"(?<![\w@.])@([A-Za-z][\w:-]*\w)")
#: a bracketed citation group, ``[@a, eq. 13; see @b]``, not the text of a link (``[...](url)``)
_GROUP = re.compile(r"\[([^\[\]]*@[A-Za-z][^\[\]]*)\](?![(\[])")
_GROUP_PART = re.compile(
    r"^\s*(?P<prefix>[^@]*?)\s*@(?P<key>[A-Za-z][\w:-]*\w)\s*(?:,\s*(?P<suffix>.*?))?\s*$", re.DOTALL
)
#: a markdown link or image, ``[text](target "title")``; group 1 is the target
MARKDOWN_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HTML_LINK = re.compile(r"""\b(?:src|href)\s*=\s*["']([^"']+)["']""")
#: fenced code blocks and inline code: left exactly as written
_CODE = re.compile(
    r"(^[ \t]*(`{3,}|~{3,})(?!\{(?!code))[^\n]*\n.*?^[ \t]*\2[ \t]*$|`+[^`\n]*`+)",  # ```{note} is MyST, not code
    re.DOTALL | re.MULTILINE,
)


# -- the bibliography --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reference:
    """One bibliography entry, as far as a citation needs it."""

    key: str
    authors: tuple[str, ...]  # family names, in order ("others" in the bib becomes "others")
    year: str
    title: str
    venue: str
    link: str  # https://doi.org/<doi>, else the entry's url, else ""

    @property
    def short(self) -> str:
        """Author–year as MyST writes it: ``Hopfield, 1982``, ``Widrow & Hoff, 1960``, ``Schlag et al., 2021``."""
        names = [a for a in self.authors if a != "others"]
        if len(self.authors) == 1:
            who = names[0]
        elif len(self.authors) == 2 and len(names) == 2:
            who = f"{names[0]} & {names[1]}"
        else:
            who = f"{names[0]} et al."
        return f"{who}, {self.year}"

    @property
    def full(self) -> str:
        """The reference in one line: authors (year). Title. Venue."""
        names = [a for a in self.authors if a != "others"]
        who = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " & " + names[-1]
        if "others" in self.authors:
            who = ", ".join(names) + " et al."
        parts = [f"{who} ({self.year}). {self.title.rstrip('.')}."]
        if self.venue:
            parts.append(f"{self.venue.rstrip('.')}.")
        return " ".join(parts)


_ACCENTS = {
    '"': "\u0308",
    "'": "\u0301",
    "`": "\u0300",
    "^": "\u0302",
    "~": "\u0303",
    "=": "\u0304",
    ".": "\u0307",
    "c": "\u0327",
    "u": "\u0306",
    "v": "\u030c",
    "H": "\u030b",
    "k": "\u0328",
    "r": "\u030a",
}
_ACCENT = re.compile(r"\\(?:([\"'`^~=.])|([cuvHkr])(?=[\s{]))\s*\{?\s*(\\i|[A-Za-z])\s*\}?")


def latex_to_text(value: str) -> str:
    """BibTeX field text as a reader sees it: accents composed (``{\\"u}`` -> ü), braces dropped, ``--`` -> –."""
    value = _ACCENT.sub(
        lambda m: ("i" if m[3] == "\\i" else m[3]) + _ACCENTS[m[1] or m[2]],
        value,
    )
    value = value.replace("\\&", "&").replace("---", "—").replace("--", "–").replace("~", "\u00a0")
    value = value.replace("{", "").replace("}", "")
    return unicodedata.normalize("NFC", " ".join(value.split()))


def _value(text: str, i: int) -> tuple[str, int]:
    """The field value starting at ``text[i]`` (``{...}`` with nested braces, ``"..."`` or a bare word) and the
    index after it."""
    if text[i] == "{":
        depth, j = 0, i
        while j < len(text):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                return text[i + 1 : j], j + 1
            j += 1
        raise ValueError("references.bib: a field's braces never close")
    if text[i] == '"':
        j = text.index('"', i + 1)
        return text[i + 1 : j], j + 1
    match = re.compile(r"[\w.-]+").match(text, i)
    if match is None:
        raise ValueError(f"references.bib: cannot read a value at {text[i : i + 30]!r}")
    return match.group(), match.end()


def parse_bibtex(text: str) -> dict[str, dict[str, str]]:
    """Entries of a BibTeX file: key -> {field (lower case): raw value}, plus ``"ENTRYTYPE"``.

    Enough for the course's own ``references.bib`` (``@type{key, field = {value}, ...}``); ``@comment``,
    ``@string`` and ``@preamble`` are skipped.

    Raises:
        ValueError: the text is not BibTeX of that form.
    """
    entries: dict[str, dict[str, str]] = {}
    for match in re.finditer(r"@(\w+)\s*\{\s*([^,\s]+)\s*,", text):
        kind = match[1].lower()
        if kind in ("comment", "string", "preamble"):
            continue
        fields, i = {"ENTRYTYPE": kind}, match.end()
        while True:
            field = re.compile(r"\s*(?:(\w+)\s*=\s*|\})").match(text, i)
            if field is None:
                raise ValueError(f"references.bib: entry {match[2]}: cannot read after {text[i : i + 30]!r}")
            if field[1] is None:  # the entry's closing brace
                break
            value, i = _value(text, field.end())
            fields[field[1].lower()] = value
            comma = re.compile(r"\s*,?").match(text, i)
            i = comma.end()
        entries[match[2]] = fields
    return entries


def _family(name: str) -> str:
    name = latex_to_text(name.strip())
    if name == "others":
        return name
    if "," in name:
        return name.split(",")[0].strip()
    return name.split()[-1]


def load_bibliography(path: Path) -> dict[str, Reference]:
    """The references in a BibTeX file, by key.

    Raises:
        ValueError: the file cannot be read as BibTeX, or an entry has no author or year.
    """
    references = {}
    for key, fields in parse_bibtex(path.read_text(encoding="utf-8")).items():
        if "author" not in fields or "year" not in fields:
            raise ValueError(f"{path}: entry {key} has no author or no year")
        authors = tuple(_family(a) for a in re.split(r"\s+and\s+", fields["author"]))
        venue = fields.get("journal") or fields.get("booktitle") or ""
        link = f"https://doi.org/{fields['doi']}" if fields.get("doi") else fields.get("url", "")
        references[key] = Reference(
            key, authors, latex_to_text(fields["year"]), latex_to_text(fields.get("title", "")),
            latex_to_text(venue), link,
        )  # fmt: skip
    return references


# -- citations ---------------------------------------------------------------------------------------------------------


def _outside_code(text: str, change) -> str:
    """``change`` applied to the text between code spans and fenced code blocks, which stay as written."""
    pieces, last = [], 0
    for match in _CODE.finditer(text):
        pieces += [change(text[last : match.start()]), match.group()]
        last = match.end()
    return "".join(pieces + [change(text[last:])])


def _url(reference: Reference) -> str:
    """The reference's link as a Markdown link target (brackets in a DOI would end it early)."""
    return reference.link.replace("(", "%28").replace(")", "%29").replace(" ", "%20")


def _cite(reference: Reference, text: str | None = None) -> str:
    label = text or reference.short
    return f"[{label}]({_url(reference)})" if reference.link else label


def render_citations(text: str, bibliography: dict[str, Reference], cited: set[str] | None = None) -> str:
    """Markdown with every MyST citation whose keys are all in ``bibliography`` written out as links.

    ``[@a, eq. 13; see @b]`` -> ``([A et al., 2021](url), eq. 13; see [B, 1990](url))``, and a narrative ``@a`` ->
    ``[A et al. (2021)](url)``. Citations with an unknown key and anything inside code are left as written (a test
    fails on what stays raw). The keys written out are added to ``cited``.
    """
    cited = set() if cited is None else cited

    def group(match: re.Match) -> str:
        parts = [_GROUP_PART.match(part) for part in match[1].split(";")]
        if not all(p and p["key"] in bibliography for p in parts):
            return match.group()
        out = []
        for part in parts:
            cited.add(part["key"])
            reference = bibliography[part["key"]]
            piece = _cite(reference)
            if part["prefix"]:
                piece = f"{part['prefix']} {piece}"
            if part["suffix"]:
                piece = f"{piece}, {' '.join(part['suffix'].split())}"
            out.append(piece)
        return "(" + "; ".join(out) + ")"

    def narrative(match: re.Match) -> str:
        reference = bibliography.get(match[1])
        if reference is None:
            return match.group()
        cited.add(match[1])
        who, year = reference.short.rsplit(", ", 1)
        return _cite(reference, f"{who} ({year})")

    def change(piece: str) -> str:
        return CITATION_KEY.sub(narrative, _GROUP.sub(group, piece))

    return _outside_code(text, change)


# -- links -------------------------------------------------------------------------------------------------------------


def references_markdown(keys: set[str], bibliography: dict[str, Reference]) -> str:
    """A "References" section listing ``keys``, by first author and year, each with its link (as a book page ends)."""
    entries = sorted((bibliography[key] for key in keys), key=lambda r: (r.authors[0].lower(), r.year, r.key))
    lines = [f"- {r.full}" + (f" <{r.link}>" if r.link else "") for r in entries]
    return "## References\n\n" + "\n".join(lines)


def student_path(relative: PurePosixPath) -> PurePosixPath:
    """Where a course file (a path from the course root) lands in the student's folder: a chapter notebook
    (``chapters/NN_slug.ipynb``) beside the others at the top, any other file at its path from the root."""
    if len(relative.parts) == 2 and relative.parts[0] == "chapters":
        return PurePosixPath(relative.name)
    return relative


def _is_relative_link(target: str) -> bool:
    return not (re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith(("#", "/")))


def _rewrite_links(text: str, source: PurePosixPath, root: Path, linked: set[PurePosixPath]) -> str:
    """Relative links of ``source`` (a path from ``root``) re-aimed at the student's folder; the course files they
    name are added to ``linked``. A target outside the course, or missing, is left as written."""
    here = student_path(source).parent

    def rewrite(target: str) -> str:
        if not _is_relative_link(target):
            return target
        path, hash_, anchor = target.partition("#")
        resolved = posixpath.normpath(posixpath.join(source.parent.as_posix(), path))
        if not path or resolved.startswith("../") or not (root / resolved).is_file():
            return target
        relative = PurePosixPath(resolved)
        linked.add(relative)
        new = posixpath.relpath(student_path(relative).as_posix(), here.as_posix() or ".")
        return new + hash_ + anchor

    def link(match: re.Match) -> str:
        whole, target = match.group(), match[1]
        start = match.start(1) - match.start()
        return whole[:start] + rewrite(target) + whole[start + len(target) :]

    def change(piece: str) -> str:
        return _HTML_LINK.sub(link, MARKDOWN_LINK.sub(link, piece))

    return _outside_code(text, change)


# -- files -------------------------------------------------------------------------------------------------------------


def bibliography_of(root: Path) -> dict[str, Reference]:
    """``root/references.bib`` by key; empty when the course has none (its citations then stay raw, and the test
    of the student copies fails on them).

    Raises:
        ValueError: the file is there but cannot be read as BibTeX.
    """
    path = root / "references.bib"
    return load_bibliography(path) if path.is_file() else {}


def _markdown(text, source: PurePosixPath, root: Path, bibliography, linked: set, cited: set) -> str:
    return _rewrite_links(render_citations(text, bibliography, cited), source, root, linked)


REFERENCES_CELL = "ttr-edu-references"  # the id of the cell a student copy ends with when it cites anything
_FRONT_MATTER = re.compile(r"\A---\n(.*?)\n---\n", re.DOTALL)


def _page_markdown(text: str) -> str:
    """A Markdown page with its front matter's title as its first heading (the front matter is the book's)."""
    front = _FRONT_MATTER.match(text)
    if front:
        title = re.search(r"^title:\s*(.+?)\s*$", front[1], re.MULTILINE)
        text = text[front.end() :].lstrip("\n")
        if title:
            text = f"# {title[1].strip(chr(34) + chr(39))}\n\n{text}"
    return text


def kernel_metadata() -> dict:
    """The notebook metadata JupyterLab writes once this Python's kernel (ipykernel's ``python3``) has started: its
    kernelspec and the ``language_info`` of its ``kernel_info`` reply."""
    return {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {
            "codemirror_mode": {"name": "ipython", "version": 3},
            "file_extension": ".py",
            "mimetype": "text/x-python",
            "name": "python",
            "nbconvert_exporter": "python",
            "pygments_lexer": "ipython3",
            "version": platform.python_version(),
        },
    }


def render(root: Path, source: PurePosixPath, bibliography=None) -> tuple[bytes, set[PurePosixPath]]:
    """The student's copy of the course file ``root/source`` and the course files it links to.

    A notebook's markdown cells are rendered (citations written out, links re-aimed) and, if it cites anything, a
    last cell lists the references (id :data:`REFERENCES_CELL`); code cells are left exactly as they are, and the
    kernel metadata is JupyterLab's (:func:`kernel_metadata`). A notebook is written as nbformat writes it (JSON,
    one-space indent, keys sorted, sources split into lines). A ``.md`` page is rendered the same way, its references
    at its end. Any other file is copied as it is.

    Raises:
        ValueError: a notebook is not JSON, or ``references.bib`` cannot be read.
    """
    bibliography = bibliography_of(root) if bibliography is None else bibliography
    data, linked, cited = (root / source).read_bytes(), set(), set()
    if source.suffix == ".md":
        text = _markdown(_page_markdown(data.decode("utf-8")), source, root, bibliography, linked, cited)
        if cited:
            text = text.rstrip("\n") + "\n\n" + references_markdown(cited, bibliography) + "\n"
        return text.encode("utf-8"), {path for path in linked if path != source}
    if source.suffix != ".ipynb":
        return data, linked
    nb = json.loads(data.decode("utf-8"))
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "markdown":
            continue
        text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        new = _markdown(text, source, root, bibliography, linked, cited)
        if new != text:
            cell["source"] = new.splitlines(keepends=True)
    if cited:
        references = references_markdown(cited, bibliography)
        nb["cells"].append(
            {"cell_type": "markdown", "id": REFERENCES_CELL, "metadata": {}, "source": references.splitlines(True)}
        )
    nb["metadata"] = {**nb.get("metadata", {}), **kernel_metadata()}
    data = (json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n").encode("utf-8")
    return data, {path for path in linked if path != source}


def linked_pages(root: Path, linked: set[PurePosixPath], bibliography=None) -> dict[PurePosixPath, bytes]:
    """The course files in ``linked`` (paths from the root, as :func:`render` returns them) and those they link to
    in turn, rendered, by their path in the student's folder. Chapter notebooks are left out: the student chooses
    those (``ttr-edu copy DEST 1 4``); a link to one that is not copied yet works once it is."""
    bibliography = bibliography_of(root) if bibliography is None else bibliography
    pages: dict[PurePosixPath, bytes] = {}
    todo, seen = set(linked), set()
    while todo:
        path = todo.pop()
        seen.add(path)
        if path.parts[0] == "chapters":
            continue
        data, more = render(root, path, bibliography)
        pages[student_path(path)] = data
        todo |= more - seen
    return dict(sorted(pages.items()))

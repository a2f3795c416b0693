"""The one Markdown table writer (the analysis report, the cross-package tables, the importers), and
the escaping of what Markdown outputs quote: model labels, config ids, task names and file names
come from input files, so report.md and grid_card.md escape them as report.html does, and no label
can open a link (`[x](javascript:...)`), raw HTML (`<script>`), a table column or emphasis.

- `md_escape(value)`: a value as inline text (table cells, list items); ordinary labels
  (`qwen2.5-coder-0.5b`, `free_form`, `xstest/T1/greedy/0shot/logprob`) are left as they are;
- `md_code(value)`: a value as a code span, whatever backticks it holds;
- `md_prose(text)`: text written as Markdown (code spans in backticks) that quotes values: raw
  HTML and link brackets outside code spans are escaped, line by line and cell by cell.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_ENTITY = re.compile(r"#?[A-Za-z0-9]+;")
_TAG_START = re.compile(r"[A-Za-z/!?]")  # after '<': raw HTML, an autolink, a comment or declaration


def _plain(value: object) -> str:
    """One line of displayable text: control characters become spaces, lone surrogates U+FFFD."""
    return _SURROGATE.sub("\ufffd", _CONTROL.sub(" ", str(value)))


def md_escape(value: object) -> str:
    """`value` as inline Markdown text that renders as itself."""
    text = _plain(value)
    out = []
    for i, c in enumerate(text):
        if c in "\\`*[]|":
            out.append("\\" + c)
        elif c == "_":  # inside a word (free_form) it is no emphasis; at a word's edge it can be
            inner = 0 < i < len(text) - 1 and text[i - 1].isalnum() and text[i + 1].isalnum()
            out.append(c if inner else "\\_")
        elif c == "<" and _TAG_START.match(text, i + 1):
            out.append("\\<")
        elif c == "&" and _ENTITY.match(text, i + 1):  # `&lt;` would render as `<`
            out.append("\\&")
        else:
            out.append(c)
    return "".join(out)


def md_code(value: object) -> str:
    """`value` as a code span: fenced by more backticks than it holds in a row."""
    text = _plain(value)
    fence = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _prose_piece(text: str) -> str:
    """Escape raw HTML and link brackets outside the code spans of one line (or table cell), with
    CommonMark's rules for code spans and backslash escapes."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n:  # an escape (or a literal backslash): kept as written
            out.append(text[i : i + 2])
            i += 2
        elif c == "`":
            j = i
            while j < n and text[j] == "`":
                j += 1
            run, k, close = j - i, j, -1
            while (k := text.find("`" * run, k)) >= 0:
                e = k
                while e < n and text[e] == "`":
                    e += 1
                if e - k == run:
                    close = k
                    break
                k = e
            if close < 0:  # no closing run: the backticks are literal
                out.append(text[i:j])
                i = j
            else:
                out.append(text[i : close + run])
                i = close + run
        else:
            if c in "[]" or (c == "<" and _TAG_START.match(text, i + 1)):
                out.append("\\" + c)
            else:
                out.append(c)
            i += 1
    return "".join(out)


def md_prose(text: str) -> str:
    """Markdown text that quotes untrusted values, with raw HTML and links neutralised (see module)."""
    lines = []
    for line in str(text).split("\n"):
        if line.lstrip().startswith("|"):  # a table row: GFM splits the cells before any inline span
            cells = re.split(r"(?<!\\)\|", line)
            lines.append("|".join(_prose_piece(c) for c in cells))
        else:
            lines.append(_prose_piece(line))
    return "\n".join(_SURROGATE.sub("\ufffd", x) for x in lines)


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A pipe table of cells already formatted as text, each escaped as inline text (`md_escape`)."""
    out = ["| " + " | ".join(md_escape(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(md_escape(c) for c in row) + " |" for row in rows]
    return "\n".join(out)

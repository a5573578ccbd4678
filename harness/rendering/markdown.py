"""The one markdown-table renderer of the project (report tables, summary.md, the README's reproduced table)."""

from __future__ import annotations

import re
from collections.abc import Sequence


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool] | None = None) -> str:
    """A GitHub-flavoured markdown table, padded so the raw text reads as a table too; ends with a newline.

    right: per column, whether it is right-aligned (numbers); default all left.
    """
    align = list(right) if right is not None else [False] * len(header)

    def cell(text: str) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    table = [[cell(h) for h in header], *[[cell(c) for c in r] for r in rows]]
    widths = [max(3, *(len(r[i]) for r in table)) for i in range(len(header))]
    lines = []
    for k, r in enumerate(table):
        padded = [c.rjust(w) if align[i] else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        lines.append("| " + " | ".join(padded) + " |")
        if k == 0:
            rule = [("-" * (w - 1) + ":") if align[i] else ("-" * w) for i, w in enumerate(widths)]
            lines.append("| " + " | ".join(rule) + " |")
    return "\n".join(lines) + "\n"


# A code span or a fenced block: their text is shown as written, so nothing in it is escaped.
_CODE = re.compile(r"(```.*?```|`[^`\n]*`)", re.DOTALL)
# q* written as a name (q star), not yet escaped: Markdown would read its star as the start of an emphasis.
_LITERAL_STAR = re.compile(r"(?<![\\\w])q\*")


def literal_stars(text: str) -> str:
    """Markdown `text` with every q* outside code written q\\* so that it renders as q* (never the start of italics:
    "regression on q*, so both gains start in q*" would render the words between as emphasis). Idempotent."""
    parts = _CODE.split(text)
    return "".join(part if index % 2 else _LITERAL_STAR.sub(r"q\\*", part) for index, part in enumerate(parts))

"""The fenced code blocks of the Markdown pages, with the marker before each.

Convention: a ``sh``/``bash``/``shell``/``console``/``python`` block is preceded (on the last
non-blank line before its fence) by ``<!-- run -->``, and is then executed against a real
standalone by ``test_examples.py``, or by ``<!-- skip: why -->`` when it cannot run there
(it installs, needs another server, is a sketch). An unmarked block fails the test, so no
example is left unchecked by accident. Other blocks (``text``, ``json``, ``toml``, untagged)
are not code to run; ``toml`` blocks are checked as settings files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from magnetar.testing.server import REPO

CODE = {"sh", "bash", "shell", "console", "python", "py"}
_FENCE = re.compile(r"^```\s*([\w+-]*)")
_MARK = re.compile(r"^<!--\s*(run|skip)\s*(?::\s*(.*?))?\s*-->$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    mark: str | None  # "run", "skip" or None
    reason: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def blocks(page: Path) -> list[Block]:
    lines = page.read_text().splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        assert end is not None, f"{page}:{i + 1}: a fence that is never closed"
        previous = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        mark = _MARK.match(previous)
        out.append(
            Block(
                page,
                i + 1,
                opening.group(1).lower(),
                mark.group(1) if mark else None,
                (mark.group(2) or "") if mark else "",
                "\n".join(lines[i + 1 : end]) + "\n",
            )
        )
        i = end + 1
    return out


def all_blocks() -> list[Block]:
    return [b for page in pages() for b in blocks(page)]

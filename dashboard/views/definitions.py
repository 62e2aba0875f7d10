"""The definition of every figure, as the README's "What the numbers mean" section says it.

The footer of every page links here, so a reader of a number finds its definition without the
repository at hand; the README stays the one place it is written (rendered with markdown-it,
raw HTML escaped).
"""

from __future__ import annotations

import functools
from pathlib import Path

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

from dashboard.decorators import dashboard_page

SECTION = "What the numbers mean"


def readme_section(text: str, title: str) -> str:
    """The body of the level-2 section ``title`` of a Markdown document ('' when absent)."""
    lines = text.splitlines()
    heading = f"## {title}"
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == heading) + 1
    except StopIteration:
        return ""
    end = next(
        (i for i in range(start, len(lines)) if lines[i].startswith("## ")),
        len(lines),
    )
    return "\n".join(lines[start:end]).strip()


@functools.lru_cache(maxsize=4)
def _rendered(path: Path, mtime: float) -> str:
    section = readme_section(path.read_text(encoding="utf-8"), SECTION)
    # html=False: any HTML in the README is shown as text, never injected.
    return MarkdownIt("commonmark", {"html": False}).enable("table").render(section)


def definitions_html() -> SafeString:
    path = Path(settings.BASE_DIR) / "README.md"
    try:
        mtime = path.stat().st_mtime
    except OSError:
        return mark_safe("")
    return mark_safe(_rendered(path, mtime))  # markdown-it escapes raw HTML (html=False)


@dashboard_page(uses_range=False)
def definitions(request: HttpRequest) -> HttpResponse:
    context = {"page_title": SECTION, "body": definitions_html(), "nav": "definitions"}
    return render(request, "dashboard/definitions.html", context)

"""The project carries its own design: comments cite docs/, and every citation resolves.

A comment that needs the design points at a section of a document in the repository, written
``docs/architecture.md "Figures"``. Documents outside the repository (a house style or design
kept elsewhere, a ``shared/`` folder next to the checkout) are not cited: a reader of the code
has only the repository. A citation whose file or section heading does not exist fails, so a
renamed section takes its citations with it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEXT_SUFFIXES = {".py", ".html", ".js", ".css", ".md", ".sh", ".toml", ".yml", ".yaml"}
TEXT_NAMES = {"Makefile"}
TEXT_PATHS = {".ci/run"}
# Not project text: installed or downloaded trees a checkout may hold untracked.
SKIPPED_DIRS = {".git", ".venv", "node_modules", "vendor", "__pycache__", "staticfiles"}
# This file names the forbidden forms in its patterns.
SELF = Path(__file__).resolve().relative_to(ROOT).as_posix()

# Citations of documents outside the repository. An upper-case word in quotes is a string the
# code handles (a test may assert a page does not show it), not a citation.
OUTSIDE = {
    "a house-style rule": re.compile(r"\bSTYLE\s+rules?\b"),
    "the outside style document": re.compile(r"(?<![\w\"'])STYLE(?![\w\"'])"),
    "the outside design document": re.compile(r"(?<![\w\"'])DESIGN(?![\w\"'])"),
    "a shared/ folder outside the repository": re.compile(r"(?<![\w-])shared/"),
    "the outside environment notes": re.compile(r"\bENVIRONMENT\.md\b"),
    # The project's tracker is not in the repository either; an upstream project's issues
    # ("dcgm-exporter issues #50") are public and cited by number sign.
    "an issue of the project's tracker": re.compile(r"\b[Ii]ssue \d+\b"),
}
CITATION = re.compile(r"(?<![\w/.-])docs/([\w.-]+\.md)\s+\"([^\"\n]+)\"")
LINK = re.compile(r"\]\((docs/[\w.-]+\.md)(?:#([\w-]+))?\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)

ARCHITECTURE_SECTIONS = [
    "Layers",
    "Data flow",
    "Upstream facts",
    "Quota sources",
    "Time model and storage",
    "Figures",
    "Write path",
    "Read layer",
    "Hoarding alerts",
    "Notifications and remediation",
    "Quota write-back",
    "Scale-out",
    "Queue service levels",
    "Serving",
]
CONVENTIONS_SECTIONS = [
    "Layout",
    "Settings",
    "Models",
    "Background work",
    "Pages and API",
    "Tests",
    "Habits",
]


def _is_text(relative: str) -> bool:
    path = Path(relative)
    return path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES or relative in TEXT_PATHS


def tracked_text_files(root: Path = ROOT) -> list[str]:
    """The repository's text files: git's list, or a walk of the tree where git is missing."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True, timeout=60
        ).stdout.decode()
        names = [name for name in listed.split("\0") if name]
    except (OSError, subprocess.SubprocessError):
        names = [
            path.relative_to(root).as_posix()
            for path in root.rglob("*")
            if path.is_file() and not SKIPPED_DIRS.intersection(path.relative_to(root).parts)
        ]
    return sorted(name for name in names if _is_text(name) and (root / name).is_file())


def outside_citations(text: str) -> list[tuple[int, str]]:
    """(line, what) of every citation of a document outside the repository in ``text``."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for what, pattern in OUTSIDE.items():
            if pattern.search(line):
                found.append((number, what))
    return found


def headings(markdown: str) -> set[str]:
    """Every heading of a Markdown document, code blocks left out."""
    return {match.group(1) for match in HEADING.finditer(FENCE.sub("", markdown))}


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def broken_citations(text: str, root: Path = ROOT) -> list[str]:
    """Every ``docs/<file>.md "<Section>"`` or ``](docs/<file>.md#anchor)`` resolving to nothing."""
    broken = []
    for match in CITATION.finditer(text):
        document = root / "docs" / match.group(1)
        if not document.is_file():
            broken.append(f"docs/{match.group(1)} does not exist")
        elif match.group(2) not in headings(document.read_text()):
            broken.append(f'docs/{match.group(1)} has no section "{match.group(2)}"')
    for match in LINK.finditer(text):
        document = root / match.group(1)
        if not document.is_file():
            broken.append(f"{match.group(1)} does not exist")
        elif match.group(2) and match.group(2) not in {
            anchor(heading) for heading in headings(document.read_text())
        }:
            broken.append(f"{match.group(1)} has no anchor #{match.group(2)}")
    return broken


def test_the_walk_sees_the_code_the_templates_and_the_docs():
    # A walk that found nothing would pass the tests below vacuously.
    files = tracked_text_files()
    assert {"README.md", "Makefile", "config/settings.py", "docs/architecture.md"} <= set(files)
    assert any(name.endswith(".html") for name in files)
    assert any(name.endswith(".js") for name in files)


def test_no_file_cites_a_document_outside_the_repository():
    offenders = [
        f"{name}:{line} cites {what}"
        for name in tracked_text_files()
        if name != SELF
        for line, what in outside_citations((ROOT / name).read_text(errors="replace"))
    ]
    assert offenders == []


def test_every_docs_citation_names_an_existing_file_and_section():
    offenders = [
        f"{name}: {problem}"
        for name in tracked_text_files()
        if name != SELF
        for problem in broken_citations((ROOT / name).read_text(errors="replace"))
    ]
    assert offenders == []


@pytest.mark.parametrize(
    ("document", "sections"),
    [("architecture.md", ARCHITECTURE_SECTIONS), ("conventions.md", CONVENTIONS_SECTIONS)],
)
def test_the_design_documents_have_the_sections_the_code_cites(document, sections):
    text = (ROOT / "docs" / document).read_text()
    assert re.findall(r"^## (.+)$", text, re.MULTILINE) == sections


@pytest.mark.parametrize(
    "line",
    [
        "# The read layer (STYLE rule 21).",
        "Retries (STYLE rules 10 and 12) are bounded.",
        '"""Aligned windows (DESIGN "Time model")."""',
        "Cohorts have no usage, so members are summed (DESIGN).",
        "payloads recorded in ../shared/fixtures/dcgm",
        "see /work/shared/fixtures/kueue/README.md",
        "with the flags ENVIRONMENT.md lists",
        "Target (issue 5): p95 <= 300 ms.",
        "the sign-in work (issue 28 items 1 and 4)",
    ],
)
def test_an_outside_citation_is_found(line):
    assert outside_citations(line) != []


@pytest.mark.parametrize(
    "line",
    [
        "POD_LABELS_BY_STYLE = {",
        '    assert "DESIGN" not in footer.inner_text()',
        "A time-sliced GPU is shared by several pods; ``shared_gpu_hours`` counts them.",
        '# The read layer (docs/architecture.md "Read layer").',
        "- dcgm-exporter issues #50, #105 report it missing on MIG.",
    ],
)
def test_code_names_and_own_citations_are_not_outside_citations(line):
    assert outside_citations(line) == []


def test_a_citation_of_a_missing_section_or_file_is_broken(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text(
        "# Guide\n\n## Read layer\n\n```\n## Not a heading\n```\n"
    )
    text = (
        'ok (docs/guide.md "Read layer"); section gone (docs/guide.md "Write path");\n'
        'in a code block (docs/guide.md "Not a heading"); no file (docs/missing.md "Figures");\n'
        "[ok](docs/guide.md#read-layer) [bad anchor](docs/guide.md#write-path)\n"
    )
    assert broken_citations(text, root=tmp_path) == [
        'docs/guide.md has no section "Write path"',
        'docs/guide.md has no section "Not a heading"',
        "docs/missing.md does not exist",
        "docs/guide.md has no anchor #write-path",
    ]

"""Units stay readable: no module over 800 lines and no function over 120 lines, anywhere in the
project's Python (apps, config, tests, benches; generated migrations aside)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from tests.python_source import parse_file

ROOT = Path(__file__).resolve().parents[2]
MODULE_LINES = 800
FUNCTION_LINES = 120


@functools.cache
def _project_modules() -> list[Path]:
    return sorted(
        path
        for path in ROOT.rglob("*.py")
        if not {".venv", "migrations", "node_modules", "static"} & set(path.relative_to(ROOT).parts)
    )


def test_the_walk_sees_the_project():
    names = {path.relative_to(ROOT).parts[0] for path in _project_modules()}
    assert {"ledger", "dashboard", "tests", "bench", "config"} <= names


def test_no_module_is_over_800_lines():
    long = {
        str(path.relative_to(ROOT)): lines
        for path in _project_modules()
        if (lines := path.read_text().count("\n")) > MODULE_LINES
    }
    assert long == {}


def test_no_function_is_over_120_lines():
    long = {}
    for path in _project_modules():
        for node in ast.walk(parse_file(path)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = lines
    assert long == {}

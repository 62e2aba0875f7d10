"""Parsing the project's own Python for the tests that read its source (layers, sizes, settings).

CPython 3.11 up to 3.11.7 keeps the AST converter's recursion depth in state shared by every
thread (python/cpython#106905, fixed in 3.11.8). When another thread builds an AST at the same
moment (``traceback`` parses the failing line of every traceback it formats, so a server thread
logging an exception is enough), ``ast.parse`` can raise ``SystemError: AST constructor recursion
depth mismatch`` for a file that parses fine. The file did not change, so the parse is repeated.
"""

from __future__ import annotations

import ast
from pathlib import Path

_ATTEMPTS = 5
_RACE = "AST constructor recursion depth mismatch"


def parse_source(source: str, filename: str = "<unknown>") -> ast.Module:
    for attempt in range(_ATTEMPTS):
        try:
            return ast.parse(source, filename=filename)
        except SystemError as error:
            if _RACE not in str(error) or attempt == _ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def parse_file(path: Path) -> ast.Module:
    return parse_source(path.read_text(), filename=str(path))

"""A parse spoiled by CPython's shared AST converter state is repeated, and only that."""

from __future__ import annotations

import ast

import pytest

from tests import python_source


def _failing(times: int, message: str):
    calls = {"n": 0}
    real = ast.parse

    def parse(source, filename="<unknown>"):
        calls["n"] += 1
        if calls["n"] <= times:
            raise SystemError(message)
        return real(source, filename=filename)

    return parse, calls


def test_a_parse_spoiled_by_another_thread_is_repeated(monkeypatch):
    parse, calls = _failing(2, "AST constructor recursion depth mismatch (before=144, after=31)")
    monkeypatch.setattr(python_source.ast, "parse", parse)

    tree = python_source.parse_source("x = 1\n")

    assert calls["n"] == 3
    assert isinstance(tree.body[0], ast.Assign)


def test_another_system_error_is_raised_at_once(monkeypatch):
    parse, calls = _failing(1, "something else")
    monkeypatch.setattr(python_source.ast, "parse", parse)

    with pytest.raises(SystemError, match="something else"):
        python_source.parse_source("x = 1\n")
    assert calls["n"] == 1


def test_a_race_that_never_clears_is_raised_after_the_last_attempt(monkeypatch):
    parse, calls = _failing(99, "AST constructor recursion depth mismatch (before=3, after=0)")
    monkeypatch.setattr(python_source.ast, "parse", parse)

    with pytest.raises(SystemError):
        python_source.parse_source("x = 1\n")
    assert calls["n"] == 5

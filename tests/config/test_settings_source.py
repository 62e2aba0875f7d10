"""The settings are one source of truth: each setting is defined once, every variable they read
is documented in ``.env.example`` (and nothing else is), and no code second-guesses a setting
with a default of its own.

These tests read the source (AST) rather than the loaded settings, so a setting that is
overwritten further down, or a variable read only in one branch, is still seen.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from config.settings import env_bool, env_float, env_int, env_list, env_secret, env_str
from tests.python_source import parse_file, parse_source

ROOT = Path(__file__).resolve().parents[2]
ENV_HELPERS = {"env_str", "env_secret", "env_bool", "env_int", "env_float", "env_list"}
# Test settings override the base on purpose; they are not part of what production reads.
TEST_SETTINGS = {"settings_test.py"}
NOT_PRODUCTION = {".venv", "tests", "migrations", "node_modules", "static", "staticfiles"}


def settings_modules() -> list[Path]:
    """config/settings.py, or every module of a config/settings/ package."""
    single = ROOT / "config" / "settings.py"
    package = ROOT / "config" / "settings"
    found = [single] if single.exists() else sorted(package.glob("*.py"))
    return [path for path in found if path.name not in TEST_SETTINGS]


def parse(path: Path) -> ast.Module:
    return parse_file(path)


def assigned_names(statements: list[ast.stmt]) -> Counter[str]:
    """Upper-case names assigned by these statements, counting each branch of an ``if`` or a
    ``try`` once (a name set in ``if`` and in ``else`` is one definition); function and class
    bodies are not settings."""
    counts: Counter[str] = Counter()
    for node in statements:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                # A subscript (DATABASES["default"][...] = ...) refines a setting, not redefines.
                names = target.elts if isinstance(target, ast.Tuple | ast.List) else [target]
                for name in names:
                    if isinstance(name, ast.Name) and name.id.isupper():
                        counts[name.id] += 1
        elif isinstance(node, ast.If):
            branches = assigned_names(node.body) | assigned_names(node.orelse)
            counts.update(dict.fromkeys(branches, 1))
        elif isinstance(node, ast.Try):
            blocks = [node.body, node.orelse, node.finalbody] + [h.body for h in node.handlers]
            union: Counter[str] = Counter()
            for block in blocks:
                union |= assigned_names(block)
            counts.update(dict.fromkeys(union, 1))
    return counts


def variables_read(tree: ast.Module) -> set[str]:
    """Names of the environment variables the env helpers are called with."""
    names = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ENV_HELPERS
        ):
            first = node.args[0] if node.args else None
            assert isinstance(first, ast.Constant) and isinstance(first.value, str), (
                f"line {node.lineno}: {node.func.id}() must name its variable literally, so "
                ".env.example can be checked against it"
            )
            names.add(first.value)
    return names


def env_example() -> list[tuple[str, str]]:
    """(variable, the line above it) for every assignment in .env.example."""
    lines = (ROOT / ".env.example").read_text().splitlines()
    entries = []
    for index, line in enumerate(lines):
        match = re.match(r"^([A-Z][A-Z0-9_]*)=", line)
        if match:
            entries.append((match.group(1), lines[index - 1] if index else ""))
    return entries


def compose_variables() -> set[str]:
    text = (ROOT / "docker-compose.yml").read_text()
    return set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", text))


def test_no_setting_is_assigned_twice():
    counts: Counter[str] = Counter()
    for path in settings_modules():
        counts += assigned_names(parse(path).body)

    twice = sorted(name for name, count in counts.items() if count > 1)
    assert twice == [], f"assigned more than once (the last one silently wins): {twice}"


def test_the_duplicate_check_sees_an_override_but_not_if_else_branches():
    tree = parse_source(
        "A = 1\nif X:\n    B = 1\nelse:\n    B = 2\ntry:\n    C = 1\nexcept E:\n    C = 2\n"
        "A = 3\nC['k'] = 4\n"
    )

    counts = assigned_names(tree.body)

    assert counts == Counter({"A": 2, "B": 1, "C": 1})


def test_env_example_lists_every_variable_the_settings_read_and_nothing_else():
    read: set[str] = set()
    for path in settings_modules():
        read |= variables_read(parse(path))
    listed = [name for name, _ in env_example()]
    # docker-compose.yml reads .env too: its own variables (the PostgreSQL password, the host's
    # kubeconfig path) belong in the file although the settings never see them.
    allowed = read | compose_variables()

    assert sorted(read - set(listed)) == [], "read by the settings but missing in .env.example"
    assert sorted(set(listed) - allowed) == [], "in .env.example but read by nothing"
    assert sorted(compose_variables() - set(listed)) == [], "docker-compose.yml reads these too"
    assert [name for name, count in Counter(listed).items() if count > 1] == []


def test_each_env_example_variable_has_a_one_line_comment_with_its_default():
    undocumented = [
        name
        for name, above in env_example()
        if not (above.startswith("# ") and "Default:" in above)
    ]

    assert undocumented == []


def test_settings_read_the_environment_only_through_the_typed_helpers():
    offenders = []
    for path in settings_modules():
        tree = parse(path)
        helper_bodies = {
            id(inner)
            for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name in ENV_HELPERS
            for inner in ast.walk(node)
        }
        for node in ast.walk(tree):
            if id(node) in helper_bodies:
                continue
            if isinstance(node, ast.Attribute) and node.attr in {"environ", "getenv"}:
                offenders.append(f"{path.name}:{node.lineno}")

    assert offenders == [], "read the environment through env_str/env_int/... instead"


def production_modules() -> list[Path]:
    return [
        path
        for path in ROOT.rglob("*.py")
        if not NOT_PRODUCTION.intersection(path.relative_to(ROOT).parts)
    ]


def test_no_code_reads_a_defined_setting_through_getattr_with_a_default():
    # getattr(settings, "X", default) hides a disagreement with the setting's own default (a
    # cache that was off where the settings said an hour); settings.X fails loudly if X is gone.
    offenders = []
    for path in production_modules():
        for node in ast.walk(parse(path)):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "getattr"
                and len(node.args) == 3
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id == "settings"
                and isinstance(node.args[1], ast.Constant)
            ):
                continue
            name = node.args[1].value
            if hasattr(settings, name):
                where = path.relative_to(ROOT)
                offenders.append(f"{where}:{node.lineno} {name} (use settings.{name})")

    assert offenders == []


def test_the_production_scan_covers_the_apps_and_skips_tests():
    scanned = {path.relative_to(ROOT).parts[0] for path in production_modules()}

    assert {"config", "core", "fleet", "quotas", "ledger", "alerts", "dashboard"} <= scanned
    assert "tests" not in scanned and ".venv" not in scanned


@pytest.mark.parametrize(
    ("helper", "raw"),
    [
        (lambda: env_bool("GL_PROBE", False), "maybe"),
        (lambda: env_int("GL_PROBE", 1), "1.5"),
        (lambda: env_int("GL_PROBE", 5, minimum=2), "1"),
        (lambda: env_float("GL_PROBE", 1.0), "fast"),
    ],
)
def test_a_bad_value_is_improperly_configured(monkeypatch, helper, raw):
    monkeypatch.setenv("GL_PROBE", raw)

    with pytest.raises(ImproperlyConfigured, match="GL_PROBE"):
        helper()


def test_helpers_parse_values_and_fall_back_to_defaults(monkeypatch, tmp_path):
    monkeypatch.delenv("GL_PROBE", raising=False)
    assert env_int("GL_PROBE", 7) == 7
    assert env_list("GL_PROBE", ["a"]) == ["a"]

    monkeypatch.setenv("GL_PROBE", " off ")
    assert env_bool("GL_PROBE", True) is False
    monkeypatch.setenv("GL_PROBE", "a, b,,c")
    assert env_list("GL_PROBE", []) == ["a", "b", "c"]
    assert env_str("GL_PROBE") == "a, b,,c"

    secret = tmp_path / "secret"
    secret.write_text("from-a-file\n")
    monkeypatch.setenv("GL_PROBE_FILE", str(secret))
    assert env_secret("GL_PROBE") == "from-a-file"
    monkeypatch.setenv("GL_PROBE_FILE", str(tmp_path / "missing"))
    with pytest.raises(ImproperlyConfigured, match="GL_PROBE_FILE"):
        env_secret("GL_PROBE")


def test_email_settings_come_from_their_own_variables():
    # EMAIL_TIMEOUT and DEFAULT_FROM_EMAIL were once defined twice, the second copy ignoring
    # EMAIL_TIMEOUT from the environment.
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("EMAIL_") and key != "DJANGO_SETTINGS_MODULE"
    }
    env.update(
        DEBUG="true",
        EMAIL_TIMEOUT="7",
        GPULEDGER_NOTIFY_TIMEOUT_SECONDS="3",
        DEFAULT_FROM_EMAIL="Ledger <l@example.test>",
    )
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import config.settings as s; print(s.EMAIL_TIMEOUT, s.SERVER_EMAIL)",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "7 Ledger <l@example.test>"


def test_coverage_measures_every_project_app():
    import tomllib

    from django.apps import apps

    source = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["coverage"]["run"]["source"]
    )
    local = {
        config.name
        for config in apps.get_app_configs()
        if (ROOT / config.name.split(".")[0]).is_dir()
    }

    assert sorted((local | {"config"}) - source) == []

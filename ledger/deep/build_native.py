"""Builds the deep backfill's native XOR chunk decoder (``_xor.c``) in place, next to its source,
for the Python that runs this script (``make venv`` runs it with the virtualenv's).

    python ledger/deep/build_native.py [--if-stale]

Compiled directly with the C compiler Python was built with (``cc`` if it names none) and
Python's headers: no setuptools, no install step. ``--if-stale`` does nothing when the module is
newer than its source. Without the module ``ledger.deep.chunks`` decodes with numpy (slower).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "_xor.c"


def target() -> Path:
    """The module's file for this Python (``_xor.cpython-311-x86_64-linux-gnu.so``)."""
    return HERE / f"_xor{sysconfig.get_config_var('EXT_SUFFIX')}"


def command(output: Path) -> list[str]:
    compiler = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    include = sysconfig.get_paths()["include"]
    flags = ["-O2", "-fPIC", "-shared", "-Wall", "-fno-strict-aliasing", f"-I{include}"]
    return [*compiler, *flags, str(SOURCE), "-o", str(output)]


def build(if_stale: bool = False) -> Path:
    found = target()
    if if_stale and found.exists() and found.stat().st_mtime >= SOURCE.stat().st_mtime:
        return found
    # Written beside, then renamed: a process importing it never sees half a file.
    partial = found.with_name(f"{found.name}.{os.getpid()}.tmp")
    try:
        subprocess.run(command(partial), check=True)
        partial.replace(found)
    finally:
        partial.unlink(missing_ok=True)
    return found


if __name__ == "__main__":
    built = build(if_stale="--if-stale" in sys.argv[1:])
    sys.stdout.write(f"built {built.relative_to(HERE.parent.parent)}\n")

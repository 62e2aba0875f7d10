"""Pausing Python's cyclic garbage collector around bulk decoding and building.

Decoding a collection window's Prometheus answers and building its rows allocate millions of
small objects (dicts, tuples, strings) that hold no reference cycles and live until the window
is written. Every allocation burst made the collector walk all of them again: a third of the
process CPU of a 50,000-GPU window (bench/RESULTS.md, "Kueue metrics in the collection window").
Reference counting still frees everything as usual; the one collection at the end frees any
cycle made inside.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """No automatic cyclic collection inside (process-wide); nested uses are no-ops."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()

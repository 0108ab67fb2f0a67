"""Shared pytest configuration: make tests/fake_drivers.py importable,
keep the compile cache of kernels from source out of the user's home, and
keep the objects of collection out of every later garbage collection."""
from __future__ import annotations

import gc
import os
import pathlib
import sys
import tempfile

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

# One folder for the session and its children (the tests of the cache
# itself set their own); a machine's own cache is never read or written.
if "ACCELERATOR_KERNEL_CACHE_DIR" not in os.environ:
    os.environ["ACCELERATOR_KERNEL_CACHE_DIR"] = tempfile.mkdtemp(
        prefix="accelerator-kernel-cache-")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move what collection made (the test modules, their parameters, the
    items: most of the process's objects) into the permanent generation.

    The suite collects garbage thousands of times (the fault tests settle
    six times a case, the fuzz at every empty_cache step, the leak loops
    at every round), and a full collection traverses every tracked object:
    under the sanitizers, with Python's objects in ASan's malloc, one took
    about 0.1 s, most of the suite's time.  Frozen objects are still freed
    by their reference counts; only cycles among them are never looked
    for, and collection's own cycles are collected first.  What a test
    makes is young and collected as before."""
    gc.collect()
    gc.freeze()

"""What kind of build of the extension the suite is testing."""
from __future__ import annotations

from pathlib import Path

import accelerator

# Symbols that only an instrumented build links: the ASan/UBSan build of
# the instrumented build of tests/build.sh (ASan, UBSan and coverage).
MARKERS = (b"__asan_init", b"__ubsan_handle", b"__gcov_", b"__llvm_gcov")


def instrumented_extension() -> str | None:
    """The instrumentation found in the extension under test, or None."""
    data = Path(accelerator._accelerator.__file__).read_bytes()
    found = [m.decode() for m in MARKERS if m in data]
    return ", ".join(found) or None

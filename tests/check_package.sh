#!/usr/bin/env bash
# Packaging checks for CI (run after tests/run.sh has built the doubles and
# the extension in place):
#   1. the type stubs match the module (mypy.stubtest)
#   2. the Sphinx docs build with warnings as errors
#   3. python -m build makes an sdist and, from it, a wheel
#   4. the wheel installs into a fresh venv and passes the tests there
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

say() { printf '\n== %s\n' "$*"; }

say "stubtest"
"$PYTHON" -m pip install -q --disable-pip-version-check mypy build \
    -r docs/requirements.txt
PYTHONPATH=src "$PYTHON" -m mypy.stubtest accelerator

say "docs (sphinx -W)"
PYTHONPATH=src "$PYTHON" -m sphinx -q -W -b html docs "$work/html"

say "sdist and wheel"
"$PYTHON" -m build -q --outdir "$work/dist" . >/dev/null
ls "$work/dist"

say "the wheel in a fresh venv"
"$PYTHON" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --disable-pip-version-check \
    "$work"/dist/*.whl -r tests/requirements.txt
# The tests from the unpacked sdist, against the installed wheel: remove
# the source package so that the wheel's copy is the one imported.
tar -xzf "$work"/dist/*.tar.gz -C "$work"
sdist=$(find "$work" -maxdepth 1 -type d -name 'accelerator-*')
rm -rf "$sdist/src/accelerator"
make -s -C "$sdist/tests/drivers"
(cd "$sdist" && "$work/venv/bin/python" -m pytest -q -p no:cacheprovider tests)

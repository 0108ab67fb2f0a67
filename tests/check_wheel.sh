#!/usr/bin/env bash
# The package as a user installs it (tests/stages.py runs this after the
# plain build): `python -m build` makes an sdist and, from it, a wheel; the
# wheel goes into a fresh venv, and the sdist's tests run there against it
# on the CUDA double, uninstrumented (the source package is removed from
# the unpacked sdist, so that the wheel's copy is the one imported).
#
#   bash tests/check_wheel.sh DIR     (DIR: an empty work folder)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
work=${1:?usage: check_wheel.sh DIR}
rm -rf "$work"
mkdir -p "$work"
work=$(realpath "$work")

echo "== sdist and wheel"
"$PYTHON" -m build -q --outdir "$work/dist" . >/dev/null
ls "$work/dist"

echo "== the wheel in a fresh venv"
"$PYTHON" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --disable-pip-version-check \
    "$work"/dist/*.whl -r tests/requirements.txt
tar -xzf "$work"/dist/*.tar.gz -C "$work"
sdist=$(find "$work" -maxdepth 1 -type d -name 'accelerator-*')
rm -rf "$sdist/src/accelerator"
make -s -C "$sdist/tests/drivers"
cd "$sdist"
"$work/venv/bin/python" -m pytest -q -p no:cacheprovider tests

#!/usr/bin/env bash
# Line coverage of csrc/ measured over the whole test suite.
#
#   bash tests/coverage.sh [extra pytest arguments]
#
# Copies the tree to a private directory (the in-place extension is left
# alone), builds the extension there with --coverage, runs the suite on the
# CUDA double and the behaviour suite on Level Zero (when available), then
# prints gcovr's per-file table with the uncovered lines and fails under
# COVERAGE_MIN percent (90) of csrc/'s lines.  COVERAGE_HTML=dir also
# writes an HTML report there.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
MIN=${COVERAGE_MIN:-90}
html_dir=${COVERAGE_HTML:+$(realpath -m "$COVERAGE_HTML")}

say() { printf '\n== %s\n' "$*"; }

work=$(mktemp -d "${TMPDIR:-/tmp}/accelerator-coverage.XXXXXX")
trap 'rm -rf "$work"' EXIT
tar cf - --exclude=./.git --exclude=./build --exclude=./tests/drivers/build \
    --exclude='*.so' --exclude='*.o' --exclude='*.gcda' --exclude='*.gcno' \
    --exclude=__pycache__ --exclude=.pytest_cache --exclude=.hypothesis . \
    | tar xf - -C "$work"

say "installing test requirements and gcovr"
"$PYTHON" -m pip install -q --disable-pip-version-check \
    -r tests/requirements.txt gcovr

say "building the doubles and the extension with --coverage"
make -s -C "$work/tests/drivers" >/dev/null
(cd "$work" && ACCELERATOR_WERROR=1 ACCELERATOR_CFLAGS="--coverage -fprofile-update=atomic -O0 -g" \
    ACCELERATOR_LDFLAGS="--coverage" \
    "$PYTHON" setup.py -q build_ext --inplace --force 2>&1 \
    | grep -v -e BetaConfiguration -e 'warnings.warn' || true)

status=0
run_pytest() {
    (cd "$work" && "$PYTHON" -m pytest -q -p no:cacheprovider "$@") \
        || status=1
}

say "the suite on the CUDA double"
run_pytest tests "$@"
if [ -f /usr/include/level_zero/ze_ddi.h ] \
        && ldconfig -p | grep -q 'libze_loader.so.1 ' \
        && [ -f "$work/tests/drivers/build/libze_test_driver.so" ]; then
    say "the behaviour suite on Level Zero (direct and intercept modes)"
    ACCELERATOR_TEST_BACKEND=xpu run_pytest tests/behaviour "$@"
    ZE_ENABLE_LOADER_INTERCEPT=1 ACCELERATOR_TEST_BACKEND=xpu \
        run_pytest tests/behaviour "$@"
else
    say "SKIPPED the Level Zero runs: no loader, headers or test driver"
fi
if [ "$status" != 0 ]; then
    say "tests failed: coverage not reported"
    exit 1
fi

say "line coverage of csrc/ (fails under $MIN%)"
html=()
if [ -n "$html_dir" ]; then
    mkdir -p "$html_dir"
    html=(--html-details "$html_dir/index.html")
fi
(cd "$work" && "$PYTHON" -m gcovr --root . --filter 'csrc/' \
    --exclude-unreachable-branches --txt --print-summary \
    --gcov-ignore-parse-errors=negative_hits.warn_once_per_file \
    --fail-under-line "$MIN" "${html[@]}" build)

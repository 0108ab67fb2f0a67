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
# shellcheck source=tests/private_build.sh
. tests/private_build.sh

work=$(mktemp -d "${TMPDIR:-/tmp}/accelerator-coverage.XXXXXX")
trap 'rm -rf "$work"' EXIT
private_copy "$work"

say "installing test requirements and gcovr"
"$PYTHON" -m pip install -q --disable-pip-version-check \
    -r tests/requirements.txt gcovr

say "building the doubles and the extension with --coverage"
private_build "$work" "--coverage -fprofile-update=atomic -O0 -g" \
    "--coverage" "-O2 -g"

PYTEST_ARGS=("$@")
run_suites "$work" direct intercept
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

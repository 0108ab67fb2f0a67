#!/usr/bin/env bash
# Line coverage of csrc/ over every stage that ran on the instrumented
# build (tests/build.sh instrumented DIR; tests/stages.py runs this after
# them): gcovr's per-file table with the uncovered lines; fails under
# COVERAGE_MIN percent (92) of csrc/'s lines.  COVERAGE_HTML=dir also writes
# an HTML report there.
#
#   bash tests/coverage_report.sh DIR
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
MIN=${COVERAGE_MIN:-92}
dir=${1:?usage: coverage_report.sh DIR}
html=()
if [ -n "${COVERAGE_HTML:-}" ]; then
    mkdir -p "$COVERAGE_HTML"
    html=(--html-details "$(realpath "$COVERAGE_HTML")/index.html")
fi
cd "$dir"
"$PYTHON" -m gcovr --root . --filter 'csrc/' \
    --exclude-unreachable-branches --txt --print-summary \
    --gcov-ignore-parse-errors=negative_hits.warn_once_per_file \
    --fail-under-line "$MIN" "${html[@]}" build

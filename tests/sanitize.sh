#!/usr/bin/env bash
# The whole test suite with AddressSanitizer and UndefinedBehaviorSanitizer.
#
#   bash tests/sanitize.sh [extra pytest arguments]
#
# Copies the tree to a private directory (the in-place extension and the
# doubles in tests/drivers/build are left alone), builds the extension and
# the driver doubles there with -fsanitize=address,undefined, and runs the
# suite on the CUDA double, then the behaviour suite on Level Zero (direct,
# intercept and validation-layer modes) when Debian's loader and the test
# driver are available.  CPython is not instrumented, so the ASan runtime is
# preloaded; leak detection is off (CPython keeps memory until exit on
# purpose); Python objects are allocated with malloc so that ASan sees
# them.  Every report also goes to a log file: any report fails the run,
# even one from a subprocess whose exit status a test did not look at.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
CC=${CC:-cc}

say() { printf '\n== %s\n' "$*"; }
# shellcheck source=tests/private_build.sh
. tests/private_build.sh

asan_runtime=$("$CC" -print-file-name=libasan.so)
if [ ! -f "$asan_runtime" ]; then
    echo "sanitize.sh: $CC has no AddressSanitizer runtime (libasan.so)" >&2
    exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/accelerator-sanitize.XXXXXX")
trap 'rm -rf "$work"' EXIT
private_copy "$work"
logs="$work/sanitizer-logs"
mkdir -p "$logs"

say "installing test requirements"
"$PYTHON" -m pip install -q --disable-pip-version-check -r tests/requirements.txt

flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
flags="$flags -fno-omit-frame-pointer -g -O1"
say "building the doubles and the extension with $flags"
CC="$CC" private_build "$work" "$flags" "-fsanitize=address,undefined"

export LD_PRELOAD="$asan_runtime${LD_PRELOAD:+:$LD_PRELOAD}"
# use_sigaltstack=0: ASan gives every thread an alternate signal stack and
# at the thread's exit unmaps whatever alternate stack the thread then has.
# PoCL's LLVM (llvm::sys's CreateSigAltStack) replaces it with a malloc'd
# one in the thread that first initialises OpenCL (so does CPython's
# faulthandler.enable()), and that unmap then fails ("AddressSanitizer
# failed to deallocate ... unable to unmap", CHECK failed) in a process
# that did nothing wrong.  Without ASan's own stacks nothing is unmapped;
# ASan still reports every memory error (only a stack overflow's report
# would lack a clean stack to run on).
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=1:use_sigaltstack=0:log_path=$logs/asan:log_exe_name=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$logs/ubsan:log_exe_name=1"
export PYTHONMALLOC=malloc
# Sanitized code runs slower: give the fuzzer its minimum, not more.
export FUZZ_EXAMPLES=${FUZZ_EXAMPLES:-50}

PYTEST_ARGS=("$@")
run_suites "$work" direct intercept validation

reports=$(find "$logs" -type f | sort)
if [ -n "$reports" ]; then
    say "sanitizer reports"
    for report in $reports; do
        echo "--- $report"
        cat "$report"
    done
    status=1
fi
if [ "$status" = 0 ]; then
    say "sanitizers: clean"
else
    say "sanitizers: FAILED"
fi
exit "$status"

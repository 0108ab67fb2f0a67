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

asan_runtime=$("$CC" -print-file-name=libasan.so)
if [ ! -f "$asan_runtime" ]; then
    echo "sanitize.sh: $CC has no AddressSanitizer runtime (libasan.so)" >&2
    exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/accelerator-sanitize.XXXXXX")
trap 'rm -rf "$work"' EXIT
tar cf - --exclude=./.git --exclude=./build --exclude=./tests/drivers/build \
    --exclude='*.so' --exclude='*.o' --exclude='*.gcda' --exclude='*.gcno' \
    --exclude=__pycache__ --exclude=.pytest_cache --exclude=.hypothesis . \
    | tar xf - -C "$work"
logs="$work/sanitizer-logs"
mkdir -p "$logs"

say "installing test requirements"
"$PYTHON" -m pip install -q --disable-pip-version-check -r tests/requirements.txt

flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
flags="$flags -fno-omit-frame-pointer -g -O1"
say "building the doubles and the extension with $flags"
make -s -C "$work/tests/drivers" CC="$CC" CFLAGS="$flags" >/dev/null
(cd "$work" && ACCELERATOR_WERROR=1 ACCELERATOR_CFLAGS="$flags" \
    ACCELERATOR_LDFLAGS="-fsanitize=address,undefined" \
    "$PYTHON" setup.py -q build_ext --inplace --force 2>&1 \
    | grep -v -e BetaConfiguration -e 'warnings.warn' || true)
test -f "$work"/accelerator/_accelerator*.so

export LD_PRELOAD="$asan_runtime${LD_PRELOAD:+:$LD_PRELOAD}"
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=1:log_path=$logs/asan:log_exe_name=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$logs/ubsan:log_exe_name=1"
export PYTHONMALLOC=malloc
# Sanitized code runs slower: give the fuzzer its minimum, not more.
export FUZZ_EXAMPLES=${FUZZ_EXAMPLES:-50}

status=0
run_pytest() {
    (cd "$work" && "$PYTHON" -m pytest -q -p no:cacheprovider "$@") \
        || status=1
}

say "the suite on the CUDA double, sanitized"
run_pytest tests "$@"

if [ -f /usr/include/level_zero/ze_ddi.h ] \
        && ldconfig -p | grep -q 'libze_loader.so.1 ' \
        && [ -f "$work/tests/drivers/build/libze_test_driver.so" ]; then
    say "the behaviour suite on Level Zero (direct), sanitized"
    ACCELERATOR_TEST_BACKEND=xpu run_pytest tests/behaviour "$@"
    say "the behaviour suite on Level Zero (loader intercept), sanitized"
    ZE_ENABLE_LOADER_INTERCEPT=1 ACCELERATOR_TEST_BACKEND=xpu \
        run_pytest tests/behaviour "$@"
    say "the behaviour suite on Level Zero (validation layer), sanitized"
    ZE_ENABLE_VALIDATION_LAYER=1 ZE_ENABLE_PARAMETER_VALIDATION=1 \
        ACCELERATOR_TEST_BACKEND=xpu run_pytest tests/behaviour "$@"
else
    say "SKIPPED the Level Zero runs: no loader, headers or test driver"
fi

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

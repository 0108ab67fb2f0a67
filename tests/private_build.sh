# shellcheck shell=bash
# Sourced by tests/sanitize.sh and tests/coverage.sh: what both do to run
# the suite on an instrumented build without touching the in-place one.
#
#   private_copy DIR           copy the source tree (no build outputs) to DIR
#   private_build DIR CFLAGS LDFLAGS [DOUBLE_CFLAGS]
#                              build the doubles (with DOUBLE_CFLAGS, by
#                              default CFLAGS) and the extension in DIR
#   run_suites DIR MODES...    the suite on the CUDA double, then the
#                              behaviour suite on Level Zero in each MODE
#                              (direct, intercept, validation) when the
#                              loader, headers and test driver are there,
#                              then on OpenCL (PoCL) when the ICD loader,
#                              PoCL and the interposer are there;
#                              sets status=1 on any failure
# Expects PYTHON and say() from the caller.

private_copy() {
    tar cf - --exclude=./.git --exclude=./build \
        --exclude=./tests/drivers/build --exclude='*.so' --exclude='*.o' \
        --exclude='*.gcda' --exclude='*.gcno' --exclude=__pycache__ \
        --exclude=.pytest_cache --exclude=.hypothesis . | tar xf - -C "$1"
}

private_build() {
    local dir=$1 cflags=$2 ldflags=$3 double_cflags=${4:-$2}
    make -s -C "$dir/tests/drivers" CFLAGS="$double_cflags" >/dev/null
    (cd "$dir" && ACCELERATOR_WERROR=1 ACCELERATOR_CFLAGS="$cflags" \
        ACCELERATOR_LDFLAGS="$ldflags" \
        "$PYTHON" setup.py -q build_ext --inplace --force 2>&1 \
        | grep -v -e BetaConfiguration -e 'warnings.warn' || true)
    test -f "$dir"/src/accelerator/_accelerator*.so
}

status=0

# shellcheck disable=SC2034  # status is read by the sourcing scripts
run_pytest() {
    (cd "$1" && shift && "$PYTHON" -m pytest -q -p no:cacheprovider "$@") \
        || status=1
}

run_opencl() {
    local dir=$1
    if ! ldconfig -p | grep -c 'libOpenCL.so.1 ' >/dev/null \
            || ! ls /etc/OpenCL/vendors/*pocl* >/dev/null 2>&1 \
            || [ ! -f "$dir/tests/drivers/build/libopencl_interposer.so" ]; then
        say "SKIPPED the OpenCL run: no ICD loader, PoCL or interposer"
        return
    fi
    say "the behaviour suite on OpenCL (PoCL)"
    ACCELERATOR_TEST_BACKEND=opencl \
        run_pytest "$dir" tests/behaviour "${PYTEST_ARGS[@]}"
}

run_suites() {
    local dir=$1 mode
    shift
    say "the suite on the CUDA double"
    run_pytest "$dir" tests "${PYTEST_ARGS[@]}"
    run_opencl "$dir"
    if [ ! -f /usr/include/level_zero/ze_ddi.h ] \
            || ! ldconfig -p | grep -c 'libze_loader.so.1 ' >/dev/null \
            || [ ! -f "$dir/tests/drivers/build/libze_test_driver.so" ]; then
        say "SKIPPED the Level Zero runs: no loader, headers or test driver"
        return
    fi
    for mode in "$@"; do
        say "the behaviour suite on Level Zero ($mode)"
        case $mode in
            direct) ACCELERATOR_TEST_BACKEND=xpu \
                run_pytest "$dir" tests/behaviour "${PYTEST_ARGS[@]}" ;;
            intercept) ZE_ENABLE_LOADER_INTERCEPT=1 \
                ACCELERATOR_TEST_BACKEND=xpu \
                run_pytest "$dir" tests/behaviour "${PYTEST_ARGS[@]}" ;;
            validation) ZE_ENABLE_VALIDATION_LAYER=1 \
                ZE_ENABLE_PARAMETER_VALIDATION=1 \
                ACCELERATOR_TEST_BACKEND=xpu \
                run_pytest "$dir" tests/behaviour "${PYTEST_ARGS[@]}" ;;
        esac
    done
}

#!/usr/bin/env bash
# The test command's builds (tests/stages.py runs them):
#
#   bash tests/build.sh plain
#       the driver test doubles (make -C tests/drivers) and the extension
#       in place with warnings as errors, then an editable install of this
#       checkout (the package at the root), so that `import accelerator`, `python -m
#       accelerator` and the pytest plugin's entry point are this
#       checkout's from any folder
#   bash tests/build.sh instrumented DIR
#       a private copy of the source tree (no build outputs) in DIR, with
#       the doubles built with AddressSanitizer and
#       UndefinedBehaviorSanitizer, and the extension with both and with
#       line coverage (gcov): one build that every instrumented stage of
#       the suite runs on, leaving the in-place build alone
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
CC=${CC:-cc}
export CC

case ${1:-} in
plain)
    make -s -C tests/drivers
    ACCELERATOR_WERROR=1 "$PYTHON" setup.py -q build_ext --inplace
    "$PYTHON" -m pip install -q --disable-pip-version-check --no-deps -e .
    ;;
instrumented)
    dir=${2:?usage: build.sh instrumented DIR}
    if [ ! -f "$("$CC" -print-file-name=libasan.so)" ]; then
        echo "build.sh: $CC has no AddressSanitizer runtime (libasan.so)" >&2
        exit 2
    fi
    rm -rf "$dir"
    mkdir -p "$dir"
    tar cf - --exclude=./.git --exclude=./build \
        --exclude=./tests/drivers/build --exclude='*.so' --exclude='*.o' \
        --exclude='*.gcda' --exclude='*.gcno' --exclude=__pycache__ \
        --exclude=.pytest_cache --exclude=.hypothesis . | tar xf - -C "$dir"
    sanitize="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
    sanitize="$sanitize -fno-omit-frame-pointer -g"
    make -s -C "$dir/tests/drivers" CFLAGS="$sanitize -O1"
    # -O0 for line coverage that follows the source; atomic counters, as
    # the suite's threads run the same lines at once.
    cd "$dir"
    ACCELERATOR_WERROR=1 \
        ACCELERATOR_CFLAGS="$sanitize -O0 --coverage -fprofile-update=atomic" \
        ACCELERATOR_LDFLAGS="-fsanitize=address,undefined --coverage" \
        "$PYTHON" setup.py -q build_ext --inplace --force 2>&1 \
        | grep -v -e BetaConfiguration -e 'warnings.warn' || true
    test -f accelerator/_accelerator*.so
    ;;
*)
    echo "usage: build.sh plain | instrumented DIR" >&2
    exit 2
    ;;
esac

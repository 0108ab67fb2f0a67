#!/usr/bin/env bash
# The test command: sets up what the tests need on a fresh machine, then
# runs the whole suite once per backend.
#
#   bash tests/run.sh [extra pytest arguments]
#
# 1. Debian's Level Zero loader and headers (libze1, libze-dev) when missing
#    and we can install them (root and apt-get); otherwise the Level Zero
#    runs are skipped with the reason printed.
#    valgrind likewise, for the callgrind gate (skipped without it).
#    Open MPI's mpirun (openmpi-bin) likewise, for the launcher test.
# 2. pytest (tests/requirements.txt), the driver test doubles
#    (make -C tests/drivers) and the extension, built in place with
#    warnings as errors, then installed editable (pip install -e .).
# 3. pytest: the whole suite with the CUDA double, then the behaviour suite
#    on Level Zero through the real loader, in direct mode, in the loader's
#    intercept mode and under its validation layer (streams and events
#    also with the devices on two drivers: waits across drivers), then on
#    OpenCL with PoCL (ocl-icd-libopencl1, pocl-opencl-icd,
#    opencl-c-headers, installed when missing as for Level Zero; skipped
#    with the reason otherwise); and the memory tests with the caching
#    allocator turned off (ACCELERATOR_ALLOCATOR=direct).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

say() { printf '\n== %s\n' "$*"; }

have_level_zero() {
    [ -f /usr/include/level_zero/ze_ddi.h ] && ldconfig -p | grep -c 'libze_loader.so.1 ' >/dev/null
}

if ! have_level_zero; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        say "installing Debian's Level Zero loader (libze1, libze-dev)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq libze1 libze-dev >/dev/null
    fi
fi

# OpenCL: the ICD loader, PoCL (two CPU devices with POCL_DEVICES) and
# Khronos' headers for the header check.
have_opencl() {
    ldconfig -p | grep -c 'libOpenCL.so.1 ' >/dev/null \
        && ls /etc/OpenCL/vendors/*pocl* >/dev/null 2>&1 \
        && [ -f /usr/include/CL/cl.h ]
}

if ! have_opencl; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        say "installing OpenCL (ocl-icd-libopencl1, pocl-opencl-icd," \
            "opencl-c-headers, ocl-icd-opencl-dev)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq ocl-icd-libopencl1 pocl-opencl-icd \
            opencl-c-headers ocl-icd-opencl-dev >/dev/null || true
    fi
fi

# valgrind for the callgrind gate (tests/test_callgrind_gate.py), which is
# skipped with the reason where it cannot be installed.
if ! command -v valgrind >/dev/null || [ ! -f /usr/include/valgrind/callgrind.h ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        say "installing valgrind (the callgrind gate)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq valgrind >/dev/null || true
    fi
fi

# Open MPI's mpirun, for the test that runs two ranks under a real launcher
# (skipped, with the reason, where it cannot be installed).
if ! command -v mpirun >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        say "installing Open MPI (openmpi-bin) for the launcher test"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq openmpi-bin >/dev/null || true
    fi
fi

# Debian's DLPack 0.6 header, and a current (1.x) dlpack.h from the
# cuda-core wheel, for tests/test_dlpack_header.py (each check is skipped,
# with the reason, where its header cannot be had).
if [ ! -f /usr/include/dlpack/dlpack.h ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        say "installing Debian's dlpack.h (libdlpack-dev)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq libdlpack-dev >/dev/null || true
    fi
fi
dlpack_dir=tests/drivers/build/dlpack-include
if [ ! -f "$dlpack_dir/dlpack/dlpack.h" ]; then
    say "fetching a current dlpack.h (the cuda-core wheel's)"
    wheels=$(mktemp -d)
    if "$PYTHON" -m pip download -q --disable-pip-version-check --no-deps \
            --only-binary=:all: -d "$wheels" "cuda-core==1.2.2" >/dev/null 2>&1; then
        "$PYTHON" - "$wheels" "$dlpack_dir" <<'PY'
import pathlib, sys, zipfile
wheels, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]) / "dlpack"
for wheel in wheels.glob("*.whl"):
    with zipfile.ZipFile(wheel) as z:
        names = sorted(n for n in z.namelist() if n.endswith("/dlpack.h"))
        if names:
            out.mkdir(parents=True, exist_ok=True)
            (out / "dlpack.h").write_bytes(z.read(names[0]))
            break
PY
    fi
    rm -rf "$wheels"
fi
if [ -f "$dlpack_dir/dlpack/dlpack.h" ]; then
    export ACCELERATOR_DLPACK_INCLUDE="$PWD/$dlpack_dir"
fi

say "installing test requirements"
"$PYTHON" -m pip install -q --disable-pip-version-check -r tests/requirements.txt

say "building the driver test doubles and the extension"
make -s -C tests/drivers
ACCELERATOR_WERROR=1 "$PYTHON" setup.py -q build_ext --inplace
# An editable install of this checkout (src layout), so that `import
# accelerator` and `python -m accelerator` work from any folder, this
# one included, and the pytest plugin's entry point is this checkout's.
"$PYTHON" -m pip install -q --disable-pip-version-check --no-deps -e .

say "the suite on the CUDA driver double"
"$PYTHON" -m pytest tests "$@"

say "the memory tests without caching (ACCELERATOR_ALLOCATOR=direct)"
ACCELERATOR_ALLOCATOR=direct "$PYTHON" -m pytest \
    tests/behaviour/test_memory.py tests/behaviour/test_allocator.py "$@"

if have_level_zero && [ -f tests/drivers/build/libze_test_driver.so ]; then
    say "the behaviour suite on Level Zero (real loader, direct mode)"
    ACCELERATOR_TEST_BACKEND=xpu "$PYTHON" -m pytest tests/behaviour "$@"
    say "the behaviour suite on Level Zero (loader intercept mode)"
    ZE_ENABLE_LOADER_INTERCEPT=1 ACCELERATOR_TEST_BACKEND=xpu \
        "$PYTHON" -m pytest tests/behaviour "$@"
    # Events cannot cross drivers: waits between devices of two drivers
    # go through the backend's bridge.  (Copies between them are not
    # supported, so the memory tests stay on one driver.)
    say "streams and events on Level Zero, one device on each of two drivers"
    ZE_ENABLE_LOADER_INTERCEPT=1 FAKE_ZE_DRIVERS=2 ACCELERATOR_TEST_BACKEND=xpu \
        "$PYTHON" -m pytest tests/behaviour/test_events.py \
        tests/behaviour/test_streams.py tests/behaviour/test_leaks.py \
        tests/behaviour/test_faults.py -k "across or wait or record or query \
        or events or streams" "$@"
    say "the behaviour suite on Level Zero (validation layer)"
    ZE_ENABLE_VALIDATION_LAYER=1 ZE_ENABLE_PARAMETER_VALIDATION=1 \
        ACCELERATOR_TEST_BACKEND=xpu "$PYTHON" -m pytest tests/behaviour "$@"
else
    say "SKIPPED the Level Zero runs: Debian's libze1/libze-dev are not" \
        "installed and could not be (needs root and apt-get)"
fi

if have_opencl && [ -f tests/drivers/build/libopencl_interposer.so ]; then
    say "the behaviour suite on OpenCL (PoCL, two CPU devices)"
    ACCELERATOR_TEST_BACKEND=opencl "$PYTHON" -m pytest tests/behaviour "$@"
    say "the memory tests on OpenCL without caching (ACCELERATOR_ALLOCATOR=direct)"
    ACCELERATOR_ALLOCATOR=direct ACCELERATOR_TEST_BACKEND=opencl \
        "$PYTHON" -m pytest tests/behaviour/test_memory.py \
        tests/behaviour/test_allocator.py "$@"
else
    say "SKIPPED the OpenCL run: the ICD loader, PoCL or the OpenCL" \
        "headers are not installed and could not be (needs root and apt-get)"
fi

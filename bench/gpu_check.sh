#!/usr/bin/env bash
# gpu_check.sh - the project on a real NVIDIA GPU, in under 4 minutes.
#
#   bench/gpu_check.sh          (PYTHON=... picks the interpreter)
#   bench/gpu_check.sh --double (a dry run on the CUDA driver double)
#
# On a machine with an NVIDIA GPU and its driver: installs the project with
# `pip install --no-build-isolation .` (downloads nothing) into a throwaway
# venv (never into the interpreter the tests use, where an installed copy
# would shadow the source tree), builds it in place too (the suite runs from
# the source tree and imports accelerator/ at the root, pytest's pythonpath), runs the behaviour
# suite on the real driver, then kernels compiled from CUDA C++ by
# accelerator.Module(code, format="cuda-c++") (cold, from the compile
# cache, as PTX, a template through name_expressions), launched and
# checked against numpy (bench/nvrtc_check.py), then the benchmark side by
# side with torch.accelerator / torch.cuda, cuda.core and CuPy where
# installed, and accelerator beside cuda.core in one process
# (bench_peers.py), memory shared with torch processes both ways
# (bench/ipc_interop.py), a kernel launch beside cuda.core and cuda.bindings
# (bench_kernels.py) and the compile-and-load time of a kernel from source
# beside cuda.core and CuPy (bench_source.py), and writes
# bench/results/<date>-<gpu>.md and .json.  It prints a short table last.
# Exit status: 0, or 1 when the install, the suite or a kernel from source
# failed or the benchmark did not run (the results are written either way).  Without a
# GPU or driver it says so and exits 0.
#
# --double: the same steps with tests/drivers/build first on
# LD_LIBRARY_PATH, so libcuda.so.1 is the CUDA double (tests/test_gpu_check.py
# runs this).  GPU_CHECK_TESTS (default tests/behaviour) and
# GPU_CHECK_RESULTS (default bench/results) change what the suite runs and
# where the results go.
set -euo pipefail

repo="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)"
py="${PYTHON:-$(command -v python3 || command -v python || true)}"
deadline=$((SECONDS + 235))

# The real driver only: nothing may point the package at a double.
unset ACCELERATOR_BACKEND ACCELERATOR_CUDA_LIBRARY ACCELERATOR_ZE_LIBRARY \
    FAKE_CUDA_DEVICES FAKE_ZE_DEVICES
double=0
if [[ "${1:-}" == "--double" ]]; then
    # A dry run: the double stands in for libcuda.so.1, found the way the
    # real one is (dlopen by name), so every step below runs unchanged.
    double=1
    make -s -C "$repo/tests/drivers" >/dev/null
    export LD_LIBRARY_PATH="$repo/tests/drivers/build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

no_gpu() {
    echo "no NVIDIA GPU/driver found; nothing to check ($1)"
    exit 0
}

[[ -n "$py" ]] || no_gpu "and no python to check with"

# "name|device count|driver version" from the driver itself, or exit 1.
probe='
import ctypes, sys
try:
    cu = ctypes.CDLL("libcuda.so.1")
except OSError as exc:
    sys.exit(f"cannot load libcuda.so.1: {exc}")
rc = cu.cuInit(0)
if rc != 0:
    sys.exit(f"cuInit failed: {rc}")
n, dev, ver = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
if cu.cuDeviceGetCount(ctypes.byref(n)) != 0 or n.value < 1:
    sys.exit("the driver reports no device")
name = ctypes.create_string_buffer(256)
cu.cuDeviceGet(ctypes.byref(dev), 0)
cu.cuDeviceGetName(name, 256, dev)
cu.cuDriverGetVersion(ctypes.byref(ver))
print(f"{name.value.decode()}|{n.value}|{ver.value // 1000}.{ver.value % 1000 // 10}")
'
if ! found="$("$py" -c "$probe" 2>&1)"; then
    no_gpu "$found"
fi
IFS='|' read -r gpu count driver <<<"$found"
if command -v nvidia-smi >/dev/null 2>&1; then
    driver="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader \
        2>/dev/null | head -n 1 || true) (CUDA $driver)"
fi
echo "GPU: $gpu x$count, driver $driver"

stamp="$(date -u +%Y-%m-%d)"
slug="$(tr '[:upper:]' '[:lower:]' <<<"$gpu" | tr -cs 'a-z0-9' '-' \
    | sed 's/^-*//; s/-*$//')"
results="${GPU_CHECK_RESULTS:-$repo/bench/results}"
base="$results/$stamp-${slug:-gpu}"
work="$(mktemp -d)"
trap 'rm -rf -- "$work"' EXIT
mkdir -p -- "$results"
cd -- "$repo"

left() { echo $((deadline - SECONDS)); }

status=0
# Into a throwaway venv that sees this interpreter's packages (setuptools):
# installing into the interpreter itself would shadow the source tree for
# the suite below and for every other checkout.
echo "== install (pip install --no-build-isolation ., no network, in a venv)"
venv="$work/venv"
how=""
pip_install() {
    "$venv/bin/python" -m pip install --no-build-isolation --no-deps \
        --no-index -q . >>"$work/install.log" 2>&1
}
if ! "$py" -m venv --system-site-packages "$venv" >"$work/install.log" 2>&1; then
    how="FAILED (python -m venv)"
elif pip_install; then
    how="pip install --no-build-isolation ."
elif grep -q "invalid command 'bdist_wheel'" "$work/install.log"; then
    # setuptools older than 70.1 builds wheels only with the `wheel`
    # package: take it from a local wheel directory if pip has one, else
    # build with setup.py (which needs no wheel) and copy the package in.
    if "$venv/bin/python" -m pip install --no-index -q wheel \
            >>"$work/install.log" 2>&1 && pip_install; then
        how="pip install --no-build-isolation . (after installing wheel)"
    elif "$py" setup.py -q build --build-base "$work/build" \
            >>"$work/install.log" 2>&1; then
        site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
        cp -R "$work"/build/lib*/accelerator "$site/"
        how="setup.py build, copied into the venv (pip could not build a wheel: setuptools $("$py" -c 'import setuptools; print(setuptools.__version__)') without the wheel package; no entry points)"
    else
        how="FAILED (pip install, then setup.py build)"
    fi
else
    how="FAILED (pip install)"
fi
if [[ "$how" == FAILED* ]]; then
    tail -n 20 "$work/install.log"
    installed="$how; see above"
    status=1
else
    # From outside the tree, so that this is the installed copy.
    installed="$(cd -- "$work" || exit 1
        "$venv/bin/python" -c 'import accelerator as a; print(a.__file__, a.is_available())' \
            2>&1 || true) [$how]"
fi
echo "installed: $installed"
"$py" setup.py -q build_ext --inplace >>"$work/install.log" 2>&1 \
    || { tail -n 40 "$work/install.log"; exit 1; }

# The doubles only where the suite refers to them (not needed on `real`).
if grep -rqsE 'drivers/build|CUDA_DOUBLE|ZE_DRIVER' tests/behaviour \
    && command -v make >/dev/null 2>&1; then
    echo "== driver doubles (make -C tests/drivers)"
    make -s -C tests/drivers >>"$work/install.log" 2>&1 || true
fi

echo "== behaviour suite on the real driver"
tests="not run"
if [[ -d tests/behaviour ]]; then
    budget=$(($(left) - 75))
    ((budget > 150)) && budget=150
    if ((budget < 20)); then
        tests="not run: no time left"
        status=1
    else
        rc=0
        ACCELERATOR_TEST_BACKEND=real timeout "$budget" \
            "$py" -m pytest ${GPU_CHECK_TESTS:-tests/behaviour} -q -p no:cacheprovider \
            >"$work/tests.log" 2>&1 || rc=$?
        tail -n 25 "$work/tests.log"
        tests="$(grep -E '(passed|failed|error|skipped|no tests ran)' \
            "$work/tests.log" | tail -n 1 || true)"
        ((rc == 124)) && tests="timed out after ${budget}s: $tests"
        if ((rc != 0)); then
            status=1
            tests="FAILED (exit $rc): $tests"
        fi
    fi
else
    tests="not run: no tests/behaviour"
fi
echo "tests: $tests"

# accelerator.Module compiles saxpy from CUDA C++ with NVRTC (cold, from
# the compile cache, as PTX, and a template through name_expressions), and
# each launch's result is checked against numpy.  On the double: each is
# refused as the double refuses code it cannot run, and its native saxpy
# runs through the same check.
echo "== kernels from source: Module(code, format=\"cuda-c++\"), launch, check"
nvrtc_args=(--markdown "$work/nvrtc.md")
((double)) && nvrtc_args+=(--double)
nvrtc_rc=0
timeout 120 "$py" bench/nvrtc_check.py "${nvrtc_args[@]}" || nvrtc_rc=$?
if ((nvrtc_rc != 0)); then
    status=1
    [[ -s "$work/nvrtc.md" ]] || echo "- nvrtc: FAILED (exit $nvrtc_rc)" >"$work/nvrtc.md"
fi

# Device memory shared with torch processes, both ways, by the driver's
# own handle (bench/ipc_interop.py); on the double there is no torch to
# share with.
echo "== IPC with torch: torch opens ours, ours opens torch's"
if ((double)); then
    echo "- IPC with torch: skipped (the CUDA double is no driver for torch)" \
        >"$work/ipc.md"
else
    ipc_rc=0
    timeout 240 "$py" bench/ipc_interop.py >"$work/ipc.md" || ipc_rc=$?
    ((ipc_rc == 0)) || status=1
    [[ -s "$work/ipc.md" ]] || echo "- IPC with torch: FAILED (exit $ipc_rc)" >"$work/ipc.md"
fi
cat -- "$work/ipc.md"

echo "== benchmark (quick), with peers"
bench_rc=0
budget=$(($(left) - 5))
((budget < 30)) && budget=30
timeout "$budget" "$py" bench/bench_api.py --quick --peers \
    --json "$base.json" --markdown "$work/bench.md" \
    --summary "$work/summary.md" || bench_rc=$?
if ((bench_rc != 0)); then
    status=1
    echo "benchmark: FAILED (exit $bench_rc)" >"$work/summary.md"
fi
echo "== accelerator beside cuda.core, one process"
budget=$(($(left) - 5))
((budget < 30)) && budget=30
timeout "$budget" "$py" bench/bench_peers.py --quick --no-install \
    --markdown "$work/peers.md" || true
echo "== kernel launch beside cuda.core and cuda.bindings"
kernels_args=(--only cuda --quick --no-install --markdown "$work/kernels.md")
((double)) && kernels_args+=(--double)
budget=$(($(left) - 5))
((budget < 30)) && budget=30
timeout "$budget" "$py" bench/bench_kernels.py "${kernels_args[@]}" || true
echo "== compile and load from source beside cuda.core and CuPy"
source_args=(--quick --no-install --markdown "$work/source.md")
((double)) && source_args+=(--double)
budget=$(($(left) - 5))
((budget < 30)) && budget=30
timeout "$budget" "$py" bench/bench_source.py "${source_args[@]}" || true

host="$(uname -srm)"
versions="$("$py" - <<'EOF'
import importlib, platform
out = [f"Python {platform.python_version()}"]
for name in ("torch", "cuda.core", "cupy"):
    try:
        out.append(f"{name} {importlib.import_module(name).__version__}")
    except Exception:
        out.append(f"{name} -")
print(", ".join(out))
EOF
)"
{
    echo "# GPU check: $gpu, $stamp"
    echo
    echo "- GPU: $gpu x$count; driver $driver; host $host"
    echo "- $versions"
    echo "- installed: $installed"
    echo "- behaviour suite (ACCELERATOR_TEST_BACKEND=real): $tests"
    echo "- command: bench/gpu_check.sh ($((SECONDS))s)"
    cat -- "$work/nvrtc.md"
    cat -- "$work/ipc.md"
    echo
    if [[ -s "$work/bench.md" ]]; then
        cat -- "$work/bench.md"
    else
        echo "benchmark: FAILED (exit $bench_rc)"
    fi
    if [[ -s "$work/peers.md" ]]; then
        echo
        cat -- "$work/peers.md"
    fi
    if [[ -s "$work/kernels.md" ]]; then
        echo
        cat -- "$work/kernels.md"
    fi
    if [[ -s "$work/source.md" ]]; then
        echo
        cat -- "$work/source.md"
    fi
} >"$base.md"

echo
echo "wrote ${base#"$repo"/}.md and .json in $((SECONDS))s; tests: $tests"
echo
cat -- "$work/summary.md"
exit "$status"

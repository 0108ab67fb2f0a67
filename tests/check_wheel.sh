#!/usr/bin/env bash
# The package as a user installs it (tests/stages.py runs these after the
# plain build).  One wheel, checked by what can differ between it and the
# in-place build, then run under every CPython >= 3.11 the machine has:
#
#   bash tests/check_wheel.sh build DIR
#       `python -m build` makes an sdist and, from it, the wheel (in
#       DIR/dist); the sdist is unpacked (DIR/sdist) without its source
#       package, so that the wheel's copy is the one imported, and its
#       doubles are built; the wheel goes into a fresh venv of this Python
#       (the one the in-place build and every other stage use), where
#       tests/wheel_checks.py checks its files, its abi3 tag, the import
#       from site-packages, the package data, the pytest11 entry point and
#       `python -m accelerator`, and a slice of the suite runs against it
#       on the CUDA double: the public surface, devices, kernels (the
#       launch layer is Python of the package), DLPack and asyncio.
#   bash tests/check_wheel.sh suite DIR VERSION
#       the same wheel (DIR/dist, from `build`) in a fresh venv of CPython
#       VERSION (python$VERSION, or pyenv's $PYENV_ROOT/versions/VERSION.*)
#       with tests/requirements.txt, and the whole behaviour suite against
#       it on the CUDA double, uninstrumented: the abi3 promise, proven.
#       Where that CPython is missing it says so as one skipped check.
#   bash tests/check_wheel.sh plugin DIR
#       backend plugins built outside the tree and installed beside the
#       same wheel in a fresh venv, with pip alone (--no-index
#       --no-build-isolation: no network), against the wheel's
#       accelerator.get_include(): the template (plugins/template), which
#       the report then selects through its entry point, and this tree's
#       HIP backend built from its folder (csrc/backends/hip/) as the
#       distribution of tests/plugin_hip, device type plugin_hip; the
#       behaviour suite then runs through that plugin on the HIP double,
#       uninstrumented (ACCELERATOR_TEST_BACKEND=plugin_hip).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
usage="usage: check_wheel.sh build DIR | suite DIR VERSION | plugin DIR"
mode=${1:?$usage}
work=${2:?$usage}
# The hang guard of every other stage (tests/stages.py TEST_TIMEOUT).
timeout=(--timeout="${ACCELERATOR_TEST_TIMEOUT:-300}" --timeout-method=thread)

# A fresh venv at $1 (Python $2) with the wheel, the test requirements
# and any further requirements.
make_venv() {
    "$2" -m venv "$1"
    "$1/bin/python" -m pip install -q --disable-pip-version-check \
        "$work"/dist/*.whl -r tests/requirements.txt "${@:3}"
}

case $mode in
build)
    rm -rf "$work"
    mkdir -p "$work"
    work=$(realpath "$work")
    echo "== sdist and wheel"
    "$PYTHON" -m build -q --outdir "$work/dist" . >/dev/null
    ls "$work/dist"
    tar -xzf "$work"/dist/*.tar.gz -C "$work"
    mv "$work"/accelerator-*/ "$work/sdist"
    # The doubles first: they include the package's native_kernel.h.
    make -s -C "$work/sdist/tests/drivers"
    rm -rf "$work/sdist/accelerator"
    echo "== the wheel in a fresh venv of $("$PYTHON" -V)"
    make_venv "$work/venv" "$PYTHON"
    # From outside both trees; the expected files are the checkout's.
    repo=$PWD
    cd "$work"
    "$work/venv/bin/python" "$repo/tests/wheel_checks.py" \
        "$work"/dist/*.whl "$repo/accelerator" "$work/sdist"
    echo "== a slice of the suite against the wheel"
    cd "$work/sdist"
    env -u PYTHONPATH "$work/venv/bin/python" -m pytest -q \
        -p no:cacheprovider "${timeout[@]}" \
        tests/test_api_surface.py tests/behaviour/test_device_api.py \
        tests/behaviour/test_kernels.py tests/behaviour/test_dlpack.py \
        tests/behaviour/test_asyncio.py
    ;;
suite)
    version=${3:?$usage}
    work=$(realpath "$work")
    python=
    for candidate in \
            $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}/versions/$version".* \
              2>/dev/null | sort -V -r | sed "s|\$|/bin/python$version|") \
            "$(command -v "python$version" || true)"; do
        if [ -x "$candidate" ] && [ "$("$candidate" -c \
                'import sys; print("%d.%d" % sys.version_info[:2])' \
                2>/dev/null)" = "$version" ]; then
            python=$candidate
            break
        fi
    done
    if [ -z "$python" ]; then
        echo "0 passed, 1 skipped: no CPython $version on this machine" \
             "(neither python$version on PATH nor" \
             "${PYENV_ROOT:-$HOME/.pyenv}/versions/$version.*): the wheel" \
             "is not tested under it"
        exit 0
    fi
    echo "== the wheel in a fresh venv of $("$python" -V) ($python)"
    make_venv "$work/venv-$version" "$python"
    # A copy of the unpacked sdist per interpreter: the suites of two
    # versions run at once.
    rm -rf "$work/sdist-$version"
    cp -a "$work/sdist" "$work/sdist-$version"
    cd "$work/sdist-$version"
    # The abi3 extension built under the other Python, from this venv.
    env -u PYTHONPATH "$work/venv-$version/bin/python" -c '
import pathlib, sys, sysconfig
import accelerator._accelerator as ext
site = pathlib.Path(sysconfig.get_paths()["platlib"])
if not pathlib.Path(ext.__file__).is_relative_to(site):
    sys.exit(f"the extension came from {ext.__file__}, not from {site}")
print(f"{ext.__file__} loads under Python {sys.version.split()[0]}")'
    env -u PYTHONPATH -u ACCELERATOR_TEST_BACKEND \
        "$work/venv-$version/bin/python" -m pytest -q -p no:cacheprovider \
        "${timeout[@]}" tests/behaviour
    ;;
plugin)
    work=$(realpath "$work")
    venv=$work/venv-plugin
    rm -rf "$venv"
    echo "== the wheel in a fresh venv of $("$PYTHON" -V), and two plugins"
    # setuptools 70.1 and later build wheels without the wheel package.
    make_venv "$venv" "$PYTHON" "setuptools>=70.1"
    hip=$work/plugin-hip
    rm -rf "$hip" "$work/plugin-template"
    mkdir -p "$hip/hip"
    cp csrc/backends/hip/*.c csrc/backends/hip/*.h "$hip/hip/"
    cp tests/plugin_hip/pyproject.toml tests/plugin_hip/setup.py \
        tests/plugin_hip/entry.c "$hip/"
    cp -r plugins/template/accelerator_template \
        "$hip/accelerator_plugin_hip"
    cp -r plugins/template "$work/plugin-template"
    cd "$work"
    for package in plugin-template plugin-hip; do
        env -u PYTHONPATH "$venv/bin/python" -m pip install -q \
            --disable-pip-version-check --no-index --no-build-isolation \
            --no-deps "./$package"
    done
    echo "== the template, found through its entry point"
    env -u PYTHONPATH ACCELERATOR_BACKEND=template \
        "$venv/bin/python" -m accelerator --require | tee "$work/template.txt"
    grep -q "^  template: selected$" "$work/template.txt"
    grep -q "^      plugin: .*(entry point template = " "$work/template.txt"
    env -u PYTHONPATH "$venv/bin/python" -m pip uninstall -q -y \
        accelerator-template
    echo "== the behaviour suite through the HIP backend as a plugin"
    rm -rf "$work/sdist-plugin"
    cp -a "$work/sdist" "$work/sdist-plugin"
    cd "$work/sdist-plugin"
    env -u PYTHONPATH ACCELERATOR_TEST_BACKEND=plugin_hip \
        "$venv/bin/python" -m pytest -q -p no:cacheprovider "${timeout[@]}" \
        tests/behaviour
    ;;
*)
    echo "$usage" >&2
    exit 2
    ;;
esac

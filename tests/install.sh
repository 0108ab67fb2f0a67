#!/usr/bin/env bash
# The test command's setup (tests/stages.py runs it first): the Debian
# packages of tests/debian-packages.txt that are missing, with one
# `apt-get update` and one `apt-get install` (root only: otherwise the
# missing ones are named and their tests skip with the reason), then the
# Python packages in one pip call.  A no-op, apart from pip's check, on a
# machine that has it all.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

mapfile -t packages < <(sed -e 's/#.*//' tests/debian-packages.txt | awk 'NF {print $1}')
missing=()
for package in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null \
            | grep -q 'ok installed'; then
        missing+=("$package")
    fi
done
status=0
if [ "${#missing[@]}" = 0 ]; then
    echo "Debian packages: all ${#packages[@]} installed"
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    if ! apt-get install -y -qq "${missing[@]}" >/dev/null; then
        # Name the ones that failed rather than stop: their tests skip.
        for package in "${missing[@]}"; do
            apt-get install -y -qq "$package" >/dev/null \
                || { echo "could not install $package"; status=1; }
        done
    fi
else
    echo "missing Debian packages (their tests are skipped, with the" \
         "reason): ${missing[*]}; install them as root"
fi

echo "installing Python packages"
"$PYTHON" -m pip install -q --disable-pip-version-check \
    -r tests/requirements.txt -r tests/requirements-tools.txt
exit "$status"

#!/usr/bin/env bash
# The test command.  On a fresh Debian 12 machine, as root, it installs what
# the tests need (tests/debian-packages.txt, tests/requirements*.txt), builds
# the driver doubles and the extension twice (in place, and a private copy
# with AddressSanitizer, UndefinedBehaviorSanitizer and coverage), then runs
# every configuration of the suite, two at a time: each backend (the CUDA
# double, Level Zero through the real loader in its direct, intercept and
# validation modes and on two drivers, OpenCL on PoCL), each allocator mode,
# the plain build, the wheel in a fresh venv, the stubs, the docs and line
# coverage.  Every stage runs even when one fails; it ends with one table
# and exits nonzero if any stage failed.
#
#   bash tests/run.sh [--list] [--only STAGE,...] [--jobs N] [-- pytest args]
#
# tests/stages.py holds the stages, their budgets and the options.
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" tests/stages.py "$@"

#!/usr/bin/env bash
# Gradescope runs this once, as root and with network, while it builds the autograder's image (Ubuntu).
# Python 3.11 or later in a virtual environment of its own (Ubuntu 24.04's system Python refuses pip
# installs), the CPU build of PyTorch first (any other spec pulls a CUDA build of several GB), then
# this grader from the wheel beside this script, with its other dependencies from PyPI.
set -euo pipefail

source_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
prefix="${BACKPROP_NINJA_PREFIX:-/opt/backprop-ninja}"
export DEBIAN_FRONTEND=noninteractive

python=""
for candidate in python3.13 python3.12 python3.11 python3; do
    if command -v "$candidate" >/dev/null && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
        python="$candidate"
        break
    fi
done
if [ -z "$python" ]; then
    apt-get update
    apt-get install -y python3.11 python3.11-venv
    python=python3.11
fi
if ! "$python" -m venv "$prefix"; then
    # Debian and Ubuntu ship venv's pip in a package of its own.
    apt-get update
    apt-get install -y "$python-venv"
    "$python" -m venv --clear "$prefix"
fi

"$prefix/bin/python" -m pip install --upgrade pip
"$prefix/bin/python" -m pip install "@TORCH@" --index-url https://download.pytorch.org/whl/cpu
"$prefix/bin/python" -m pip install "$source_dir/@WHEEL@"
"$prefix/bin/backprop-ninja" --version

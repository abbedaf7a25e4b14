#!/usr/bin/env bash
# .venv-t36: the device's Triton (3.6.0) beside this project's .venv (its torch and packages, through a .pth
# after Triton 3.6 on the path), for tools/device/tcache.py build: Triton's cache for the device, built here.
# (CI's Triton is 3.8; entries only match the version that reads them.)
# Usage: tools/setup_triton36.sh   (from the repository root, after .venv exists)
set -euo pipefail
PIN=3.6.0
[ -x .venv/bin/python ] || { echo "setup_triton36: make .venv first (README)" >&2; exit 2; }
python3 -m venv .venv-t36
.venv-t36/bin/python -m pip install -q --no-cache-dir --no-deps "triton==$PIN"
sp=$(.venv/bin/python -c "import site; print(site.getsitepackages()[0])")
echo "$sp" > "$(.venv-t36/bin/python -c "import site; print(site.getsitepackages()[0])")/zz_project_venv.pth"
.venv-t36/bin/python -c "import triton, torch; assert triton.__version__ == '$PIN', triton.__version__; print('triton', triton.__version__, 'torch', torch.__version__)"

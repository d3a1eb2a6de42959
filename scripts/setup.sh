#!/usr/bin/env bash
# Set up attnbench on a fresh machine: `bash scripts/setup.sh` (to run) or `bash scripts/setup.sh test`.
#
# torch is installed first and pinned (torch==2.13.0, the CPU wheel here), so that pip never
# resolves a bare `torch` to the newest CUDA build (several GB). A torch you installed
# yourself (e.g. a CUDA build on a GPU machine) is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
quiet=(-q --disable-pip-version-check)

if ! "$PYTHON" -c "import torch" 2>/dev/null; then
  "$PYTHON" -m pip install "${quiet[@]}" "torch==2.13.0"
fi
# Not the timm extra: PyPI's torchvision 0.28.0 (the one for torch 2.13.0) is a CUDA build, whose operators do
# not load beside the CPU torch, and `import torchvision` then fails (docs/porting.md, timm).
extras="" ; [ "${1:-}" = "test" ] && extras="[test,xformers,triton,ray,transformers]"
"$PYTHON" -m pip install "${quiet[@]}" -e ".${extras}"

# Build the built-ins' C++ kernels now (torch's extension cache; a minute or two), so that no first
# command, and no test with a time limit, pays for the compiler. `list` says why if a build fails.
"$PYTHON" -m harness list > /dev/null
# The tests run each kernel on every tier this CPU has (ATTNBENCH_DECODE_ISA=avx2 on an AVX-512 CPU, say): build
# the lower tiers too, here, rather than in the first test that asks (20 s of compiler in a test otherwise).
if [ "${1:-}" = "test" ]; then
  "$PYTHON" -c "from implementations import tiled_decode; tiled_decode.tiers()"
fi

# The report's browser test opens index.html in headless Chromium (Debian's package). Best effort:
# without apt or root the test skips and says why; the rest of the set-up has already succeeded.
if [ "${1:-}" = "test" ] && ! command -v chromium >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
      || echo "setup.sh: could not install chromium; the report's browser test will be skipped" >&2
  else
    echo "setup.sh: chromium not installed (needs apt-get as root); the report's browser test will be skipped" >&2
  fi
fi

#!/usr/bin/env bash
# The CUDA check: on a bare NVIDIA machine (CUDA PyTorch, Triton, pandas, matplotlib, scipy, pytest,
# pytest-benchmark, Hypothesis installed; no network), install attnbench offline and run every CUDA path once.
#
#   bash scripts/gpu_check.sh [--dry-run] [--out DIR] [--deadline S] [--steps a,b,...]
#
# Before: `bash scripts/gpu_wheels.sh` where pip reaches PyPI (fills the ignored .whl/ with the small
# packages the GPU image lacks), then carry .whl with the call. With the device tool:
#   run(command="bash scripts/gpu_check.sh", carry=[".whl"], timeout_s=540)
# Results: $OUT (else results/gpu_check/): summary.json, steps.log, results.tar.gz (scripts/gpu_check.py says
# what each holds). --dry-run (or a machine where torch sees no GPU): the same steps on CPU stand-ins.
set -uo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s.%N)
dry=0
for arg in "$@"; do [ "$arg" = "--dry-run" ] && dry=1; done
install="dry run: nothing installed (PYTHONPATH=$PWD)"
if [ "$dry" = 0 ]; then
  site=/tmp/attnbench-site
  notes=()
  if ls .whl/*.whl >/dev/null 2>&1; then
    if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl; then
      export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
      notes+=("wheels: $(ls .whl | tr '\n' ' ')-> $site")
    else
      notes+=("wheels: pip install from .whl failed")
    fi
  else
    notes+=("wheels: no .whl/ carried (run scripts/gpu_wheels.sh and carry .whl): allpairspy and pydantic may be missing")
  fi
  # The entry points (attnbench's built-ins, the `attnbench` command, its pytest plugin): an editable install
  # without the network or build isolation; PYTHONPATH holds this tree first either way.
  if python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir -e . >/tmp/attnbench-install.log 2>&1; then
    notes+=("attnbench: pip install -e . (offline)")
  else
    notes+=("attnbench: editable install failed ($(tail -1 /tmp/attnbench-install.log)); PYTHONPATH only")
  fi
  install="${notes[*]}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec python3 scripts/gpu_check.py --started "$started" --install "$install" "$@"

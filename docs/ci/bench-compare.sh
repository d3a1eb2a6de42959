#!/usr/bin/env bash
# Benchmark a pull request's base and head on the same machine, one after the other, and compare.
#
#   bash docs/ci/bench-compare.sh BASE_PLUGIN HEAD_PLUGIN OUT_DIR [attnbench bench flags ...]
#
# BASE_PLUGIN and HEAD_PLUGIN are the same plugin file (or module) from the two checkouts: the
# implementation names match, so the cells line up. Writes OUT_DIR/base.json, OUT_DIR/head.json
# and OUT_DIR/compare.md, appends the Markdown to $GITHUB_STEP_SUMMARY when that is set (GitHub
# Actions' job summary), and exits as `attnbench compare` does: 0 no significant regression,
# 1 a regression beyond the threshold (or a cell that newly fails), 2 bad usage.
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: bench-compare.sh BASE_PLUGIN HEAD_PLUGIN OUT_DIR [attnbench bench flags ...]" >&2
  exit 2
fi
base_plugin=$1 head_plugin=$2 out=$3
shift 3
mkdir -p "$out"
attnbench bench --plugin "$base_plugin" --out "$out/base.json" --force --quiet "$@"
attnbench bench --plugin "$head_plugin" --out "$out/head.json" --force --quiet "$@"
status=0
attnbench compare "$out/base.json" "$out/head.json" --markdown "$out/compare.md" || status=$?
if [ -n "${GITHUB_STEP_SUMMARY:-}" ] && [ -f "$out/compare.md" ]; then
  cat "$out/compare.md" >> "$GITHUB_STEP_SUMMARY"
fi
exit "$status"

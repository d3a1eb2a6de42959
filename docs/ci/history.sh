#!/usr/bin/env bash
# Keep the last N bench result files of successive commits and draw their history.
#
#   bash docs/ci/history.sh HISTORY_DIR NEW_RESULT OUT_DIR [N]
#
# Copies NEW_RESULT (an `attnbench bench` result file of the commit just built) into HISTORY_DIR as
# <time>-<commit>.json, deletes all but the newest N files there (default 20), and writes the
# history view of what is left to OUT_DIR: history.html (self-contained), history.md, history.csv
# and plots/history.png, each cell's median per commit with detected steps marked by commit and
# ratio (`attnbench report --history`). Appends history.md to $GITHUB_STEP_SUMMARY when that is set.
# Exits 0 whether or not a step was found: a step is for a reader to judge (the per-PR check,
# `attnbench ab` in docs/ci/attnbench-pr.yml, is the one that fails a job). A plugin's runs are named
# by the plugin repository's commit (environment.plugin_commit), attnbench's own runs by its commit.
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: history.sh HISTORY_DIR NEW_RESULT OUT_DIR [N]" >&2
  exit 2
fi
history=$1 new=$2 out=$3 keep=${4:-20}
mkdir -p "$history"
stamp=$(python3 - "$new" <<'PY'
import json, sys
env = json.load(open(sys.argv[1])).get("environment") or {}
time = (env.get("time") or "0000").replace(":", "").replace("+", "_")
print(f"{time}-{(env.get('plugin_commit') or env.get('git_commit') or 'unknown')[:12]}")
PY
)
cp "$new" "$history/$stamp.json"
# file names start with the run's UTC time, so a name sort is oldest first
ls -1 "$history"/*.json | sort | head -n -"$keep" | xargs -r rm -f
count=$(ls -1 "$history"/*.json | wc -l)
if [ "$count" -lt 2 ]; then
  echo "history.sh: $count result file(s) in $history; a history needs two commits (it grows with each run)"
  exit 0
fi
attnbench report --history "$history"/*.json --out "$out"
if [ -n "${GITHUB_STEP_SUMMARY:-}" ] && [ -f "$out/history.md" ]; then
  cat "$out/history.md" >> "$GITHUB_STEP_SUMMARY"
fi

#!/usr/bin/env bash
# Fill .whl/ (ignored) with the wheels scripts/gpu_check.sh installs on a GPU machine that has no network.
#
#   bash scripts/gpu_wheels.sh          # here, where pip reaches PyPI; then carry .whl with the device call
#
# The GPU machine's image (its package list: scripts/gpu_image_packages.txt) has torch, triton, numpy, pandas,
# matplotlib, scipy, hypothesis, pytest, pytest-benchmark, pytest-timeout, pytest-xdist, ninja and einops.
# attnbench needs more: allpairspy (verify's pairwise cases; no dependencies), pyseccomp (a worker's
# seccomp filter; pure Python over the system's libseccomp, no dependencies), rotary-embedding-torch (the positional tests and module cases; it needs torch and einops, both there)
# and pydantic (reading result files) with its own dependencies (typing-extensions carried too: the image's may be older than pydantic needs).
# The versions are the ones this project is tested with. --no-deps: nothing else is fetched; the check at
# the end reads each wheel's Requires-Dist and fails if one names a package neither carried nor there.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=("allpairspy==2.5.1" "pyseccomp==0.1.2" "rotary-embedding-torch==0.9.1" "pydantic==2.13.4" "pydantic-core==2.46.4"
        "annotated-types==0.7.0" "typing-inspection==0.4.2" "typing-extensions==4.15.0")
IMAGE=scripts/gpu_image_packages.txt  # the packages the GPU image already holds, one name a line
grep -qx '/.whl/' "$(git rev-parse --git-common-dir)/info/exclude" 2>/dev/null \
  || { mkdir -p "$(git rev-parse --git-common-dir)/info"; echo '/.whl/' >> "$(git rev-parse --git-common-dir)/info/exclude"; }
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${WHEELS[@]}"
# One version of each: two would stop the whole install there.
dupes=$(ls .whl/*.whl | sed 's#.*/##; s/-[0-9].*//' | sort | uniq -d)
[ -z "$dupes" ] || { echo "gpu_wheels: more than one version of: $dupes (remove the old ones from .whl)" >&2; exit 1; }
missing=0
for w in .whl/*.whl; do
  while read -r req; do
    name=$(echo "$req" | sed 's/^Requires-Dist: *//; s/[ ;<>=!~(\[].*//' | tr 'A-Z_' 'a-z-')
    carried=$(ls .whl | sed 's/-[0-9].*//' | tr 'A-Z_' 'a-z-' | grep -cx "$name" || true)
    if [ "$carried" = 0 ] && ! grep -qx -- "$name" "$IMAGE"; then
      echo "gpu_wheels: $(basename "$w") requires $name, which is neither carried nor on the GPU image" >&2
      missing=1
    fi
  done < <(unzip -p "$w" '*/METADATA' | grep '^Requires-Dist' | grep -v 'extra ==' || true)
done
# attnbench's own dependencies (pyproject.toml) against the image's package list.
python3 - "$IMAGE" <<'PY' || missing=1
import re, sys, tomllib
from pathlib import Path
lines = Path(sys.argv[1]).read_text().splitlines()
image = {n.strip().lower().replace("_", "-") for n in lines if n.strip() and not n.startswith("#")}
carried = {re.sub(r"-[0-9].*", "", w.name).lower().replace("_", "-") for w in Path(".whl").glob("*.whl")}
deps = tomllib.loads(Path("pyproject.toml").read_text())["project"]["dependencies"]
names = [re.split(r"[ ;<>=!~\[]", d, maxsplit=1)[0].lower().replace("_", "-") for d in deps]
lacking = [n for n in names if n not in image and n not in carried]
if lacking:
    sys.exit(f"gpu_wheels: attnbench needs {lacking}, neither carried nor on the GPU image: add them to WHEELS")
PY
[ "$missing" = 0 ] || exit 1
echo "gpu_wheels: .whl holds $(ls .whl | wc -l) wheels ($(du -sh .whl | cut -f1)), complete: $(ls .whl | tr '\n' ' ')"

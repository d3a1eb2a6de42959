"""The CI recipe in a plugin's own repository, end to end: docs/ci/attnbench-pr.yml's `run:` steps, verbatim.

A throwaway git repository holds a plugin file that imports its own package (``mykern``, beside it,
never installed). Its second commit repeats the package's work three times: a regression by
construction. The recipe checks the base out beside the head (git worktree) and runs `attnbench ab`;
the test checks the verdict (exit 1, a regression whose interval lies above 1), that each side
imported its own checkout's package (the ratio could not be far from 1 otherwise), the commits and
packages recorded in both result files, and the history view over the two commits. A 3x slowdown
decided by an interval over rounds holds under any load the shared machine has.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow  # a git repository, CLI subprocesses and workers that import torch

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "docs" / "ci" / "attnbench-pr.yml"

PACKAGE = '''"""A plugin's own package: the code under test (matmul, softmax, matmul), REPEAT times."""
import torch

REPEAT = {repeat}


def attention(q, k, v, scale):
    out = None
    for _ in range(REPEAT):
        out = torch.softmax((q @ k.transpose(-1, -2)) * scale, dim=-1) @ v
    return out
'''
PLUGIN = '''import mykern  # the package beside this file, from this checkout

from harness import register


@register("my_kernel", backend="torch", description="the repository's own kernel")
def my_kernel(q, k, v, *, causal=False, mask=None, scale=None):
    return mykern.attention(q, k, v, q.shape[-1] ** -0.5 if scale is None else scale)
'''


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True,
                          env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
                               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"})
    return done.stdout.strip()


def _plugin_repository(repo: Path) -> tuple[str, str]:
    """Two commits: the base, and a head whose package does its work three times. Returns both commits."""
    (repo / "mykern").mkdir(parents=True)
    _git(repo, "init", "-q")
    (repo / "plugin.py").write_text(PLUGIN)
    (repo / "mykern" / "__init__.py").write_text(PACKAGE.format(repeat=1))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    base = _git(repo, "rev-parse", "HEAD")
    (repo / "mykern" / "__init__.py").write_text(PACKAGE.format(repeat=3))
    _git(repo, "commit", "-q", "-am", "three times the work")
    return base, _git(repo, "rev-parse", "HEAD")


def _installed(tmp: Path) -> dict[str, str]:
    """The environment of a runner where attnbench is installed (this tree's, as the install step would)."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "attnbench"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m harness "$@"\n')
    shim.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONPATH": str(ROOT)}


def _recipe_steps() -> tuple[dict[str, str], list[dict[str, str]]]:
    workflow = yaml.safe_load(RECIPE.read_text())
    steps = [s for s in workflow["jobs"]["ab"]["steps"] if "run" in s and s.get("id") != "install"]
    return workflow["env"], steps


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    tmp = tmp_path_factory.mktemp("plugin-repo")
    repo = tmp / "repo"
    base, head = _plugin_repository(repo)
    recipe_env, steps = _recipe_steps()
    env = {**_installed(tmp), **recipe_env, "BASE_SHA": base, "GITHUB_STEP_SUMMARY": str(tmp / "summary.md"),
           "AB_FLAGS": "--T 256 --d 64 --heads 4 --rounds 12", "PLUGIN": "plugin.py", "IMPL": "my_kernel"}
    codes = []
    for step in steps:  # GitHub's default shell for `run:`: bash -e -o pipefail; `if: always()` steps run on
        done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=repo,
                              env=env, capture_output=True, text=True, timeout=900)
        codes.append((step["name"], done.returncode, done.stdout + done.stderr))
    return {"repo": repo, "tmp": tmp, "base": base, "head": head, "codes": codes, "env": env}


def test_the_recipe_fails_a_slower_head_with_an_interval_above_one(ran: dict[str, object]) -> None:
    codes = ran["codes"]
    assert isinstance(codes, list) and len(codes) == 3, codes
    (_, worktree, log0), (_, ab, log1), (_, history, log2) = codes
    assert worktree == 0, log0
    assert ab == 1, log1  # the job fails: a slower cell
    assert history == 0, log2
    repo = Path(str(ran["repo"]))
    verdict = json.loads((repo / "ab" / "verdict.json").read_text())
    (cell,) = verdict["cells"]
    assert cell["implementation"] == "my_kernel" and cell["verdict"] == "slower", cell
    assert cell["low"] > 1.0 and cell["ratio"] > 1.5, cell  # three times the work: never near 1, whatever the load
    summary = Path(str(ran["tmp"]), "summary.md").read_text()
    assert "1 slower, 0 faster beyond 10%" in summary and "my_kernel" in summary


def test_each_side_records_its_own_commit_and_packages(ran: dict[str, object]) -> None:
    repo = Path(str(ran["repo"]))
    for side, commit in (("base", ran["base"]), ("head", ran["head"])):
        env = json.loads((repo / "ab" / f"{side}.json").read_text())["environment"]
        assert env["plugin_commit"] == commit, (side, env)
        assert env["plugin_packages"]["mykern"] == "local", env  # imported from the checkout, not installed
        assert env["git_commit"] != commit  # attnbench's own commit is recorded apart


def test_the_history_view_is_labelled_by_the_plugin_commits(ran: dict[str, object]) -> None:
    repo = Path(str(ran["repo"]))
    with open(repo / "ab" / "history" / "history.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    commits = [row["commit"] for row in sorted(rows, key=lambda r: int(r["position"]))]
    assert commits == [str(ran["base"])[:10], str(ran["head"])[:10]], rows


def test_pytest_runs_the_plugin_alone_and_it_imports_its_package(ran: dict[str, object]) -> None:
    repo, env = Path(str(ran["repo"])), dict(ran["env"])  # type: ignore[call-overload]
    listed = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0",
                             "--attnbench-plugin", "plugin.py", "--collect-only", "-q"],
                            cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    tests = [line for line in listed.stdout.splitlines() if "::" in line]
    assert tests and all("my_kernel" in t for t in tests), tests[:5]
    more = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0",
                           "--attnbench-plugin", "plugin.py", "--attnbench-builtins", "--collect-only", "-q"],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    assert more.returncode == 0 and "torch_sdpa" in more.stdout, more.stdout[-2000:] + more.stderr
    # attnbench itself, run from elsewhere: the plugin file's own folder is where `import mykern` resolves
    shown = subprocess.run(["attnbench", "list", "--plugin", str(repo / "plugin.py")], cwd=ran["tmp"], env=env,
                           capture_output=True, text=True, timeout=600)
    assert shown.returncode == 0 and "my_kernel" in shown.stdout, shown.stdout + shown.stderr


TINY = '''import torch

from harness import register


@register("tiny", backend="torch", description="a plugin author's kernel")
def tiny(q, k, v, *, causal=False, mask=None, scale=None):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, attn_mask=mask, scale=scale)
'''


@pytest.mark.parametrize("route", [["--attnbench-plugin", "plugin.py"],
                                   ["--pyargs", "harness.performance", "--attnbench-plugin", "plugin.py"]])
def test_every_printed_node_id_reruns_as_printed(tmp_path: Path, route: list[str]) -> None:
    """From a plugin author's repository (no attnbench checkout): the ids pytest prints for the shipped modules
    select that one test when given back as printed."""
    (tmp_path / "plugin.py").write_text(TINY)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {**_installed(tmp_path), "PYTEST_ADDOPTS": ""}
    base = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "--collect-only", "-q"]
    listed = subprocess.run([*base, *route], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    ids = [line for line in listed.stdout.splitlines() if "::" in line]
    assert ids and all(i.startswith(("harness.conformance::", "harness.performance::")) for i in ids), ids[:3]
    for chosen in (ids[0], ids[-1]):
        again = subprocess.run([*base, chosen, "--attnbench-plugin", "plugin.py"], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=600)
        assert again.returncode == 0, again.stdout + again.stderr
        assert [line for line in again.stdout.splitlines() if "::" in line] == [chosen]

"""The manual: it builds with MkDocs in strict mode (a broken link or anchor fails), the README stays a
front door that links only to pages that exist, and no page carries development history (issue numbers,
work rounds, one machine's sessions) instead of what is true and how to measure it; nor does any tracked file
(code, tests, data, scripts) name a tracker's issue, a work step or one machine's paths."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").rglob("*.md"))

HISTORY = re.compile(r"issue [0-9]+|(?<![:\w])#[0-9]{2,}\b|this VM|the VM\b|round [0-9]|previous session|sessions? [0-9]",
                     re.IGNORECASE)
"""Development history: what a reader cannot act on. State what is true and the command that measures it."""

_ISSUE = "iss" + "ue"  # the patterns below are built from pieces, so this file does not match them itself
NOT_THE_PRODUCT = re.compile("|".join((
    _ISSUE + r" ?#?[0-9]+",  # a tracker's issue number: say what the behaviour is instead
    r"\bthe " + _ISSUE + r"(?:'s\b| asks\b| says\b)|\bof the " + _ISSUE + r"\b",  # a ticket as the reason: say the reason
    "/" + "work/", "/" + "root/", "/" + "home/",  # one machine's paths: a user's checkout has none of them
    "wa" + r"lk[0-9]", "WA" + r"LK\.md",  # a work step's name and its notes: fold what is true into docs/
)), re.IGNORECASE)
"""What no tracked file may say: the product speaks of itself, not of how or where it was made."""


def test_mkdocs_builds_strict(tmp_path: Path) -> None:
    """Every link and anchor in docs/ resolves (mkdocs.yml turns each into a warning, --strict into an error)."""
    if importlib.util.find_spec("mkdocs") is None:
        pytest.fail("mkdocs is not installed; `bash scripts/setup.sh test` installs it (the `test` extra)")
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert (tmp_path / "site" / "index.html").is_file()


def test_readme_is_a_front_door() -> None:
    """At most 12 KB, with the two set-up commands CI and newcomers run, verbatim."""
    text = README.read_text()
    assert len(text.encode()) <= 12 * 1024, f"README.md is {len(text.encode())} bytes: move detail into docs/"
    assert "bash scripts/setup.sh && attnbench run" in text
    assert "bash scripts/setup.sh test && python3 -m pytest" in text
    for status in ("| 0 |", "| 1 |", "| 2 |", "| 3 |", "| 130 |"):
        assert status in text, f"the exit status table lacks {status}"


def test_readme_links_resolve() -> None:
    """README is not built by MkDocs, so its relative links are checked here: each names a file that exists
    (and, for a docs page with an anchor, a heading that gives it)."""
    text = README.read_text()
    links = re.findall(r"\]\(([^)#\s]+)(#[^)\s]*)?\)", text)
    local = [(path, anchor) for path, anchor in links if "://" not in path]
    assert local, "the README should link to its docs pages"
    for path, anchor in local:
        target = ROOT / path
        assert target.exists(), f"README links to {path}, which does not exist"
        if anchor and target.suffix == ".md":
            slugs = {_slug(h) for h in re.findall(r"^#+ (.+)$", target.read_text(), re.MULTILINE)}
            assert anchor[1:] in slugs, f"README links to {path}{anchor}: no such heading"


def _slug(heading: str) -> str:
    """Python-Markdown's toc slug (what MkDocs uses for anchors)."""
    text = re.sub(r"[^\w\s-]", "", heading).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_development_history(page: Path) -> None:
    hits = [f"{page.relative_to(ROOT)}:{n}: {line.strip()}" for n, line in enumerate(page.read_text().splitlines(), 1)
            if HISTORY.search(line)]
    assert not hits, "development history in the docs; say what is true and how to measure it:\n" + "\n".join(hits)


def test_history_pattern_catches_what_it_should() -> None:
    """The lint itself: it flags history and leaves ordinary text (a case id, a heading, a hex colour) alone."""
    for bad in (f"as {_ISSUE} 14 asked", "fixed in #123", "measured on this VM", "round 2 of the work",
                "the previous session left it", "session 6 measured 89%"):
        assert HISTORY.search(bad), bad
    for good in ("B1-H8-T4096-d64-float32", "## Decode with a KV cache", "color #1f77b4", "color:#666", "round-robin",
                 "a cluster session", "a Ray session per run"):
        assert not HISTORY.search(good), good


def _tracked_files() -> list[Path]:
    """Every file git tracks here, or none outside a git checkout (an unpacked sdist, say)."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if listed.returncode != 0:
        return []
    return [ROOT / name for name in listed.stdout.decode().split("\0") if name and (ROOT / name).is_file()]


def test_no_tracked_file_names_issues_work_steps_or_machine_paths() -> None:
    """Code, tests, data, docs and scripts alike (text files; a binary file is skipped)."""
    files = _tracked_files()
    if not files:
        pytest.skip("not a git checkout: no list of tracked files")
    hits = []
    for path in files:
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary
        try:
            text = data.decode()
        except UnicodeDecodeError:
            continue
        hits += [f"{path.relative_to(ROOT)}:{n}: {line.strip()[:160]}" for n, line in enumerate(text.splitlines(), 1)
                 if NOT_THE_PRODUCT.search(line)]
    assert not hits, ("tracked files name an issue, a work step or one machine's paths; say what the product does, "
                      "with paths relative to a checkout:\n" + "\n".join(hits))


def test_tracked_pattern_catches_what_it_should() -> None:
    """The guard itself: it flags issue numbers, machine paths and work-step names, and leaves ordinary text alone."""
    for bad in (f"before {_ISSUE} 36", f"{_ISSUE.capitalize()}#12", f"{_ISSUE} #7's fix", "PYTHONPATH=" + "/wo" + "rk/main",
                "/ro" + "ot/.pyenv/versions/3.11.7/bin/attnbench", "/ho" + "me/me/attnbench", "branch " + "wa" + "lk38b",
                "see " + "WA" + "LK.md", f"what the {_ISSUE} asks of CI", f"the {_ISSUE}'s cheats", f"matrix of the {_ISSUE}"):
        assert NOT_THE_PRODUCT.search(bad), bad
    for good in ("https://github.com/pytorch/pytorch/issues/162588", "an issue with the mask", "implementations/tiled.py:21",
                 "PYTHONPATH=. python3", "a walk over the cells", "the working tree", "/tmp/attnbench-site"):
        assert not NOT_THE_PRODUCT.search(good), good

"""docs/architecture.md's layout table is checked against the tree: every package of ``harness/`` has a row,
every module in it is named in that row, and every module a row names exists. A module added without saying
what it is for, or a row left behind by a move, fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HARNESS = ROOT / "harness"
PAGE = ROOT / "docs" / "architecture.md"
ROW = re.compile(r"^\| `(harness/[\w/]*)`(?:, `[^`]+`)* \| (.*) \|$", re.M)


def _rows() -> dict[Path, str]:
    """Each row of the layout table whose first cell is a folder of harness/, by folder."""
    rows = {ROOT / path: text for path, text in ROW.findall(PAGE.read_text()) if path.endswith("/")}
    assert rows, "docs/architecture.md has no layout rows of the form | `harness/<folder>/` | ... |"
    return rows


def _packages() -> list[Path]:
    return sorted(p.parent for p in HARNESS.rglob("__init__.py") if "__pycache__" not in p.parts)


def _row_for(package: Path, rows: dict[Path, str]) -> tuple[Path, str]:
    """A package's row is its own, or its nearest parent's (a sub-package such as case/structures/ is described
    in its parent's row, after the folder's name)."""
    for folder in (package, *package.parents):
        if folder in rows:
            return folder, rows[folder]
    raise AssertionError(f"{package.relative_to(ROOT)}/ has no row in docs/architecture.md's layout table")


def test_every_package_and_module_is_described() -> None:
    rows = _rows()
    missing = []
    for package in _packages():
        folder, text = _row_for(package, rows)
        named = set(re.findall(r"`([\w.]+)`", text))
        if package != folder and f"{package.name}/" not in text:
            missing.append(f"{package.relative_to(ROOT)}/ (in the row of {folder.relative_to(ROOT)}/)")
        for module in sorted(package.glob("*.py")):
            if module.stem != "__init__" and module.stem not in named:
                missing.append(f"{module.relative_to(ROOT)} (row {folder.relative_to(ROOT)}/)")
    assert not missing, "not in docs/architecture.md's layout table; say what each is for: " + ", ".join(missing)


def test_every_module_a_row_names_exists() -> None:
    """A backticked lowercase name in a row is a module, folder or data file of that row's package (or of a
    sub-package the row describes), or a name its code uses (a function such as `run`, a flag's value)."""
    stale = []
    for folder, text in _rows().items():
        tree = {p.stem for p in folder.rglob("*.py")} | {p.name for p in folder.rglob("*") if p.is_dir()} | \
            {p.name for p in folder.rglob("*.json")}
        code = "\n".join(p.read_text() for p in folder.rglob("*.py"))
        for name in re.findall(r"`([a-z_][a-z0-9_.]*/?)`", text):
            if name.rstrip("/") not in tree and not re.search(rf"\b{re.escape(name)}\b", code):
                stale.append(f"`{name}` in the row of {folder.relative_to(ROOT)}/")
    assert not stale, "docs/architecture.md names modules that do not exist: " + ", ".join(stale)

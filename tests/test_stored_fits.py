"""The report reads the cost-model fits bench stored and fits only what no file stored.

Bench stores each fit naming the cells it was fitted from, under a key of everything it read
(harness.analysis.fitrecords); the report of one complete file takes the fits as they are; otherwise it finds
the sweeps, computes the keys and takes the stored fit where one matches. A stored fit whose exponent was
altered shows in the report exactly when it was read, which tells a read fit from a refit.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from test_report_data import write_bench_run, write_verify_run

from harness.analysis.fitrecords import DRIFT, MODEL, stored_fits, stored_rows
from harness.analysis.points import point_frame
from harness.analysis.sweepfits import run_fits, sweep_fits
from harness.report.findings import analyse
from harness.report.load import load
from harness.report.sources import load_run
from harness.report.terminal import fits_table
from harness.results.files import dumps

PLANTED = 9.876
"""An exponent no honest fit of these cells gives: seen in the report only when the stored fit is read."""


def _with_stored_fits(path: Path) -> dict[str, Any]:
    """The file's JSON with the fits bench stores when a run finishes (written as bench writes them)."""
    _, run = load_run(path)
    data = json.loads(path.read_text())
    data["fits"] = json.loads(dumps(run_fits(run.cells, run.implementations)))
    return data


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    path = write_bench_run(tmp_path_factory.mktemp("stored") / "bench.json")
    return path, _with_stored_fits(path)


def _write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data))
    return path


def _planted(data: dict[str, Any]) -> dict[str, Any]:
    """The same file with every stored cost-model fit's exponent set to :data:`PLANTED`."""
    data = copy.deepcopy(data)
    for record in data["fits"]:
        if record.get("model") == MODEL:
            record["row"]["fit"]["exponent"] = PLANTED
    return data


def test_stored_fits_read_back_as_the_fits_made(stored: tuple[Path, dict[str, Any]]) -> None:
    path, data = stored
    _, run = load_run(path)
    made = [row for f in sweep_fits(point_frame(c for c in run.cells if c.status.value == "ok"), run.implementations)
            for row in f.rows]
    read = stored_rows(data["fits"])
    assert len(read) == len(made) > 0
    assert sorted(read.values(), key=repr) == sorted(made, key=repr)


def test_a_report_from_stored_fits_equals_one_that_fits(stored: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    path, data = stored
    refit = analyse(load([path]), "torch_sdpa")
    read = analyse(load([_write(tmp_path / "with-fits.json", data)]), "torch_sdpa")
    assert read.rows == refit.rows
    assert read.complexity.equals(refit.complexity)


def test_the_report_reads_the_stored_drift(stored: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    """The run's drift between cells is read too: one complete file's stored value is the one its fits show."""
    _, data = stored
    planted = _planted(data)
    (record,) = [r for r in planted["fits"] if r.get("model") == DRIFT]
    assert stored_fits(data["fits"]).drifts == {record["key"]: record["drift"]}
    record["drift"] = 0.25
    fits = analyse(load([_write(tmp_path / "drift.json", planted)]), "torch_sdpa").fits
    assert fits and all(f.drift == 0.25 for f in fits)
    assert all(r.slope == PLANTED for f in fits for r in f.rows)  # taken as stored


def test_the_drift_a_refit_reads_is_the_stored_one_only_for_its_series(stored: tuple[Path, dict[str, Any]],
                                                                       tmp_path: Path) -> None:
    """Where the sweeps are found again (fits that name no cells, as older files store them), a stored drift is
    read only under the key of its series, and the fits, made with the drift bench measured, are not used."""
    _, data = stored
    planted = _unnamed(_planted(data))
    (record,) = [r for r in planted["fits"] if r.get("model") == DRIFT]
    record["drift"] = 0.25
    fits = analyse(load([_write(tmp_path / "drift.json", planted)]), "torch_sdpa").fits
    assert fits and all(f.drift == 0.25 for f in fits)
    assert all(r.slope != PLANTED for f in fits for r in f.rows if r.quantity == "time")
    assert all(r.slope == PLANTED for f in fits for r in f.rows if r.quantity == "memory")  # no drift in memory fits


def _unnamed(data: dict[str, Any]) -> dict[str, Any]:
    """The same file as a bench that named no fitted cells stored it."""
    data = copy.deepcopy(data)
    for record in data["fits"]:
        record.pop("cells", None)
    return data


def test_the_report_reads_the_stored_fit(stored: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    _, data = stored
    analysis = analyse(load([_write(tmp_path / "planted.json", _planted(data))]), "torch_sdpa")
    assert analysis.rows and all(r.slope == PLANTED for r in analysis.rows)


def test_a_sweep_whose_cells_changed_is_fitted_again(stored: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    _, data = stored
    changed = _planted(data)
    cell = copy.deepcopy(next(c for c in changed["cells"] if c["implementation"] == "tiled" and c["case"]["tq"] == 2048))
    cell["stats"]["median"] *= 1.5  # one size of tiled's T sweep measured again: a later cell of the same key
    changed["cells"].append(cell)
    rows = {(r.implementation, r.axis, r.quantity): r for r in analyse(load([_write(tmp_path / "c.json", changed)]),
                                                                       "torch_sdpa").rows}
    assert rows[("tiled", "T", "time")].slope != PLANTED  # refitted
    assert rows[("tiled", "d", "time")].slope == PLANTED  # its other sweeps' inputs are unchanged: read
    assert rows[("tiled", "T", "memory")].slope == PLANTED


def test_a_second_file_in_the_sweep_means_a_fit_of_the_combined_cells(stored: tuple[Path, dict[str, Any]],
                                                                       tmp_path: Path) -> None:
    """Combined runs: the later file's cells replace the earlier's, so the sweep's values, and the keys, differ."""
    _, data = stored
    later = write_bench_run(tmp_path / "later.json", seed=5, names=("tiled",))
    rows = analyse(load([_write(tmp_path / "planted.json", _planted(data)), later]), "torch_sdpa").rows
    tiled = [r for r in rows if r.implementation == "tiled" and r.quantity == "time"]
    assert tiled and all(r.slope != PLANTED for r in tiled)


DAMAGE = {"a field missing": lambda fit: fit.pop("xs"), "a field of another type": lambda fit: fit.update(low="low"),
          "a list of text for numbers": lambda fit: fit.update(coefs=["1", "2"]), "an unknown field": lambda fit: fit.update(p=2)}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_stored_fit_is_fitted_again(stored: tuple[Path, dict[str, Any]], tmp_path: Path, damage: str) -> None:
    """A damaged record under a key that matches is never trusted: the sweep is fitted again and the report written."""
    _, data = stored
    damaged = _planted(data)
    for record in damaged["fits"]:
        if record.get("model") == MODEL:
            DAMAGE[damage](record["row"]["fit"])
    rows = analyse(load([_write(tmp_path / "damaged.json", damaged)]), "torch_sdpa").rows
    assert rows and all(r.slope != PLANTED for r in rows)


def test_bench_prints_the_fits_it_stored(stored: tuple[Path, dict[str, Any]]) -> None:
    """One model of the sweeps: bench prints the cost-model fits it stored, those the report reads."""
    _, data = stored
    table = fits_table(data["fits"])
    rows = stored_rows(data["fits"])
    assert rows and len(table.strip().splitlines()) == len(rows) + 2  # header, rule, one line a fit
    assert all(row.fit is not None and row.fit.describe() in table for row in rows.values())
    assert all(record.get("model") in (MODEL, DRIFT) for record in data["fits"])


def test_a_cell_measured_again_counts_once(tmp_path: Path) -> None:
    """The typed cells behind the tables: a later file's cell replaces an earlier one's, in the noise count too."""
    first = write_bench_run(tmp_path / "a.json", seed=1)
    again = write_bench_run(tmp_path / "b.json", seed=2, names=("tiled",))
    results = load([first, again])
    ok = results.bench[results.bench["status"] == "ok"]
    assert analyse(results, "torch_sdpa").noise.timed == len(ok) == len(load([first]).bench.query("status == 'ok'"))
    assert [(c.implementation, c.case_id) for c in results.bench_cells] == list(zip(results.bench["implementation"],
                                                                                  results.bench["case_id"]))


def test_one_complete_file_s_fits_are_taken_without_finding_a_sweep(stored: tuple[Path, dict[str, Any]],
                                                                     tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Each stored fit names the cells it was fitted from: the report takes it as it is (a fit no refit gives),
    with the sweep made of those cells, and neither looks for a sweep nor computes a key."""
    import harness.analysis.fitrecords as fitrecords
    import harness.analysis.sweepfits as sweepfits

    path, data = stored
    refit = analyse(load([path]), "torch_sdpa").fits
    results = load([_write(tmp_path / "planted.json", _planted(data))])

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("a sweep was looked for or a fit keyed")

    monkeypatch.setattr(sweepfits, "sweep", forbidden)
    monkeypatch.setattr(sweepfits, "fit_key", forbidden)
    monkeypatch.setattr(fitrecords, "fit_key", forbidden)
    fits = analyse(results, "torch_sdpa").fits
    assert [f.name for f in fits] == [f.name for f in refit]
    assert all(r.slope == PLANTED for f in fits for r in f.rows)
    for read, made in zip(fits, refit, strict=True):  # the same points: the plots draw what the fits read
        assert read.sweep.label == made.sweep.label and read.sweep.fixed == made.sweep.fixed
        assert list(read.sweep.frame["case_id"]) == list(made.sweep.frame["case_id"])
        assert all(read.cells) and not any(made.cells)  # a refit of the report knows no places in a file


def test_a_stored_fit_names_its_cells_by_key_and_place(stored: tuple[Path, dict[str, Any]]) -> None:
    _, data = stored
    cells = data["cells"]
    named = [c for r in data["fits"] if r.get("model") == MODEL for c in r["cells"]]
    assert named
    for c in named:
        cell = cells[c["position"]]
        assert (cell["implementation"], cell["case_id"], cell["mode"]) == (c["implementation"], c["case_id"], c["mode"])


def test_a_file_whose_named_cell_is_gone_is_fitted_again(stored: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    """A cell a fit names that the file no longer holds at its place: the sweeps are found again; the fits of
    the sweeps it was in are made afresh, the others read by the key of their inputs."""
    _, data = stored
    changed = _planted(data)
    gone = next(i for i, c in enumerate(changed["cells"])
                if c["implementation"] == "tiled" and c["case"]["tq"] == 2048 and c.get("mode", "fwd") == "fwd")
    del changed["cells"][gone]
    rows = {(r.implementation, r.axis, r.quantity): r for r in analyse(load([_write(tmp_path / "g.json", changed)]),
                                                                       "torch_sdpa").rows}
    assert rows[("tiled", "T", "time")].slope != PLANTED
    assert rows[("tiled", "d", "time")].slope != PLANTED  # every later cell moved: no fit is taken as it is
    assert any(r.slope == PLANTED for r in rows.values())  # ... but those whose inputs are the same are read by key


def test_an_incomplete_file_s_fits_are_read_by_key(stored: tuple[Path, dict[str, Any]], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Fits that name no cells (older files) or of an unfinished run: the sweeps are found, the fits read by key."""
    _, data = stored
    for name, variant in (("older", _unnamed(_planted(data))), ("unfinished", {**_planted(data), "complete": False})):
        rows = analyse(load([_write(tmp_path / f"{name}.json", variant)]), "torch_sdpa").rows
        assert rows and all(r.slope == PLANTED for r in rows)
        assert stored_fits(variant["fits"]).as_is is None


def test_a_verify_file_beside_the_bench_file_leaves_its_fits_as_stored(stored: tuple[Path, dict[str, Any]],
                                                                        tmp_path: Path) -> None:
    """`attnbench run` reports its verify and bench files together: the bench cells are still one complete file's."""
    _, data = stored
    verify = write_verify_run(tmp_path / "verify.json")
    results = load([verify, _write(tmp_path / "planted.json", _planted(data))])
    assert results.stored_fits.as_is is not None
    assert all(r.slope == PLANTED for r in analyse(results, "torch_sdpa").rows)

"""Result files: their typed schema (:mod:`.schema` the run, :mod:`.cells` its cells, :mod:`.records` and
:mod:`.evidence` the records inside them) and reading and writing them
(:mod:`.files` the result file, :mod:`.paths` every file a command reads or writes)."""

from harness.results.cells import CellCase
from harness.results.evidence import Accounting, CheckedCall, Floor, Integrity, Rounds, Stamped, ValueProbe
from harness.results.files import (
    RESULTS_DIR,
    ResultWriter,
    check_out,
    environment,
    load_results,
    new_run_id,
    read_run,
    refuse_to_overwrite,
    write_json_atomic,
)
from harness.results.keys import BandwidthKey, PeakKey
from harness.results.paths import MAX_RESULT_BYTES, read_text, write_atomic
from harness.results.records import Bandwidth, Config, Coverage, Environment, Memory, Node, Peak, Record, Stats
from harness.results.schema import (
    PROBLEMS,
    SCHEMA,
    SCHEMA_VERSION,
    BenchCell,
    Cell,
    CellKey,
    Run,
    Status,
    VerifyCell,
    node_kind,
)

__all__ = ["Accounting", "Bandwidth", "CheckedCall", "Config", "Coverage", "Environment", "Floor", "Integrity", "Rounds", "Stamped",
           "ValueProbe",
           "Memory", "Node", "Peak", "Record", "Stats", "PROBLEMS", "RESULTS_DIR", "SCHEMA", "SCHEMA_VERSION",
           "BenchCell", "Cell", "CellKey", "ResultWriter", "Run", "Status", "VerifyCell", "environment",
           "load_results", "new_run_id",
           "read_run", "read_text", "write_atomic", "MAX_RESULT_BYTES", "refuse_to_overwrite", "check_out", "write_json_atomic",
           "node_kind", "BandwidthKey", "CellCase", "PeakKey"]

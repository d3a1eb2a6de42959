"""Result files: the one place that knows their layout (see :mod:`harness.results.files`)."""

from harness.results.files import (
    RESULTS_DIR,
    SCHEMA,
    SCHEMA_VERSION,
    ResultWriter,
    cell_key,
    environment,
    iter_cells,
    load_results,
    new_run_id,
    refuse_to_overwrite,
    write_json_atomic,
)

__all__ = ["RESULTS_DIR", "SCHEMA", "SCHEMA_VERSION", "ResultWriter", "cell_key", "environment", "iter_cells",
           "load_results", "new_run_id", "refuse_to_overwrite", "write_json_atomic"]

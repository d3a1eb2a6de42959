"""``--model NAME`` and ``--model list`` for the commands that run cases (verify, bench).

``--model list`` prints the catalogue (:mod:`harness.case.models`) and ends the command; a name not in it is a
usage error (exit 2) that lists every name.
"""

from __future__ import annotations

import argparse
import json
import sys

from harness.case.models import catalogue_rows, model_named
from harness.cli.common import format_table

LIST = "list"


def add_model_argument(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--model", metavar="NAME",
                        help=f"{what} a real model's attention calls (prefill and decode, at sizes that fit this "
                             "machine) instead of the suite's; `--model list` shows the catalogue (docs/models.md)")


def print_catalogue(as_json: bool) -> int:
    """The catalogue as a table (or JSON); exit status 0."""
    rows = catalogue_rows()
    if as_json:
        print(json.dumps({"models": rows}, indent=1))
        return 0
    table = [(r["name"], f"{r['heads']}/{r['kv_heads']}",
              str(r["head_dim"]) if r["d_v"] == r["head_dim"] else f"{r['head_dim']}/{r['d_v']}",
              "yes" if r["causal"] else "no", r["layers"], "-" if r["softcap"] is None else f"{r['softcap']:g}",
              "yes" if r["sinks"] else "-", "-" if r["scale"] is None else f"{r['scale']:.4g}",
              r["max_positions"], ",".join(str(f) for f in r["forms"]))  # type: ignore[attr-defined]
             for r in rows]
    print(format_table(("model", "heads/kv", "d (qk/v)", "causal", "layers", "softcap", "sinks", "scale",
                        "context", "forms"), table))
    if sys.stdout.isatty():
        print("\nsources and notes: --model list --json (verify: --json -), or docs/models.md")
    return 0


def checked_model(name: str | None, command: str) -> str | None:
    """``--model``'s value once known to be in the catalogue (a usage error naming every model otherwise); says on
    stderr what of the model the cases leave out (a feature the case space cannot express yet)."""
    if name is None:
        return None
    model = model_named(name)
    for note in model.left_out():
        print(f"attnbench {command}: --model {model.name}: {note}", file=sys.stderr)
    return model.name

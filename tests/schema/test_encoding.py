"""The result file's text: the same JSON as the data, one line per cell, however the values look."""

from __future__ import annotations

import json
import math

from harness.results.files import encode_json


def test_cells_are_one_line_each_and_the_text_round_trips() -> None:
    data = {"schema": "attnbench", "environment": {"command_line": 'attnbench verify "cells": []'},
            "cells": [{"case_id": "B1-H2", "metrics": {"ratio": math.inf, "nested": {"cells": []}}},
                      {"case_id": "B2-H4", "reason": "line one\nline two"}],
            "after": {"cells": []}}
    text = encode_json(data)
    decoded = json.loads(text)
    assert decoded["cells"][0]["metrics"]["ratio"] is None  # strict JSON: a non-finite number is null
    data["cells"][0]["metrics"]["ratio"] = None  # type: ignore[index]
    assert json.dumps(decoded, sort_keys=True) == json.dumps(data, sort_keys=True)
    lines = text.splitlines()
    assert sum(line.lstrip().startswith('{"case_id"') for line in lines) == 2


def test_no_cells_and_no_cells_key() -> None:
    assert json.loads(encode_json({"cells": [], "a": 1})) == {"cells": [], "a": 1}
    assert json.loads(encode_json([1, {"b": 2}])) == [1, {"b": 2}]

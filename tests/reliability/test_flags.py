"""Flag values that make no sense are refused before any work: exit 2 and one line naming the flag."""

from __future__ import annotations

import pytest

BAD = [
    ("bench", "--timeout", "0"), ("bench", "--timeout", "-5"), ("bench", "--budget", "0"),
    ("bench", "--budget", "nan"), ("bench", "--budget", "inf"), ("bench", "--memory-budget", "-1"),
    ("bench", "--cell-budget", "0"), ("bench", "--threads", "0"), ("bench", "--min-samples", "0"),
    ("verify", "--timeout", "nan"), ("verify", "--trials", "0"), ("verify", "--jobs", "-1"),
    ("run", "--threads", "0"),
    ("compare", "--alpha", "-1"), ("compare", "--alpha", "0"), ("compare", "--alpha", "1"), ("compare", "--alpha", "2"),
    ("compare", "--alpha", "nan"),
]


@pytest.mark.parametrize("argv", BAD, ids=[" ".join(a) for a in BAD])
def test_a_nonsense_value_is_a_usage_error_naming_the_flag(argv: tuple[str, ...], attnbench) -> None:
    out = attnbench(*argv, timeout=120)
    assert out.returncode == 2, out.stderr
    message = [line for line in out.stderr.splitlines() if "error:" in line]
    assert len(message) == 1 and argv[1] in message[0] and argv[2] in message[0], out.stderr
    assert "Traceback" not in out.stderr

"""Verification: cases, checks against the float64 oracle, the rule, properties, fuzzing.

Library use: ``harness.verify.run(VerifySettings(...), out)`` returns the typed
:class:`~harness.results.Run`. Imported lazily, so that ``attnbench --help`` loads no runner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.verify.session import VerifySettings, run

__all__ = ["VerifySettings", "run"]


def __getattr__(name: str) -> Any:
    if name in ("run", "VerifySettings"):
        from harness.verify import session

        return getattr(session, name)
    raise AttributeError(f"module 'harness.verify' has no attribute {name!r}")

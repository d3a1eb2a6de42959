"""attnbench core: the plugin contract, discovery, cases, the oracle, and the commands.

The public API for plugin authors is :func:`register`; see docs/plugins.md.
"""

from harness.conventions import Conventions
from harness.errors import AttnbenchError, PluginError, UsageError
from harness.registry import Implementation, register

__version__ = "0.1.0"

__all__ = ["register", "Conventions", "Implementation", "AttnbenchError", "PluginError", "UsageError", "__version__"]

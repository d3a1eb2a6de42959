"""attnbench core: the plugin contract, discovery, cases, the oracle, and the commands.

The public API for plugin authors is :func:`register` (kernels), :func:`register_module` (modules) and
:class:`Capabilities` (what either declares); see docs/plugins.md.
"""

from harness.contract.capabilities import Capabilities
from harness.contract.conventions import Conventions
from harness.contract.registry import Implementation, register, register_module
from harness.errors import AttnbenchError, PluginError, UsageError

__version__ = "0.1.0"

__all__ = ["register", "register_module", "Capabilities", "Conventions", "Implementation", "AttnbenchError",
           "PluginError", "UsageError", "__version__"]

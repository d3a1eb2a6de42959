"""Errors the harness raises on purpose, each with a message that names the problem and the fix."""


class AttnbenchError(Exception):
    """Base class: the CLI prints these without a traceback and exits with status 2."""


class PluginError(AttnbenchError):
    """A plugin declared itself wrongly, failed to import, or clashes with another plugin."""


class UsageError(AttnbenchError):
    """Bad input from the user: a flag value, a missing file, an unknown implementation name."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, carrying what the command leaves behind (which file, how to finish); printed once, exit 130."""

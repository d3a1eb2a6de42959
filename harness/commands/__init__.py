"""One module per subcommand. Each defines ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> int`` (the exit status). :mod:`harness.cli` finds them by name, in
:data:`harness.cli.COMMANDS` order, so adding a command never edits another command."""

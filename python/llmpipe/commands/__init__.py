"""One module per ``llmpipe`` subcommand, each with ``add_parser(subparsers)`` and ``run(args) -> int``."""

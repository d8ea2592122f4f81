"""The ``llmpipe`` command."""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Sequence

# numpy's OpenBLAS starts a thread per core that spins between calls; no command here does BLAS work
# that would pay for it (torch has its own pool). Before numpy loads, and overridable.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from llmpipe.commands import (  # noqa: E402
    ablate,
    curate,
    eval,
    export,
    inspect,
    plan,
    prune,
    quality,
    quantize,
    report,
    scaling,
    sweep,
    tokenizer,
)
from llmpipe.errors import LlmpipeError  # noqa: E402
from llmpipe.extras import missing_extra  # noqa: E402

#: the machine's, not llmpipe's: disk or quota full, read-only or unwritable storage
ENVIRONMENT_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}

COMMANDS = [
    curate,
    inspect,
    plan,
    tokenizer,
    quality,
    report,
    export,
    eval,
    quantize,
    prune,
    ablate,
    sweep,
    scaling,
]


def build_parser() -> argparse.ArgumentParser:
    from llmpipe import __version__

    parser = argparse.ArgumentParser(
        prog="llmpipe",
        description="Raw web crawl to trained language model: curate, tokenize, pack, inspect, plan.",
    )
    parser.add_argument("--version", action="version", version=f"llmpipe {__version__}")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for cmd in COMMANDS:
        cmd.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except LlmpipeError as e:
        print(f"llmpipe: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        if e.errno not in ENVIRONMENT_ERRORS:
            raise
        where = f"{e.filename}: " if e.filename else ""
        print(
            f"llmpipe: error: {where}{e.strerror} (nothing was lost: run again once fixed)", file=sys.stderr
        )
        return 2
    except ModuleNotFoundError as e:
        line = missing_extra(e, command_name(argv))
        if line is None:
            raise
        print(f"llmpipe: error: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        resumes = command_name(argv) == "curate"  # its work directory keeps what was done
        print(
            "llmpipe: interrupted" + ("; the same command resumes the run" if resumes else ""),
            file=sys.stderr,
        )
        return 130


def command_name(argv: Sequence[str] | None) -> str | None:
    """The subcommand's name (the first argument that is one)."""
    names = {cmd.__name__.rsplit(".", 1)[-1] for cmd in COMMANDS}
    return next((a for a in (sys.argv[1:] if argv is None else argv) if a in names), None)


if __name__ == "__main__":
    sys.exit(main())

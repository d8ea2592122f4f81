"""Entry script for the Ray cluster launcher: ``llmpipe curate ... --ray auto`` on the head node.

    ray up configs/ray/cluster.yaml
    ray submit configs/ray/cluster.yaml python/llmpipe/distributed/submit_entry.py -- raw/ --out shards/

``ray submit`` copies this file alone to the head node and runs it with the head's ``python`` (the
llmpipe virtual environment, activated by the cluster's setup commands) from the home directory; it
moves to ``~/llmpipe`` (the repository synced by ``file_mounts``; ``LLMPIPE_REPO`` overrides), so
relative paths name paths there. Inputs and ``--out`` must be on storage every node sees at the same
path (``llmpipe curate --ray`` makes them absolute before handing them to tasks).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(os.environ.get("LLMPIPE_REPO", "~/llmpipe")).expanduser()


def curate_argv(argv: Sequence[str], repo: Path = REPO) -> list[str]:
    """``llmpipe`` arguments for ``ray submit ... -- ARGS``: curate, on the cluster, paths from the repo."""
    args = list(argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if args[:1] == ["curate"]:
        args = args[1:]
    if "--ray" not in args and not any(a.startswith("--ray=") for a in args):
        args += ["--ray", "auto"]
    return ["curate", *args]


def main(argv: Sequence[str] | None = None) -> int:
    from llmpipe.cli import main as llmpipe_main

    if REPO.is_dir():
        os.chdir(REPO)  # relative inputs and --out name paths in the synced repository
    return llmpipe_main(curate_argv(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())

"""A curate process's resident memory: what it does not need to hold (the driver and every pool
worker; ``llmpipe.curate.workdir.pyarrow_without_pandas`` keeps pandas out of them).

``lean_arrow_pool``: Arrow's memory pool becomes jemalloc, returning the pages of freed buffers
after ``DECAY_MS``: the default mimalloc pool keeps them, so a loop over Parquet row groups (reading
near dedup's shingles back, packing token files) grows the process by tens of MB while the buffers
it holds stay a few MB. Reading back a 0.4 GB run's shingles (150 MB of Parquet): +56 MB resident
with mimalloc, +41 MB with jemalloc's default decay (10 s), +36 MB with 1 s, +24 MB with 0. Decay 0
gave every batch's buffers fresh pages, each a page fault: a whole 0.4 GB curate run took 885,000
minor faults and 3.35 s of system time with 0, 583,000 and 2.35-2.57 s with 1 s (~3% of the run's
CPU), with the largest process's peak within the runs' spread (it is set by other phases; between
tasks ``release_memory`` hands the pool's free pages back whatever the decay).

``release_memory``: after a task, the memory it freed goes back to the system (glibc keeps freed
heap pages in its arenas, one per thread that allocated: the Rust thread pool's threads included;
Arrow's pool may keep freed pages too), so the next task's peak does not start on top of the last
task's leftovers.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache
from typing import Any

#: jemalloc's dirty and muzzy page decay in the Arrow pool of a curate process (milliseconds)
DECAY_MS = 1000


def lean_arrow_pool() -> None:
    """jemalloc with ``DECAY_MS`` as Arrow's default pool in this process, where pyarrow has it (see
    the module doc); elsewhere the pool stays as it is. Buffers made before keep their pool."""
    import pyarrow as pa

    try:
        pool = pa.jemalloc_memory_pool()
    except NotImplementedError:  # a pyarrow built without jemalloc
        return
    pa.set_memory_pool(pool)
    pa.jemalloc_set_decay_ms(DECAY_MS)


@lru_cache(maxsize=1)
def _malloc_trim() -> Any:
    try:
        return ctypes.CDLL(None).malloc_trim  # glibc; absent elsewhere (musl, macOS)
    except (OSError, AttributeError):
        return None


def release_memory() -> None:
    """Return freed heap memory to the system: glibc's ``malloc_trim`` and Arrow's pool."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)

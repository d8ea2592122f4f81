"""A curate process's allocators: what it does not need to hold, and what it should not give back
only to take again (the driver and every pool worker;
``llmpipe.curate.workdir.pyarrow_without_pandas`` keeps pandas out of them). ``tune_allocators`` sets
both of the following.

Arrow's memory pool becomes jemalloc, returning the pages of freed buffers
after ``DECAY_MS``: the default mimalloc pool keeps them, so a loop over Parquet row groups (reading
near dedup's shingles back, packing token files) grows the process by tens of MB while the buffers
it holds stay a few MB. Reading back a 0.4 GB run's shingles (150 MB of Parquet): +56 MB resident
with mimalloc, +41 MB with jemalloc's default decay (10 s), +36 MB with 1 s, +24 MB with 0. Decay 0
gave every batch's buffers fresh pages, each a page fault: a whole 0.4 GB curate run took 885,000
minor faults and 3.35 s of system time with 0, 583,000 and 2.35-2.57 s with 1 s (~3% of the run's
CPU), with the largest process's peak within the runs' spread (it is set by other phases; between
steps ``release_memory`` hands the pool's free pages back whatever the decay).

glibc's heap (the Rust core's and Python's buffers) keeps what a task frees for the process's next
task: blocks up to ``HEAP_MMAP_MAX`` come from the heap, not from a mapping of their own, and up to
``HEAP_KEEP`` of free memory at the top of the heap stays there. glibc's defaults map a block above
128 KB on its own until one that size is freed (the threshold then rises, to 32 MB at most) and give
the heap's top back past twice that threshold: a growing buffer, or a batch's buffers freed and made
again, came back as fresh pages, each a page fault and a page the kernel zeroes. A 0.4 GB curate run
(16 files, 2 workers): 588,000-625,000 minor faults with glibc's defaults, 540,000-566,000 with
these, the output bytes the same.

``release_memory``: the memory a process freed goes back to the system (glibc keeps freed heap pages
in its arenas, one per thread that allocated: the Rust thread pool's threads included; Arrow's pool
may keep freed pages too), so that the next phase's peak does not start on top of the last one's
leftovers. The executors call it when a process goes from one step to another
(``llmpipe.curate.executors``), not after every task: tasks of one step reuse what the one before
freed.
"""

from __future__ import annotations

import ctypes
import os
from functools import cache
from typing import Any

#: jemalloc's dirty and muzzy page decay in the Arrow pool of a curate process (milliseconds)
DECAY_MS = 1000
#: glibc's heap in a curate process: blocks up to this size come from the heap (``M_MMAP_THRESHOLD``)
HEAP_MMAP_MAX = 32 << 20
#: and this much free memory at its top stays there until ``release_memory`` (``M_TRIM_THRESHOLD``)
HEAP_KEEP = 512 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h


def tune_allocators() -> None:
    """Arrow's pool and glibc's heap in this process as the module doc says, where this process has
    them (a pyarrow built without jemalloc keeps its pool; a libc other than glibc its settings).
    Buffers made before keep their pool."""
    import pyarrow as pa

    mallopt = _libc("mallopt")
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, HEAP_MMAP_MAX)
        mallopt(_M_TRIM_THRESHOLD, HEAP_KEEP)
    try:
        pool = pa.jemalloc_memory_pool()
    except NotImplementedError:  # a pyarrow built without jemalloc
        return
    pa.set_memory_pool(pool)
    pa.jemalloc_set_decay_ms(DECAY_MS)


@cache
def _libc(name: str) -> Any:
    """glibc's function ``name``; None elsewhere (musl, macOS)."""
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return None
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError, ValueError):  # ValueError: no such confstr name here
        return None


def release_memory() -> None:
    """Return freed heap memory to the system: glibc's ``malloc_trim`` and Arrow's pool."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    trim = _libc("malloc_trim")
    if trim is not None:
        trim(0)

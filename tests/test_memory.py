"""``llmpipe.memory``: a curate process's Arrow pool is jemalloc (freed pages go back at once), and
the memory a task freed goes back to the system between tasks."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import numpy as np, pyarrow as pa
from llmpipe.memory import lean_arrow_pool, release_memory
lean_arrow_pool()
try:
    pa.jemalloc_memory_pool()
    assert pa.default_memory_pool().backend_name == "jemalloc", pa.default_memory_pool().backend_name
    assert pa.array(np.arange(1000)).cast(pa.int32()).to_pylist()[-1] == 999  # built in that pool
except NotImplementedError:  # a pyarrow without jemalloc keeps its pool
    pass
def rss():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) // 1024
# 64 MB in pieces below glibc's mmap threshold, freed but for the last: without a trim glibc keeps
# them all (the last one pins the top of the heap)
pieces = [np.ones(10_000) for _ in range(800)]
last = pieces[-1]
del pieces
before = rss()
release_memory()
assert rss() < before - 48, (before, rss())
print("ok")
"""


def test_lean_arrow_pool_and_release() -> None:
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok"

"""``llmpipe.memory``: a curate process's Arrow pool is jemalloc, glibc's heap keeps what it frees
instead of mapping fresh pages for the next buffer, and the memory a task freed goes back to the
system between tasks."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import numpy as np, pyarrow as pa
from llmpipe.memory import tune_allocators, release_memory
tune_allocators()
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


def _python(code: str, *args: str) -> str:
    """What ``code`` prints, run in a fresh interpreter (its allocators untouched by this one's)."""
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_tuned_arrow_pool_and_release() -> None:
    assert _python(CODE).strip() == "ok"


HEAP = """
import ctypes, resource, sys
libc = ctypes.CDLL(None)
libc.prctl(41, 1, 0, 0, 0)  # PR_SET_THP_DISABLE: 4 KB pages whatever the machine's THP setting
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "tuned":
    from llmpipe.memory import tune_allocators
    tune_allocators()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for mb in range(1, 25):  # a buffer made, filled and freed, a MB larger each time (a growing batch)
    p = libc.malloc(mb << 20)
    ctypes.memset(p, 1, mb << 20)
    libc.free(p)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def test_tuned_heap_reuses_freed_pages() -> None:
    """glibc's defaults map each buffer above the last freed one's size on its own and unmap it when
    freed: 300 MB of fresh pages here. Tuned, the heap hands the freed pages out again and only grows
    by the difference: 24 MB."""
    default, tuned = int(_python(HEAP, "default")), int(_python(HEAP, "tuned"))
    assert default > 60_000, default  # 300 MB of 4 KB pages: ~77,000
    assert tuned < 15_000, tuned  # 24 MB: ~6,100 (and the import's own)


STEPS = """
import ctypes
ctypes.CDLL(None).prctl(41, 1, 0, 0, 0)  # PR_SET_THP_DISABLE: resident sizes in 4 KB pages
import numpy as np
from llmpipe.curate.executors import _run_task
from llmpipe.memory import tune_allocators
tune_allocators()
def rss():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) // 1024
def churn():  # a step that makes 64 MB of heap blocks and frees them when it returns
    pieces = [np.ones(10_000) for _ in range(800)]
    return len(pieces)
def other():
    return rss()
before = rss()
_run_task(churn)
first = rss()
_run_task(churn)
second = rss()
start_of_other = _run_task(other)
print(before, first, second, start_of_other)
"""


def test_tasks_of_one_step_reuse_freed_memory_and_another_step_starts_without_it() -> None:
    before, first, second, other = (int(x) for x in _python(STEPS).split())
    assert first > before + 48, (before, first)  # the freed heap stays with the process...
    assert second < first + 16, (first, second)  # ...and the next task of the step reuses it
    assert other < second - 48, (second, other)  # a task of another step starts with it handed back

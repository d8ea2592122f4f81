"""``llmpipe.memory``: a curate process keeps pyarrow from importing pandas (~49 MB resident each)
and gives freed memory back between tasks; code that asks for pandas still gets it."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
from llmpipe.memory import lean_arrow, release_memory
lean_arrow()
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
try:
    pa.jemalloc_memory_pool()
    assert pa.default_memory_pool().backend_name == "jemalloc"
except NotImplementedError:  # a pyarrow without jemalloc keeps its pool
    pass
def rss():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) // 1024
# what the curate steps do with arrays: numpy in and out, lists, tables
col = pa.array(np.arange(1000, dtype=np.uint32))
assert col.to_numpy(zero_copy_only=False).sum() == 499500
assert pa.array(["a", None]).to_pylist() == ["a", None]
table = pa.table({"x": col, "y": pa.array(np.ones(1000))})
assert "pandas" not in sys.modules, "pyarrow imported pandas"
# 64 MB in pieces below glibc's mmap threshold, freed but for the last: without a trim glibc keeps
# them all (the last one pins the top of the heap)
pieces = [np.ones(10_000) for _ in range(800)]
last = pieces[-1]
del pieces
before = rss()
release_memory()
assert rss() < before - 48, (before, rss())
# asked for, pandas is there as usual
df = table.to_pandas()
assert "pandas" in sys.modules and df["x"].sum() == 499500
import pandas as pd
assert pa.Table.from_pandas(df).equals(table) and pa.array(pd.Series([1, 2])).to_pylist() == [1, 2]
print("ok")
"""


def test_lean_arrow_and_release() -> None:
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok"

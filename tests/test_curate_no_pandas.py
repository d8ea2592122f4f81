"""A curate process does not import pandas through pyarrow (``llmpipe.curate.workdir.pyarrow_without_pandas``), and pandas
still works in it when asked for."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

PROBE = '''
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def probe():
    """The calls a curate step makes that ask pyarrow's pandas check; whether pandas got imported."""
    pa.array(["x", "y"], pa.string())
    pa.array(np.arange(3))
    pc.binary_length(pa.array(["ab"])).to_numpy(zero_copy_only=False)
    return "pandas" in sys.modules
'''

SCRIPT = """
import sys
sys.path.insert(0, {here!r})
import probe_mod

if __name__ == "__main__":  # a spawned worker imports this file again
    if sys.argv[1] == "plain":
        print(probe_mod.probe())
        raise SystemExit
    from llmpipe.curate.executors import PoolExecutor
    from llmpipe.curate.workdir import pyarrow_without_pandas

    pool = PoolExecutor(2, progress=False)
    print(pool.map(probe_mod.probe, [(), ()], "probe"))
    pool.close()
    pyarrow_without_pandas()
    print(probe_mod.probe())
    import pyarrow as pa
    df = pa.table({{"a": [1, 2]}}).to_pandas()  # pandas is still there when asked for
    print(type(df).__name__, df["a"].tolist(), "pandas" in sys.modules)
"""


def test_curate_processes_skip_pandas_and_can_still_use_it(tmp_path: Path) -> None:
    (tmp_path / "probe_mod.py").write_text(PROBE)
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(SCRIPT.format(here=str(tmp_path))))

    def run(mode: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, str(script), mode], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.split("\n")

    # without llmpipe's start-up, these pyarrow calls import pandas (what the workers avoid)
    assert run("plain")[0] == "True"
    workers, driver, after = run("curate")[:3]
    assert workers == "[False, False]"  # each pool worker
    assert driver == "False"  # a process that called pyarrow_without_pandas
    assert after == "DataFrame [1, 2] True"

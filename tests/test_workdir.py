"""The work directory's one way of writing an output (Parquet, or Arrow IPC for documents and token ids):
a hidden temporary file beside it, renamed into place whole, and gone when the write fails (no
half-written output, no temporary file left)."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from llmpipe.curate.workdir import (
    AtomicArrowWriter,
    AtomicParquetWriter,
    atomic_path,
    iter_arrow,
    open_parquet,
    read_parquet,
    temp_path,
    write_table_atomic,
)

TABLE = pa.table({"id": ["a", "b", "c"], "n": [1, 2, 3]})
#: each writer and what reads its files back
WRITERS = {
    "parquet": (AtomicParquetWriter, pq.read_table),
    "arrow": (AtomicArrowWriter, lambda p: pa.ipc.open_file(p).read_all()),
}


def _listing(d: Path) -> list[str]:
    return sorted(p.name for p in d.rglob("*"))


def _open_in(d: Path) -> list[str]:
    """The files under ``d`` this process holds open."""
    held = []
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # the listing's own descriptor, closed by now
            continue
        if target.startswith(str(d)):
            held.append(target)
    return held


def test_write_table_atomic_writes_whole_file(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "t.parquet"  # parent directories are made
    write_table_atomic(out, TABLE)
    assert pq.read_table(out).equals(TABLE)
    assert _listing(tmp_path) == ["sub", "t.parquet"]


def test_write_table_atomic_leaves_nothing_on_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "t.parquet"
    write_table_atomic(out, TABLE)
    before = out.read_bytes()

    def half_written(table: pa.Table, where: Path, **_: object) -> None:
        Path(where).write_bytes(b"PAR1 half")
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", half_written)
    with pytest.raises(OSError, match="disk full"):
        write_table_atomic(out, TABLE.slice(1))
    assert out.read_bytes() == before  # the old output stays whole
    assert _listing(tmp_path) == ["t.parquet"]  # and no temporary file is left


def test_atomic_path_renames_only_on_success(tmp_path: Path) -> None:
    out = tmp_path / "x.bin"
    with pytest.raises(RuntimeError), atomic_path(out) as tmp:
        assert tmp == temp_path(out) and tmp.name.startswith(".x.bin.tmp-")
        tmp.write_bytes(b"partial")
        raise RuntimeError("killed")
    assert _listing(tmp_path) == []
    with atomic_path(out) as tmp:
        tmp.write_bytes(b"whole")
    assert out.read_bytes() == b"whole" and _listing(tmp_path) == ["x.bin"]


@pytest.mark.parametrize("kind", WRITERS)
def test_writer_commit_and_abort(tmp_path: Path, kind: str) -> None:
    writer, read = WRITERS[kind]
    out = tmp_path / f"w.{kind}"
    with pytest.raises(ValueError, match="stage failed"), writer(out) as w:
        w.write(TABLE.to_batches()[0])
        assert w.tmp.exists() and not out.exists()
        raise ValueError("stage failed")
    assert _listing(tmp_path) == []  # aborted: the temporary file is gone

    w = writer(out)
    for b in TABLE.to_batches(max_chunksize=1):
        w.write(b)
    assert _open_in(tmp_path) == [str(w.tmp)]
    w.commit()
    assert _open_in(tmp_path) == []  # closed when committed, not when collected
    assert read(out).equals(TABLE) and _listing(tmp_path) == [f"w.{kind}"]


@pytest.mark.parametrize("kind", WRITERS)
def test_writer_casts_to_its_schema_and_commits_empty(tmp_path: Path, kind: str) -> None:
    writer, read = WRITERS[kind]
    schema = pa.schema([("id", pa.large_string()), ("n", pa.int64())])
    out = tmp_path / f"cast.{kind}"
    w = writer(out, schema)
    w.write(TABLE)
    w.commit()
    assert read(out).schema == schema and read(out).column("id").to_pylist() == ["a", "b", "c"]

    empty = tmp_path / f"empty.{kind}"
    writer(empty, schema).commit()  # nothing written: an empty file of the schema
    assert read(empty).num_rows == 0 and read(empty).schema == schema
    with pytest.raises(ValueError, match="no schema"):
        writer(tmp_path / f"none.{kind}").commit()
    assert _listing(tmp_path) == [f"cast.{kind}", f"empty.{kind}"]


def test_arrow_work_files_stream_in_slices_of_the_asked_columns(tmp_path: Path) -> None:
    """Documents and token ids come back batch by batch: at most ``batch_size`` rows, only the asked
    columns, every row once and in order, with field metadata kept (a classifier's score column);
    Arrow memory stays about one written batch, whatever the file's size."""
    import base64
    import random

    rng = random.Random(0)
    path = tmp_path / "docs.arrow"
    field = pa.field("score", pa.float32(), metadata={b"llmpipe.classifier": b"1"})
    schema = pa.schema([("id", pa.string()), ("text", pa.string()), field])
    with AtomicArrowWriter(path, schema) as w:
        for g in range(40):  # 40 batches of ~1.3 MB
            texts = [base64.b64encode(rng.randbytes(10_000)).decode() for _ in range(100)]
            ids = [f"{g}-{j}" for j in range(100)]
            w.write(pa.table({"id": ids, "text": texts, "score": pa.array([0.5] * 100, pa.float32())}))
            if g == 3:
                w.write(schema.empty_table())  # an empty batch comes back as nothing
        w.commit()
    size = path.stat().st_size
    assert size > 40e6
    ids, peak = [], 0
    for batch in iter_arrow(path, batch_size=30, columns=["id", "score"]):
        assert batch.num_rows <= 30 and batch.schema.names == ["id", "score"]
        assert batch.schema.field("score").metadata == {b"llmpipe.classifier": b"1"}
        ids += batch.column("id").to_pylist()
        peak = max(peak, pa.total_allocated_bytes())
    assert ids == [f"{g}-{j}" for g in range(40) for j in range(100)]
    assert peak < size / 10, (peak, size)
    assert sum(b.num_rows for b in iter_arrow(path)) == 4000  # whole batches by default


def test_work_files_read_without_pyarrow_dataset_and_dictionary_only_where_values_repeat(
    tmp_path: Path, data_dir: Path
) -> None:
    import json
    import subprocess
    import sys

    lines = (data_dir / "web" / "cc-en-head-0091.jsonl").read_text(encoding="utf-8").splitlines()
    texts = [json.loads(line)["text"] for line in lines]
    table = pa.table(
        {
            "id": [str(i) for i in range(len(texts))],
            "text": texts,
            "source": ["cc-en-head-0091.jsonl"] * len(texts),
            "lang": ["eng_Latn"] * len(texts),
            "position": list(range(len(texts))),
        }
    )
    w = AtomicParquetWriter(tmp_path / "docs.parquet")
    w.write(table)
    w.commit()
    # the same table as pyarrow's own reader gives, whole and by columns
    assert read_parquet(tmp_path / "docs.parquet").equals(pq.read_table(tmp_path / "docs.parquet"))
    assert read_parquet(tmp_path / "docs.parquet", ["text", "id"]).equals(table.select(["text", "id"]))
    meta = pq.ParquetFile(tmp_path / "docs.parquet").metadata.row_group(0)
    enc = {meta.column(j).path_in_schema: meta.column(j).encodings for j in range(meta.num_columns)}
    dictionary = {name for name, e in enc.items() if any("DICTIONARY" in x for x in e)}
    assert dictionary == {"source", "lang"}, enc  # not the texts, ids and numbers
    # reading a work file does not import pyarrow.dataset (its import costs a process ~0.4 CPU-s)
    code = (
        "import sys; from llmpipe.curate.workdir import read_parquet; "
        f"read_parquet({str(tmp_path / 'docs.parquet')!r}); print('pyarrow.dataset' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_streaming_a_work_file_holds_one_row_group_not_the_file(tmp_path: Path) -> None:
    """A part's work file is read back batch by batch (the next segment, tokenize, near dedup's
    phases): Arrow memory stays about one row group, whatever the file's size (pyarrow's default
    ``pre_buffer`` first read every row group into one cache: the whole 53 MB file here)."""
    import base64
    import random

    rng = random.Random(0)
    path = tmp_path / "docs.parquet"
    w = AtomicParquetWriter(path)
    for g in range(40):  # 40 row groups of ~1.3 MB that do not compress
        texts = [base64.b64encode(rng.randbytes(10_000)).decode() for _ in range(100)]
        w.write(pa.table({"id": [f"{g}-{j}" for j in range(100)], "text": texts}))
    w.commit()
    size = path.stat().st_size
    assert pq.read_metadata(path).num_row_groups == 40 and size > 40e6
    peak = rows = 0
    for batch in open_parquet(path).iter_batches(batch_size=50):
        rows += batch.num_rows
        peak = max(peak, pa.total_allocated_bytes())
    assert rows == 4000
    assert peak < size / 10, (peak, size)
    assert open_parquet(path).read(columns=["id"]).column("id")[3999].as_py() == "39-99"


def test_a_damaged_arrow_work_file_is_one_clear_error(tmp_path: Path) -> None:
    """Work files are data: offsets that run past their buffer (or a cut file) are found before any
    use, as one line naming the file, not a crash or garbage later."""
    import numpy as np
    from llmpipe.errors import InputError

    path = tmp_path / "bad.arrow"
    with AtomicArrowWriter(path) as w:
        w.write(pa.table({"text": ["abc", "def"]}))
        w.commit()
    raw = path.read_bytes()
    offsets = np.array([0, 3, 6], dtype=np.int32).tobytes()
    assert raw.count(offsets) == 1
    path.write_bytes(raw.replace(offsets, np.array([0, 3, 60], dtype=np.int32).tobytes()))  # past the data
    with pytest.raises(InputError, match="bad.arrow: a damaged work file") as err:
        list(iter_arrow(path))
    assert "\n" not in str(err.value)

    good = tmp_path / "good.arrow"
    with AtomicArrowWriter(good) as w:
        w.write(TABLE)
        w.commit()
    cut = tmp_path / "cut.arrow"
    cut.write_bytes(good.read_bytes()[:-20])
    with pytest.raises(InputError, match="cut.arrow: a damaged work file"):
        list(iter_arrow(cut))

"""The disk phases of near dedup, each a partitionable step that writes its output before the next.

    prepare (map, per input batch)   -> key table: id, idh, n_shingles, bands[B], shingles
    shuffle (map, per key file)      -> shuffle/part-P/F.parquet: (bucket, idh, doc) rows by bucket hash
                                        (``llmpipe.curate.shuffle``)
    groups  (per partition)          -> groups/P.parquet: documents sharing a bucket, ordered by idh
    edges   (per partition)          -> edges/P.parquet: candidate pairs, verified by exact Jaccard
    cluster (one reduce)             -> union-find over u32 document indices, 4 bytes per document
    drops   (stream the key files)   -> (id, reason, dup_of): all but the smallest id of each cluster

``doc`` is the position of a document in the concatenated key files; ``idh`` (a hash of the id)
orders documents inside a bucket and the cluster keeps the smallest id, so the drops depend only on
the set of documents, never on input order, batch size or worker count. Every step writes through
a temporary file and a rename and is skipped when its output exists, so a killed run resumes and a
retried task (a lost Ray node) is safe. shuffle, groups and edges run through an executor (``map``
of these module-level functions: Ray tasks on a cluster); only cluster and drops run on the driver.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from llmpipe import _core
from llmpipe.curate.executors import Executor, executor_workers, map_with
from llmpipe.curate.groups import smaller_ids
from llmpipe.curate.shuffle import partition_files, shuffle
from llmpipe.curate.stage import DROPS_SCHEMA
from llmpipe.curate.workdir import open_parquet, read_parquet, write_table_atomic
from llmpipe.dedup import Shingling, string_buffers

ROW_BYTES = 20  # one shuffled band row: bucket u64 + idh u64 + doc u32
SHUFFLE_SCHEMA = pa.schema([("bucket", pa.uint64()), ("idh", pa.uint64()), ("doc", pa.uint32())])
EDGE_SCHEMA = pa.schema([("a", pa.uint32()), ("b", pa.uint32())])
REASON = "near_duplicate"


def key_table(batch: pa.RecordBatch, sh: Shingling, bands: int, rows: int, keep_shingles: bool) -> pa.Table:
    """The prepare step: band keys (and shingle sets for verification) of one batch, one Rust call."""
    n = batch.num_rows
    offsets, data = string_buffers(batch.column("text"))
    raw_bands, raw_n, raw_soff, raw_sdata = _core.minhash_sketch(
        offsets, data, sh.core(), bands, rows, keep_shingles
    )
    id_off, id_data = string_buffers(batch.column("id"))
    cols: dict[str, pa.Array] = {
        "id": batch.column("id"),
        "idh": pa.array(np.frombuffer(_core.id_hashes(id_off, id_data), np.uint64)),
        "n_shingles": pa.array(np.frombuffer(raw_n, np.uint32)),
        "bands": pa.FixedSizeListArray.from_arrays(pa.array(np.frombuffer(raw_bands, np.uint64)), bands),
    }
    if keep_shingles:
        byte_offsets = np.frombuffer(raw_soff, np.uint64).astype(np.int64) * 4
        cols["shingles"] = pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), n, [None, pa.py_buffer(byte_offsets), pa.py_buffer(raw_sdata)]
        )
    return pa.table(cols)


def num_partitions(n_docs: int, bands: int, partition_bytes: int) -> int:
    """Partitions of the band rows so that one partition holds about ``partition_bytes``."""
    return max(1, math.ceil(n_docs * bands * ROW_BYTES / max(1, partition_bytes)))


def shuffle_file(
    key_file: Path, file_no: int, base: int, parts: int, out: Path, dropped: Sequence[Path] = ()
) -> None:
    """Map step: route every (document, band) row of one key file to the partition of its bucket;
    documents listed in ``dropped`` (drop lists of earlier global stages) have none."""
    lists = [read_parquet(f, columns=["id"]).column("id") for f in dropped]
    gone = (
        pa.chunked_array([c for col in lists for c in col.chunks], pa.string()).combine_chunks()
        if lists
        else None
    )
    shuffle(out, file_no, parts, _band_rows(key_file, base, parts, gone))


def _band_rows(
    key_file: Path, base: int, parts: int, gone: pa.Array | None = None
) -> Iterator[tuple[pa.RecordBatch, np.ndarray]]:
    """(bucket, idh, doc) of every band of every non-empty document whose id is not in ``gone``,
    and the partition of each row."""
    row = base
    columns = ["idh", "n_shingles", "bands", *(["id"] if gone is not None else [])]
    for batch in open_parquet(key_file).iter_batches(batch_size=65536, columns=columns):
        m = batch.num_rows
        bands_col = batch.column("bands")
        width = bands_col.type.list_size
        bkeys = bands_col.values.to_numpy().reshape(m, width)
        docs = np.arange(row, row + m, dtype=np.uint32)
        row += m
        live = batch.column("n_shingles").to_numpy() > 0  # empty documents are never candidates
        if gone is not None:  # nor are documents dropped before: they stay unclustered singletons
            live &= ~pc.is_in(batch.column("id"), value_set=gone).to_numpy(zero_copy_only=False)
        bucket = bkeys[live].ravel()
        idh = np.repeat(batch.column("idh").to_numpy()[live], width)
        doc = np.repeat(docs[live], width)
        yield pa.record_batch([bucket, idh, doc], schema=SHUFFLE_SCHEMA), bucket % np.uint64(parts)


def partition_groups(files: Sequence[Path], out: Path) -> Path:
    """Per partition (its shuffled files): documents sharing a bucket, as a large_list<uint32> column
    ``members``."""
    if out.exists():
        return out
    t = pa.concat_tables([read_parquet(f) for f in files]) if files else SHUFFLE_SCHEMA.empty_table()
    col = lambda name: t.column(name).combine_chunks().to_numpy()  # noqa: E731
    raw_off, raw_members = _core.lsh_groups(col("bucket"), col("idh"), col("doc"))
    offsets = pa.array(np.frombuffer(raw_off, np.uint64).astype(np.int64))
    members = pa.array(np.frombuffer(raw_members, np.uint32))
    write_table_atomic(out, pa.table({"members": pa.LargeListArray.from_arrays(offsets, members)}))
    return out


def _groups(path: Path) -> tuple[np.ndarray, np.ndarray]:
    col = read_parquet(path).column("members").combine_chunks()
    offs = col.offsets.to_numpy().astype(np.uint64)
    return offs - offs[0], col.values.to_numpy()


def load_shingles(key_files: Sequence[Path], bases: Sequence[int], wanted: np.ndarray) -> _core.ShingleStore:
    """Shingle sets of the candidate documents (``wanted[doc]``), read back from the key files."""
    store = _core.ShingleStore()
    for f, base in zip(key_files, bases, strict=True):
        row = base
        for batch in open_parquet(f).iter_batches(batch_size=1024, columns=["shingles"]):
            m = batch.num_rows
            sel = np.flatnonzero(wanted[row : row + m])
            if sel.size:
                col = batch.column("shingles").take(pa.array(sel))
                _, offs_buf, data_buf = col.buffers()
                offs = np.frombuffer(offs_buf, np.int64)[col.offset : col.offset + len(col) + 1]
                data = np.frombuffer(data_buf, np.uint32) if data_buf is not None else np.zeros(0, np.uint32)
                store.extend((sel + row).astype(np.uint32), (offs // 4).astype(np.uint64), data)
            row += m
    return store


def partition_edges(groups_file: Path, store: _core.ShingleStore | None, threshold: float, out: Path) -> Path:
    """Per partition: candidate edges, kept only if verified (when a store is given)."""
    if out.exists():
        return out
    offs, members = _groups(groups_file)
    a, b = _core.group_edges(offs, members, store, threshold)
    write_table_atomic(
        out,
        pa.table({"a": np.frombuffer(a, np.uint32), "b": np.frombuffer(b, np.uint32)}, schema=EDGE_SCHEMA),
    )
    return out


def _ids_of(
    key_files: Sequence[Path], bases: Sequence[int], wanted: np.ndarray
) -> Iterator[tuple[pa.Array, np.ndarray]]:
    for f, base in zip(key_files, bases, strict=True):
        row = base
        for batch in open_parquet(f).iter_batches(batch_size=65536, columns=["id"]):
            m = batch.num_rows
            sel = np.flatnonzero(wanted[row : row + m])
            if sel.size:
                yield batch.column("id").take(pa.array(sel)), sel + row
            row += m


def edges_task(
    groups_files: Sequence[Path],
    key_files: Sequence[Path],
    bases: Sequence[int],
    n: int,
    verify_threshold: float | None,
    outs: Sequence[Path],
) -> list[Path]:
    """Edges of a run of partitions: one shingle store for their candidates, one edge file each.

    Locally one task covers every partition (the store is loaded once); on a cluster each task
    covers ``parts / workers`` partitions and reads the shingles of its own candidates only.
    """
    if all(o.exists() for o in outs):
        return list(outs)
    store = None
    if verify_threshold is not None:
        wanted = np.zeros(n, dtype=bool)
        for g in groups_files:
            wanted[_groups(g)[1]] = True
        store = load_shingles(key_files, bases, wanted)
        del wanted
    return [
        partition_edges(g, store, verify_threshold or 0.0, o) for g, o in zip(groups_files, outs, strict=True)
    ]


def resolve(
    key_files: Sequence[Path],
    workdir: Path,
    verify_threshold: float | None,
    partition_bytes: int,
    executor: Executor | None = None,
    dropped: Sequence[Path] = (),
) -> pa.Table:
    """Run shuffle -> groups -> edges (through ``executor``) -> cluster -> drops (here). The documents
    of the drop lists ``dropped`` are left out: the drops are those of the key files without them."""
    key_files = [f for f in key_files if pq.read_metadata(f).num_rows > 0]
    counts = [pq.read_metadata(f).num_rows for f in key_files]
    bases = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    n = int(bases[-1])
    if n == 0:
        return DROPS_SCHEMA.empty_table()
    if n >= 2**32:
        raise ValueError(f"{n} documents exceed one near-dedup resolve (u32 indices); split the run")
    width = pq.read_schema(key_files[0]).field("bands").type.list_size
    parts = num_partitions(n, width, partition_bytes)
    if len(key_files) > 1:
        # the run's parts went through the executor's workers: its groups and edges do too, one
        # partition per worker at least, so that no process (the driver least) holds them all
        parts = max(parts, executor_workers(executor))
    shuffled = workdir / "shuffle"
    map_with(
        executor,
        shuffle_file,
        [(f, i, int(bases[i]), parts, shuffled, tuple(dropped)) for i, f in enumerate(key_files)],
        "near_dedup shuffle",
    )
    groups: list[Path] = map_with(
        executor,
        partition_groups,
        [(partition_files(shuffled, p), workdir / "groups" / f"{p:05d}.parquet") for p in range(parts)],
        "near_dedup groups",
    )
    tasks = min(parts, executor_workers(executor))
    runs = [groups[t * parts // tasks : (t + 1) * parts // tasks] for t in range(tasks)]
    base_list = bases[:-1].tolist()
    edge_runs = map_with(
        executor,
        edges_task,
        [
            (r, key_files, base_list, n, verify_threshold, [workdir / "edges" / g.name for g in r])
            for r in runs
        ],
        "near_dedup edges",
    )
    edges = [e for r in edge_runs for e in r]
    uf = _core.UnionFind(n)
    for e in edges:
        t = read_parquet(e)
        uf.union_edges(t.column("a").combine_chunks().to_numpy(), t.column("b").combine_chunks().to_numpy())
    roots = np.frombuffer(uf.roots(), np.uint32)
    del uf
    clustered = roots != np.arange(n, dtype=np.uint32)
    clustered[roots[clustered]] = True
    parts_ids, parts_roots = [], []
    for ids, docs in _ids_of(key_files, bases[:-1].tolist(), clustered):
        parts_ids.append(ids)
        parts_roots.append(roots[docs])
    if not parts_ids:
        return DROPS_SCHEMA.empty_table()
    ids, dup_of = smaller_ids(pa.concat_arrays(parts_ids), [np.concatenate(parts_roots)])
    drops = pa.table({"id": ids, "dup_of": dup_of}).sort_by("id")
    return pa.table(
        {
            "id": drops["id"],
            "reason": pa.array([REASON] * drops.num_rows, pa.string()),
            "dup_of": drops["dup_of"],
        },
        schema=DROPS_SCHEMA,
    )

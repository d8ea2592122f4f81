"""Curation on a real 2-node Ray cluster started on this machine: same bytes as a local run.

The module starts a head (`ray start --head`, with the dashboard for the Jobs API) and a second node
(`ray start --address`), each with one CPU and a memory limit, in a private temp dir; it submits
`llmpipe curate ... --ray auto` with `ray job submit` and compares every output file with a local run
of the same command. The last test kills the worker node's raylet mid-job. Teardown kills, by process
id, every process the cluster started (found by the private temp dir and port in its command line,
and their descendants); nothing else using Ray on the machine is touched.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT, run_cli
from procs import RAY_TEST_ENV, free_port, kill_all, procs, ray_agent_ports, ray_start, with_descendants
from s3server import s3_server

BIN = Path(sys.executable).parent
RAY = str(BIN / "ray")
# near dedup on (the default) with small shuffle partitions, so its per-partition phases are many tasks
SMALL = (
    "pack:\n  seq_len: 128\n  samples_per_shard: 200\n  val_fraction: 0.1\ntokenizer:\n  vocab_size: 300\n"
    "near_dedup:\n  enabled: true\n  partition_mb: 0.005\n"
)
INPUTS = (
    "cc-en-head-0091.jsonl",
    "cc-en-head-0174.jsonl",
    "cc-main-2019-30-extracted.jsonl.gz",
    "cc-main-2023-06-sample.jsonl.gz",
    "cc-main-2020-34-excerpt.warc.gz",
    "cc-2009-sample.arc",
)
MEMORY = str(1_500_000_000)
OBJECT_STORE = str(150_000_000)
#: each node: one CPU and a memory limit
COMMON = ["--num-cpus", "1", "--memory", MEMORY, "--object-store-memory", OBJECT_STORE]


def _raylets(temp_dir: Path) -> set[int]:
    return {p for p, (_, c) in procs().items() if "raylet/raylet " in c and str(temp_dir) in c}


@dataclass
class Cluster:
    temp_dir: Path
    port: int
    dashboard: str
    env: dict[str, str]
    worker_raylet: int

    def owned(self) -> set[int]:
        """Processes this cluster started: those naming its temp dir or port, and their descendants."""
        table = procs()
        roots = {
            p
            for p, (_, c) in table.items()
            if p != os.getpid() and (str(self.temp_dir) in c or re.search(rf":{self.port}\b", c))
        }
        return with_descendants(roots, table)

    def submit(
        self, out: Path, cfg: Path, data: Path, *extra: str, curate: tuple[str, ...] = ()
    ) -> subprocess.CompletedProcess[str]:
        cmd = [RAY, "job", "submit", "--address", self.dashboard, "--working-dir", str(ROOT), *extra]
        cmd += ["--", "llmpipe", "curate", *[str(data / n) for n in INPUTS]]
        cmd += ["--out", str(out), "--config", str(cfg), "--ray", "auto", "--quiet", *curate]
        return subprocess.run(cmd, capture_output=True, text=True, env=self.env, timeout=600)

    def start_worker(self) -> None:
        """Start a worker node (one CPU) and wait until the head sees it alive."""
        before, known = _raylets(self.temp_dir), {n["node_id"] for n in _nodes(self)}
        worker = [RAY, "start", "--address", f"127.0.0.1:{self.port}", "--node-ip-address", "127.0.0.1"]
        ray_start(lambda: [*worker, *COMMON, *ray_agent_ports()], self.env, self.owned)
        new = _raylets(self.temp_dir) - before
        assert len(new) == 1, (before, new)
        self.worker_raylet = new.pop()
        deadline = time.time() + 120
        while not any(n["state"] == "ALIVE" and n["node_id"] not in known for n in _nodes(self)):
            assert time.time() < deadline, f"the new worker node never came alive: {_nodes(self)}"
            time.sleep(1)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    temp_dir = Path(tempfile.mkdtemp(prefix="llmray", dir="/tmp"))  # short: Ray's unix socket paths
    port, dash = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env |= {"PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}", "RAY_USAGE_STATS_ENABLED": "0"}
    # task states reach the state API within 0.1 s (default 1 s): the fault test must see a task
    # running on the worker while it still runs
    env |= {"RAY_task_events_report_interval_ms": "100"} | RAY_TEST_ENV
    c = Cluster(temp_dir, port, f"http://127.0.0.1:{dash}", env, 0)
    try:
        head = [RAY, "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port)]
        head += [
            "--dashboard-host",
            "127.0.0.1",
            "--dashboard-port",
            str(dash),
            "--include-dashboard",
            "true",
        ]
        head += ["--temp-dir", str(temp_dir), "--disable-usage-stats", *COMMON]
        ray_start(
            lambda: [*head, "--ray-client-server-port", str(free_port()), *ray_agent_ports()], env, c.owned
        )
        assert len(_raylets(temp_dir)) == 1
        c.start_worker()
        _wait_nodes(c, 2)
        yield c
    finally:
        kill_all(c.owned())
        subprocess.run(["rm", "-rf", str(temp_dir)], check=False)


def _nodes(c: Cluster) -> list[dict[str, object]]:
    from ray.util.state import list_nodes

    return [n.__dict__ if hasattr(n, "__dict__") else dict(n) for n in list_nodes(address=c.dashboard)]


def _wait_nodes(c: Cluster, n: int) -> None:
    deadline = time.time() + 120
    while time.time() < deadline:
        if sum(x["state"] == "ALIVE" for x in _nodes(c)) == n:
            return
        time.sleep(1)
    raise AssertionError(f"the cluster did not reach {n} alive nodes: {_nodes(c)}")


def _tasks(c: Cluster) -> list[dict[str, object]]:
    from ray.util.state import list_tasks

    ts = list_tasks(address=c.dashboard, filters=[("func_or_class_name", "=", "_call")], limit=10_000)
    return [t.__dict__ if hasattr(t, "__dict__") else dict(t) for t in ts]


def _finished_on(c: Cluster, seen: set[object]) -> set[object]:
    """The nodes that finished tasks not in ``seen``: both of them, once every worker's task events
    reached the GCS (sent every 0.1 s here, later on a loaded machine: waited for up to 30 s)."""
    deadline = time.time() + 30
    while True:
        nodes = {t["node_id"] for t in _tasks(c) if t["task_id"] not in seen and t["state"] == "FINISHED"}
        if len(nodes) >= 2 or time.time() > deadline:
            return nodes
        time.sleep(1)


def _url_and_decont(root: Path, data_dir: Path) -> str:
    """Config sections that turn on the URL filter (a domain of the WARC excerpt listed) and
    decontamination cutting spans (passages of ten crawl documents as the evaluation set): doc stages
    inside the existing steps, so the runs below check them on Ray for a second or two."""
    import gzip

    (root / "domains.txt").write_text("01spb.ru\n")
    with gzip.open(data_dir / "web" / "cc-main-2019-30-extracted.jsonl.gz", "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"].split() for line in f][:200:20]
    passages = [" ".join(w[len(w) // 2 : len(w) // 2 + 30]) for w in texts if len(w) >= 60]
    (root / "eval.jsonl").write_text("".join(json.dumps({"text": p}) + "\n" for p in passages))
    return (
        f"url_filter:\n  enabled: true\n  domain_lists: [{root / 'domains.txt'}]\n"
        f"decontaminate:\n  enabled: true\n  mode: spans\n  eval_sets: {{crawl: {root / 'eval.jsonl'}}}\n"
    )


@pytest.fixture(scope="module")
def local_run(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("ray-local")
    cfg = root / "small.yaml"
    cfg.write_text(SMALL + _url_and_decont(root, data_dir))
    out = root / "shards"
    run_cli("curate", *[str(data_dir / "web" / n) for n in INPUTS], "--out", str(out), "--config", str(cfg))
    return cfg, out


def _same_tree(a: Path, b: Path) -> None:
    names_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    names_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert names_a == names_b
    assert any(n.suffix == ".arrow" for n in names_a)
    for n in names_a:
        assert (a / n).read_bytes() == (b / n).read_bytes(), f"{n} differs between local and Ray runs"


def test_executor_order_and_rayon_threads(cluster: Cluster) -> None:
    """Results come back in argument order; each task sees RAYON_NUM_THREADS = the CPUs it was given."""
    import ray
    from llmpipe.distributed.executor import RayExecutor

    try:
        ex = RayExecutor(f"127.0.0.1:{cluster.port}", progress=False)
        assert ex.map(divmod, [(i * 7, 3) for i in range(20)], "t") == [divmod(i * 7, 3) for i in range(20)]
        assert ex.map(os.getenv, [("RAYON_NUM_THREADS",)] * 4, "t") == ["1"] * 4
    finally:
        ray.shutdown()


def test_failures_come_in_input_order_as_one_line(cluster: Cluster, tmp_path: Path) -> None:
    """Where tasks fail, the error is the first failing task's in argument order (task 3 fails first
    here, task 1 later), raised as llmpipe's own error, not wrapped in Ray's remote traceback; and
    `curate --strict --ray` over two bad inputs names the first bad record in input order, in one line."""
    import ray
    from llmpipe.distributed.executor import RayExecutor
    from llmpipe.errors import InputError

    def fail_some(i: int) -> int:  # a closure: pickled by value for the cluster's workers
        time.sleep(1.5 if i == 1 else 0.0)
        if i in (1, 3):
            raise InputError(f"bad {i}")
        return i

    try:
        ex = RayExecutor(f"127.0.0.1:{cluster.port}", progress=False)
        for done in (None, lambda j, v: None):
            with pytest.raises(InputError) as e:
                ex.map(fail_some, [(i,) for i in range(6)], "t", done)
            assert type(e.value) is InputError and str(e.value) == "bad 1"
    finally:
        ray.shutdown()

    raw = tmp_path / "raw"
    raw.mkdir()
    good = json.dumps({"text": "a line of words " * 40})
    (raw / "a.jsonl").write_text("\n".join([good] * 60 + ["{not json"]) + "\n")
    (raw / "b.jsonl").write_text("{not json either\n" + good + "\n")
    p = run_cli(
        "curate", str(raw), "--out", str(tmp_path / "o"), "--strict", "--quiet", "--chunk-mb", "0.001",
        "--ray", f"127.0.0.1:{cluster.port}", env=cluster.env, check=False,
    )  # fmt: skip
    err = p.stderr.strip()
    assert p.returncode == 2 and err.startswith("llmpipe: error:") and "\n" not in err, p.stderr
    assert "a.jsonl: line 61" in err and "Traceback" not in err, err


def test_relative_out_in_a_job_is_refused(
    cluster: Cluster, local_run: tuple[Path, Path], data_dir: Path
) -> None:
    """`ray job submit --working-dir . -- llmpipe curate ... --out shards` would write into Ray's copy
    of the working dir (deleted later): one line says to give an absolute path, and nothing is run."""
    cfg, _ = local_run
    p = cluster.submit(Path("shards-rel"), cfg, data_dir / "web")
    assert p.returncode != 0, p.stdout + p.stderr
    assert "--out shards-rel: a relative path here is inside this Ray job's copy" in p.stdout + p.stderr


def test_corpus_dedup_phases_as_cluster_tasks(cluster: Cluster, data_dir: Path, tmp_path: Path) -> None:
    """line_dedup's count and substring_dedup's suffix arrays (one task per pair of partitions) run as
    cluster tasks and decide exactly what they decide in this process."""
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq
    import ray
    from llmpipe.curate.stage import RunContext
    from llmpipe.curate.stages.line_dedup import LineDedup
    from llmpipe.curate.stages.substring_dedup import SubstringDedup
    from llmpipe.distributed.executor import RayExecutor

    with gzip.open(data_dir / "web" / "cc-main-2019-30-extracted.jsonl.gz", "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f][:200]
    table = pa.table({"id": [str(d["id"]) for d in docs], "text": [d["text"] for d in docs]})
    stages = [
        (LineDedup(LineDedup.Config(enabled=True)), ["repeated.parquet"]),
        (
            SubstringDedup(SubstringDedup.Config(enabled=True, min_length=100, partition_bytes=150_000)),
            [f"by_part/substring_dedup-{j}.keys.parquet" for j in range(4)],  # spans per key file
        ),
    ]
    try:
        ex = RayExecutor(f"127.0.0.1:{cluster.port}", progress=False)
        for stage, results in stages:
            keys = []
            for j in range(4):
                keys.append(tmp_path / f"{stage.name}-{j}.keys.parquet")
                pq.write_table(stage.prepare(table.slice(50 * j, 50).to_batches()[0]), keys[-1])
            stage.resolve(keys, tmp_path / stage.name / "local", RunContext(input_words=0))
            stage.resolve(keys, tmp_path / stage.name / "ray", RunContext(input_words=0), ex)
            local = [pq.read_table(tmp_path / stage.name / "local" / r) for r in results]
            assert sum(t.num_rows for t in local) > 10
            for r, want in zip(results, local, strict=True):
                assert pq.read_table(tmp_path / stage.name / "ray" / r).equals(want)
        assert len(list((tmp_path / "substring_dedup" / "ray" / "pairs").glob("*.npy"))) >= 6
    finally:
        ray.shutdown()


def test_job_submit_matches_local(
    cluster: Cluster, local_run: tuple[Path, Path], data_dir: Path, tmp_path: Path
) -> None:
    cfg, local = local_run
    out = tmp_path / "shards"
    p = cluster.submit(out, cfg, data_dir / "web")
    assert p.returncode == 0 and "succeeded" in p.stdout + p.stderr, p.stdout + p.stderr
    _same_tree(local, out)
    assert not (out / ".llmpipe-work").exists()
    stats = json.loads((out / "stats.json").read_text())
    assert stats["stages"][0]["name"] == "read"
    # the URL filter and decontamination (spans) ran in the Ray steps and did something
    by_name = {s["name"]: s for s in stats["stages"]}
    assert by_name["url_filter"]["dropped"].get("url_domain", 0) >= 1
    assert by_name["decontaminate"]["counters"]["contaminated_crawl"] >= 1
    assert by_name["decontaminate"]["counters"]["bytes_removed"] > 0
    # the per-input steps really ran on both nodes
    assert len(_finished_on(cluster, set())) == 2
    # near dedup's partition phases ran as cluster tasks: shuffle per part that kept documents (small
    # inputs share a part; one segment-0 task per part), groups per partition, edges per worker CPU
    # (2); the exact dedup group-by too; only the union-find ran on the driver
    done: dict[str, int] = {}
    for t in _tasks(cluster):
        if t["state"] == "FINISHED":
            done[str(t["name"])] = done.get(str(t["name"]), 0) + 1
    assert 2 <= done.get("near_dedup shuffle", 0) <= done.get("segment 0", 0), done
    assert done.get("near_dedup groups", 0) >= 3, done
    assert done.get("near_dedup edges", 0) == 2, done
    assert done.get("exact_dedup groups", 0) >= 1, done


def test_job_submit_in_small_chunks_matches_local(
    cluster: Cluster, local_run: tuple[Path, Path], data_dir: Path, tmp_path: Path
) -> None:
    """Cut into small chunks (the WARC between gzip members, the ARC and plain JSONL at records and
    lines), the Ray run still writes the bytes of the local run of whole files."""
    cfg, local = local_run
    out = tmp_path / "shards"
    p = cluster.submit(out, cfg, data_dir / "web", curate=("--chunk-mb", "0.05"))
    assert p.returncode == 0 and "succeeded" in p.stdout + p.stderr, p.stdout + p.stderr
    _same_tree(local, out)
    parts = re.search(r"input\(s\) in (\d+) part\(s\)", p.stdout + p.stderr)
    assert parts is not None and int(parts.group(1)) > len(INPUTS) + 8, p.stdout  # WARC and ARC: several each


def test_launcher_entry_script_with_relative_paths(
    cluster: Cluster, local_run: tuple[Path, Path], data_dir: Path, tmp_path: Path
) -> None:
    """What `ray submit` runs on the head: the entry script, relative inputs, tasks on the cluster."""
    cfg, local = local_run
    entry = ROOT / "python" / "llmpipe" / "distributed" / "submit_entry.py"
    env = cluster.env | {"RAY_ADDRESS": f"127.0.0.1:{cluster.port}", "LLMPIPE_REPO": str(data_dir)}
    seen = {t["task_id"] for t in _tasks(cluster)}
    args = [*[f"web/{n}" for n in INPUTS], "--out", str(tmp_path / "shards"), "--config", str(cfg)]
    p = subprocess.run(
        [sys.executable, str(entry), "--", *args, "--quiet"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    _same_tree(local, tmp_path / "shards")
    # the script's tasks ran on this cluster (the spread over both nodes is checked by the job tests:
    # in full-suite runs under load this driver's tasks twice all finished on one node)
    alive = {n["node_id"] for n in _nodes(cluster) if n["state"] == "ALIVE"}
    assert _finished_on(cluster, seen) & alive


def test_job_submit_from_and_to_s3(
    cluster: Cluster, local_run: tuple[Path, Path], data_dir: Path, tmp_path: Path
) -> None:
    """Inputs on an S3 server (moto, 127.0.0.1) opened by the tasks on both nodes, --out on it too:
    the local run's bytes. The credentials reach the tasks through the job's runtime env."""
    cfg, local = local_run
    seen = {t["task_id"] for t in _tasks(cluster)}
    with s3_server() as s3:
        for n in INPUTS:
            s3.client.upload_file(str(data_dir / "web" / n), s3.bucket, f"in/{n}")
        env = json.dumps({"env_vars": s3.env})
        cmd = [RAY, "job", "submit", "--address", cluster.dashboard, "--working-dir", str(ROOT)]
        cmd += ["--runtime-env-json", env, "--", "llmpipe", "curate"]
        cmd += [f"s3://{s3.bucket}/in/{n}" for n in INPUTS]
        cmd += ["--out", f"s3://{s3.bucket}/out", "--work-dir", str(tmp_path / "staging")]
        cmd += ["--config", str(cfg), "--ray", "auto", "--quiet"]
        p = subprocess.run(cmd, capture_output=True, text=True, env=cluster.env, timeout=600)
        assert p.returncode == 0 and "succeeded" in p.stdout + p.stderr, p.stdout + p.stderr
        got = s3.download_tree("out", tmp_path / "got")
    done = ".llmpipe-done.json"  # its fingerprint covers the inputs' mtimes: a store's differ
    names = sorted(p.name for p in local.iterdir() if p.is_file() and p.name != done)
    assert names == sorted(p.name for p in got.iterdir() if p.is_file() and p.name != done)
    for n in names:
        assert (local / n).read_bytes() == (got / n).read_bytes(), f"{n} differs between local and s3"
    assert len(_finished_on(cluster, seen)) == 2


def test_worker_node_lost_mid_job(
    cluster: Cluster, local_run: tuple[Path, Path], data_dir: Path, tmp_path: Path
) -> None:
    """Killing the worker node's raylet while it holds a task: the tasks are retried, same output."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    cfg, local = local_run
    out = tmp_path / "shards"
    worker_node = next(n["node_id"] for n in _nodes(cluster) if not n["is_head_node"])
    seen = {t["task_id"] for t in _tasks(cluster)}
    sid = f"fault-{os.getpid()}-{int(time.time())}"
    # every input's first step sleeps 5 s on the cluster: the worker surely runs one when it is killed
    slow = json.dumps({"env_vars": {"LLMPIPE_DELAY_AT": "segment 0:5"}})
    p = cluster.submit(
        out, cfg, data_dir / "web", "--no-wait", "--submission-id", sid, "--runtime-env-json", slow
    )
    assert p.returncode == 0, p.stdout + p.stderr
    deadline = time.time() + 300
    busy = None
    while busy is None and time.time() < deadline:
        busy = next(
            (
                t
                for t in _tasks(cluster)
                if t["task_id"] not in seen
                and t["name"] == "segment 0"
                and t["node_id"] == worker_node
                and t["state"] not in ("FINISHED", "FAILED")
            ),
            None,
        )
        if busy is None:
            time.sleep(0.1)
    assert busy is not None, "no task was ever scheduled on the worker node"
    os.kill(cluster.worker_raylet, signal.SIGKILL)
    try:
        client = JobSubmissionClient(cluster.dashboard)
        while time.time() < deadline:
            status = client.get_job_status(sid)
            if status.is_terminal():
                break
            time.sleep(1)
        logs = client.get_job_logs(sid)
        assert status == JobStatus.SUCCEEDED, logs
        _same_tree(local, out)
        retried = [t for t in _tasks(cluster) if t["task_id"] not in seen and t["attempt_number"] > 0]
        assert retried, "the killed node's task was not retried"
        # the node is really gone (the GCS marks it dead after its health checks fail: seconds)
        alive = lambda: {n["node_id"] for n in _nodes(cluster) if n["state"] == "ALIVE"}  # noqa: E731
        deadline = time.time() + 90
        while worker_node in alive() and time.time() < deadline:
            time.sleep(1)
        assert worker_node not in alive()
    finally:  # a new worker node: the tests after this one run on two nodes again
        cluster.start_worker()


def test_classifier_on_actors_matches_local(cluster: Cluster, data_dir: Path, tmp_path: Path) -> None:
    """The classifier and the encoder run on actor pools (one actor per node, each loads its model
    once); the run writes the bytes of a local run."""
    from hf_tiny import save_classifier, save_encoder, tokenizer
    from ray.util.state import list_actors

    _wait_nodes(cluster, 2)  # the worker node killed by the fault test was replaced
    tok = tokenizer(data_dir)
    clf, enc = save_classifier(tmp_path / "clf", tok, ["low", "high"]), save_encoder(tmp_path / "enc", tok)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "pack:\n  seq_len: 64\n  val_fraction: 0.1\ntokenizer:\n  vocab_size: 300\n"
        f"classifier:\n  model: {clf}\n  label: high\n  name: edu\n  target_retention: 0.5\n  target_of: stage\n"
        f"semantic_dedup:\n  enabled: true\n  model: {enc}\n  threshold: 0.999\n  clusters: 2\n"
    )
    inputs = [str(data_dir / "web" / n) for n in ("cc-en-head-0091.jsonl", "cc-en-head-0174.jsonl")]
    common = ("--config", str(cfg), "--chunk-mb", "0.05", "--quiet")  # 5 parts: several calls per actor pool
    run_cli("curate", *inputs, "--out", str(tmp_path / "local"), *common, "--workers", "1")
    p = run_cli(
        "curate", *inputs, "--out", str(tmp_path / "ray"), *common, "--ray", f"127.0.0.1:{cluster.port}",
        env=cluster.env, timeout=1200,  # 4 actors each import torch and transformers: slow on a busy 2-core box
    )  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    local, ray_out = tmp_path / "local", tmp_path / "ray"
    for a, b in ((local, ray_out), (ray_out, local)):  # the outputs, not the model-result cache
        for f in a.iterdir():
            if f.is_file():
                assert f.read_bytes() == (b / f.name).read_bytes(), (
                    f"{f.name} differs between local and Ray runs"
                )
    cached = lambda d: sorted(p.name for p in (d / ".llmpipe-cache").rglob("*.npy"))  # noqa: E731
    assert cached(local) == cached(ray_out) and len(cached(local)) >= 4  # per part and model, same keys
    actors = list_actors(
        address=cluster.dashboard, filters=[("class_name", "=", "_ModelWorker")], detail=True
    )
    rows = [a.__dict__ if hasattr(a, "__dict__") else dict(a) for a in actors]
    assert 3 <= len(rows) <= 4, rows  # per model step, one per node's CPU (at most one per part)
    assert len({r["node_id"] for r in rows}) == 2
    assert all(r["state"] == "DEAD" for r in rows)  # released when the step ended


def test_a_cluster_with_token_authentication(tmp_path: Path) -> None:
    """`ray start` turns token authentication on by default (Ray 2.59 on), and a driver given an
    address sends no token unless told to: the refusal is one line that says what to set, and with
    RAY_AUTH_MODE=token and the cluster's token the same command runs."""
    import secrets

    temp_dir = Path(tempfile.mkdtemp(prefix="llmauth", dir="/tmp"))  # short: Ray's unix socket paths
    port = free_port()
    token = secrets.token_hex(32)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env |= {"PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}", "RAY_USAGE_STATS_ENABLED": "0"}
    env |= {"RAY_raylet_start_wait_time_s": "120"}
    head = [RAY, "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port)]
    head += ["--include-dashboard", "false", "--temp-dir", str(temp_dir), "--disable-usage-stats", *COMMON]
    owned = Cluster(temp_dir, port, "", env, 0).owned
    try:
        ray_start(
            lambda: [*head, "--ray-client-server-port", str(free_port()), *ray_agent_ports()],
            env | {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token},
            owned,
        )
        args = (
            "curate",
            str(ROOT / "examples" / "raw"),
            "--config",
            str(ROOT / "configs/curate/sample.yaml"),
            "--quiet",
        )
        p = run_cli(*args, "--out", str(tmp_path / "a"), "--ray", f"127.0.0.1:{port}", env=env, check=False)
        err = p.stderr.strip().splitlines()
        assert p.returncode == 2 and err[-1].startswith("llmpipe: error: --ray 127.0.0.1:"), p.stderr
        assert "set RAY_AUTH_MODE=token and its token" in err[-1] and "Traceback" not in p.stderr, err[-1]
        auth = env | {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
        p = run_cli(*args, "--out", str(tmp_path / "b"), "--ray", f"127.0.0.1:{port}", env=auth, check=False)
        assert p.returncode == 0, p.stderr[-3000:]
        assert (tmp_path / "b" / "manifest.json").is_file()
        # ablate's proxies as Ray tasks: the same line before any training
        shutil.copytree(tmp_path / "b", tmp_path / "c")
        text = tmp_path / "ref.txt"
        text.write_text("Some reference text.\n")
        abl = (
            "ablate",
            str(tmp_path / "b"),
            str(tmp_path / "c"),
            "--text",
            str(text),
            "--out",
            str(tmp_path / "abl"),
        )
        p = run_cli(*abl, "--ray", f"127.0.0.1:{port}", env=env, check=False)
        err = p.stderr.strip().splitlines()
        assert p.returncode == 2 and "set RAY_AUTH_MODE=token and its token" in err[-1], p.stderr[-3000:]
        assert "Traceback" not in p.stderr and not (tmp_path / "abl" / "proxies").exists()
    finally:
        kill_all(owned())
        subprocess.run(["rm", "-rf", str(temp_dir)], check=False)

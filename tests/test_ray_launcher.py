"""`ray up` / `ray submit` / `ray down` through the Ray cluster launcher, for real, over ssh to 127.0.0.1.

The test starts an OpenSSH server on 127.0.0.1 (a free port, its own host key, a generated key for
the current user in a private authorized_keys), writes a copy of configs/ray/cluster.yaml pointed at
127.0.0.1 (the local provider, head only: it keys nodes by IP, so a worker on the same IP is not
possible) and runs the launcher. The launcher has no ssh port option, so the config reaches the
port with `ssh_proxy_command` (`ssh -W` through the same server). Setup commands activate this
checkout's .venv in ~/.bashrc, as the repo's config does; the test restores ~/.bashrc and the
launcher's ~/ray_bootstrap_* files afterwards. On the node, `ray` is a wrapper whose `ray stop`
(run by `ray down`) stops only this cluster's processes, never other Ray users on the machine.
Every process the test started (sshd included) is stopped by pid at the end.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import yaml
from conftest import ROOT, run_cli
from procs import RAY_TEST_ENV, free_port, kill_all, procs, ray_agent_ports, with_descendants

BIN = Path(sys.executable).parent
SMALL = (
    "pack:\n  seq_len: 128\n  samples_per_shard: 200\n  val_fraction: 0.1\ntokenizer:\n  vocab_size: 300\n"
    "near_dedup:\n  enabled: true\n  partition_mb: 0.02\n"
)
INPUTS = ("cc-en-head-0091.jsonl", "cc-main-2019-30-extracted.jsonl.gz")
STOP = """import os, signal, sys, time
from pathlib import Path
mark = sys.argv[1]
def procs():
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\\0", b" ").decode(errors="replace")
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            out[int(d.name)] = (ppid, cmd)
    return out
ps = procs()
ours = {p for p, (_, c) in ps.items() if mark in c and p != os.getpid() and "ray_stop_cluster" not in c}
grew = True
while grew:
    more = {p for p, (pp, _) in ps.items() if pp in ours and p not in ours}
    ours |= more
    grew = bool(more)
for sig in (signal.SIGTERM, signal.SIGKILL):
    for p in ours:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass
    deadline = time.time() + 10
    while time.time() < deadline and any(Path(f"/proc/{p}").exists() for p in ours):
        time.sleep(0.2)
print(f"stopped {len(ours)} processes of this cluster")
"""


def _descendants(roots: set[int], mark: str) -> set[int]:
    table = procs()
    return with_descendants(
        set(roots) | {p for p, (_, c) in table.items() if mark in c and p != os.getpid()}, table
    )


def _raylets(mark: str) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            cmd = (d / "cmdline").read_bytes().decode(errors="replace") if d.name.isdigit() else ""
            if "raylet" in cmd and mark in cmd:
                out.append(int(d.name))
    return out


def _ray_state(temp_dir: Path) -> str:
    """For a failure message: the raylets on this machine (with their GCS) and the last lines of this
    cluster's GCS and raylet logs."""
    lines = ["", "-- raylets on this machine:"]
    lines += [c[:300] for _, c in procs().values() if "/raylet " in c or c.startswith("raylet ")]
    for log in sorted(temp_dir.glob("session_*/logs/*")):
        if log.is_file() and log.name.split(".")[0] in ("gcs_server", "raylet", "monitor"):
            tail = log.read_text(errors="replace").splitlines()[-15:]
            lines += [f"-- {log.relative_to(temp_dir)}:", *tail]
    return "\n".join(lines)


@contextlib.contextmanager
def _restored(*paths: Path) -> Iterator[None]:
    """Put these files back as they were (or remove them) afterwards."""
    saved = {p: p.read_bytes() if p.exists() else None for p in paths}
    try:
        yield
    finally:
        for p, data in saved.items():
            if data is None:
                p.unlink(missing_ok=True)
            else:
                p.write_bytes(data)


def _sshd() -> str:
    sshd = shutil.which("sshd") or ("/usr/sbin/sshd" if Path("/usr/sbin/sshd").exists() else None)
    assert sshd, "sshd not found: install openssh-server (.ci/run does: apt-get install openssh-server)"
    for tool in ("ssh", "ssh-keygen", "rsync"):
        assert shutil.which(tool), f"{tool} not found: install openssh-client and rsync (.ci/run does)"
    return sshd


def test_ray_up_submit_down_over_ssh(data_dir: Path, tmp_path: Path) -> None:
    sshd = _sshd()
    user = getpass.getuser()
    home = Path(os.path.expanduser("~"))
    t = Path(tempfile.mkdtemp(prefix="llmlaunch", dir="/tmp"))  # short: Ray's unix socket paths
    mark = str(t)
    started: set[int] = set()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env |= {"PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}", "RAY_USAGE_STATS_ENABLED": "0"}
    name = f"llmpipe-test-{os.getpid()}"
    state = [Path(f"/tmp/ray/cluster-{name}.state"), Path(f"/tmp/ray/cluster-{name}.lock")]
    restore = [home / ".bashrc", home / "ray_bootstrap_config.yaml", home / "ray_bootstrap_key.pem", *state]
    launcher_tmp = lambda: {  # noqa: E731
        *Path("/tmp").glob("ray-config-*"),
        *Path("/tmp").glob("ray_ssh_*"),
        *Path("/tmp").glob("ray_ssh_*/*"),
        *Path("/tmp/ray").glob(f"cluster-{name}*"),
    }
    tmp_before = launcher_tmp()
    try:
        with _restored(*restore):
            # -- an ssh server on 127.0.0.1 for the current user, with a generated key
            port = free_port()
            for key in ("key", "host_key"):
                subprocess.run(
                    ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(t / key)], check=True
                )
            (t / "authorized_keys").write_text((t / "key.pub").read_text())
            (t / "sshd_config").write_text(
                f"Port {port}\nListenAddress 127.0.0.1\nHostKey {t}/host_key\n"
                f"AuthorizedKeysFile {t}/authorized_keys\nPidFile {t}/sshd.pid\nPasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nUsePAM no\n"
                "StrictModes no\nAllowTcpForwarding yes\n"
            )
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
            srv = subprocess.Popen(
                [sshd, "-D", "-e", "-f", str(t / "sshd_config")], stderr=subprocess.DEVNULL
            )
            started.add(srv.pid)
            ssh_opts = f"-i {t}/key -p {port} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
            ssh_opts += " -o IdentitiesOnly=yes -o BatchMode=yes -o LogLevel=ERROR"
            for _ in range(50):
                ok = subprocess.run(f"ssh {ssh_opts} {user}@127.0.0.1 true", shell=True, capture_output=True)
                if ok.returncode == 0:
                    break
                time.sleep(0.2)
            assert ok.returncode == 0, f"ssh to the test sshd failed: {ok.stderr!r}"

            # -- on the node: `ray` is the checkout's, but `ray stop` stops only this cluster
            (t / "bin").mkdir()
            (t / "ray_stop_cluster.py").write_text(STOP)
            wrapper = t / "bin" / "ray"
            wrapper.write_text(
                f'#!/bin/sh\nif [ "$1" = stop ]; then exec {BIN}/python {t}/ray_stop_cluster.py {t}/raytmp; fi\n'
                f'exec {BIN}/ray "$@"\n'
            )
            wrapper.chmod(0o755)

            # -- the repo's cluster.yaml, pointed at 127.0.0.1
            cfg = yaml.safe_load((ROOT / "configs" / "ray" / "cluster.yaml").read_text())
            gport, dport, cport = free_port(), free_port(), free_port()
            # the node's Ray gets the private test cluster's settings for a loaded machine (a slow
            # raylet is waited for; fixed agent ports, so the raylet does not abort the node waiting
            # for an agent to report the port it bound)
            test_env = " ".join(f"{k}={v}" for k, v in RAY_TEST_ENV.items())
            # RAY_ADDRESS: `--ray auto` would otherwise pick any raylet's cluster on this machine (Ray
            # scans the process table), and another cluster may be up while this test runs
            activate = (
                f"export PATH={t}/bin:{BIN}:$PATH VIRTUAL_ENV={BIN.parent} RAY_USAGE_STATS_ENABLED=0 "
                f"RAY_ADDRESS=127.0.0.1:{gport} {test_env} LLMPIPE_REPO={ROOT}  # {mark}"
            )
            cfg |= {
                "cluster_name": name,
                "provider": {"type": "local", "head_ip": "127.0.0.1", "worker_ips": []},
                "auth": {
                    "ssh_user": user,
                    "ssh_private_key": f"{t}/key",
                    "ssh_proxy_command": f"ssh {ssh_opts} -W 127.0.0.1:{port} {user}@127.0.0.1",
                },
                "min_workers": 0,
                "max_workers": 0,
                "file_mounts": {},  # the checkout is already here
                "setup_commands": [f"grep -qF '{mark}' ~/.bashrc || echo '{activate}' >> ~/.bashrc"],
                "head_start_ray_commands": [
                    f"ray start --head --node-ip-address 127.0.0.1 --port {gport} --dashboard-port {dport} "
                    f"--ray-client-server-port {cport} --temp-dir {t}/raytmp --num-cpus 2 "
                    "--memory 1500000000 --object-store-memory 150000000 "
                    "--autoscaling-config=~/ray_bootstrap_config.yaml --disable-usage-stats "
                    + " ".join(ray_agent_ports())
                ],
                "worker_start_ray_commands": [],
            }
            yaml_path = t / "cluster.yaml"
            yaml_path.write_text(yaml.safe_dump(cfg))

            (tmp_path / "small.yaml").write_text(SMALL)
            inputs = [str(data_dir / "web" / n) for n in INPUTS]
            local = tmp_path / "local"
            run_cli("curate", *inputs, "--out", str(local), "--config", str(tmp_path / "small.yaml"))

            ray = str(BIN / "ray")
            run = lambda *a: subprocess.run(  # noqa: E731
                [ray, *a], capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path
            )
            up = run("up", "-y", "--no-config-cache", str(yaml_path))
            assert up.returncode == 0, up.stdout + up.stderr
            out = tmp_path / "cluster"
            entry = ROOT / "python" / "llmpipe" / "distributed" / "submit_entry.py"
            sub = run(
                "submit", str(yaml_path), str(entry), "--", *inputs,
                "--out", str(out), "--config", str(tmp_path / "small.yaml"), "--quiet",
            )  # fmt: skip
            assert sub.returncode == 0, sub.stdout + sub.stderr + _ray_state(t / "raytmp")
            down = run("down", "-y", str(yaml_path))
            assert down.returncode == 0, down.stdout + down.stderr

            names = sorted(p.relative_to(local) for p in local.rglob("*") if p.is_file())
            assert names == sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
            assert any(n.suffix == ".arrow" for n in names)
            for n in names:
                assert (local / n).read_bytes() == (out / n).read_bytes(), (
                    f"{n} differs (ray submit vs local)"
                )
            # `ray down` stopped this cluster's Ray processes (raylet, GCS) and nothing else
            assert not _raylets(f"{t}/raytmp"), "ray down left this cluster's raylet running"
    finally:
        kill_all(_descendants(started, mark))
        shutil.rmtree(t, ignore_errors=True)
        for p in launcher_tmp() - tmp_before:  # the launcher's config cache and ssh control sockets
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)

"""The virtual cluster itself (tools/cluster/vcluster): hosts, disks, network, and each host fault."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from tools.cluster.vcluster import SKIP, ClusterError, down, faults, up
from tools.cluster.vcluster._sys import mounts_under, sh

from ..conftest import REPO

PY = sys.executable
SERVER = ("import socket,sys; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
          "s.bind(('0.0.0.0', 7777)); s.listen(8); print('listening', flush=True)\n"
          "while True:\n c, _ = s.accept(); c.sendall(socket.gethostname().encode()); c.close()")
CLIENT = ("import socket,sys\ntry:\n"
          " print(socket.create_connection(('node2', 7777), timeout=5).recv(64).decode())"
          "\nexcept OSError as e:\n print('unreachable', type(e).__name__); sys.exit(1)")


def _on(c, host, code, **kw):  # type: ignore[no-untyped-def]
    return subprocess.run(c.on(host, [PY, "-c", code]), capture_output=True, text=True, timeout=60, **kw)


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _wait(cond, what: str, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_hosts_have_own_name_disk_and_tcp(cluster2):
    c = cluster2
    for h in c.hosts:
        r = _on(c, h, f"import socket; open('{c.local}/mine', 'w').write(socket.gethostname()); "
                      f"print(socket.gethostname(), open('/etc/hosts').read().count('node'))")
        assert r.stdout.split() == [h, "2"], r
    assert (c.disk("node1") / "mine").read_text() == "node1"      # a disk per host, same path on each
    assert (c.disk("node2") / "mine").read_text() == "node2"
    assert not (c.local / "mine").exists()                        # nothing on the login node
    r = _on(c, "node1", f"import os; print(os.path.exists('{c.disk('node2')}'))")
    assert r.stdout.strip() == "False", "a host can see another host's disk"
    shm = f"/dev/shm/vcluster-test-{os.getpid()}"  # MPI's shared-memory files stay on their host
    assert _on(c, "node1", f"open('{shm}', 'w').write('x'); import os; print(os.path.exists('{shm}'))"
               ).stdout.strip() == "True"
    try:
        assert not os.path.exists(shm), "a host's /dev/shm is the machine's"
        assert _on(c, "node2", f"import os; print(os.path.exists('{shm}'))").stdout.strip() == "False"
    finally:
        Path(shm).unlink(missing_ok=True)
    server = subprocess.Popen(c.on("node2", [PY, "-c", SERVER]), stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "listening"
        assert _on(c, "node1", CLIENT).stdout.strip() == "node2"  # TCP across the bridge, by name
        faults.partition(c, "node2")
        r = _on(c, "node1", CLIENT)
        assert r.returncode == 1 and "unreachable" in r.stdout, r
        faults.heal(c, "node2")
        assert _on(c, "node1", CLIENT).stdout.strip() == "node2"
        faults.slow(c, "node2", "2mbit")
        assert "rate 2Mbit" in sh("tc", "qdisc", "show", "dev", c.veth("node2"))
        assert _on(c, "node1", CLIENT).stdout.strip() == "node2"   # slow, not cut
        faults.unslow(c, "node2")
        assert "tbf" not in sh("tc", "qdisc", "show", "dev", c.veth("node2"))
    finally:
        server.kill()
        server.wait(30)


def test_fill_stall_poweroff_reboot(cluster2):
    c = cluster2
    write = f"open('{c.local}/x', 'wb').write(bytes(1 << 20))"
    faults.fill(c, "node1")
    r = _on(c, "node1", write)
    assert r.returncode != 0 and "No space left on device" in r.stderr, r
    assert _on(c, "node2", write).returncode == 0                   # only node1's disk is full
    faults.unfill(c, "node1")
    assert _on(c, "node1", write).returncode == 0

    sleeper = subprocess.Popen(c.on("node1", ["sleep", "600"]))
    try:
        _wait(lambda: any(_cmd(p) == "sleep600" for p in c.processes("node1")), "the sleeper on node1")
        pid = next(p for p in c.processes("node1") if _cmd(p) == "sleep600")
        t = threading.Thread(target=faults.stall, args=(c, "node1", 3.0))
        t.start()
        _wait(lambda: _state(pid) == "T", "node1 stopped")
        assert _state(c.holder("node2")) != "T"                    # only node1 stalls
        t.join(60)
        assert _state(pid) in "SR"                                   # and goes on

        old = c.holder("node1")
        assert faults.poweroff(c, "node1") >= 2                      # the holder and the sleeper (at least)
        assert sleeper.wait(30) != 0
        assert not c.is_up("node1") and c.processes("node1") == []
        assert not mounts_under(c.disk("node1"))                     # the disk is gone
        with pytest.raises(ClusterError, match="node1 is off"):
            c.on("node1", ["true"])
        r = subprocess.run([str(c.agent), "node1", "true"], capture_output=True, text=True, timeout=30)
        assert r.returncode == 255 and "No route to host" in r.stderr, r
        faults.reboot(c, "node1")
        assert c.holder("node1") not in (None, old)
        assert sorted(p.name for p in c.disk("node1").iterdir()) == ["tmp"]  # empty disk
        assert _on(c, "node1", "import socket; print(socket.gethostname())").stdout.strip() == "node1"
    finally:
        sleeper.kill()
        sleeper.wait(30)


def _cmd(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b"").decode()
    except OSError:
        return ""


def test_second_up_refuses_and_down_cleans_up_after_an_interrupted_run(cluster2):
    c = cluster2
    with pytest.raises(ClusterError, match="already up"):
        up(2, 0, 64, c.base, prefix=c.prefix)
    stopped = subprocess.Popen(c.on("node2", ["sleep", "600"]))
    _wait(lambda: len(c.processes("node2")) == 2, "the job on node2")
    faults.partition(c, "node1")
    for p in c.processes("node2"):
        os.kill(p, signal.SIGSTOP)                                   # a stalled host, too
    (c.base / "state.json").unlink()                                 # as if `up` had been killed early
    down(c.base, c.prefix)
    assert stopped.wait(30) != 0
    assert not [n for n in sh("ip", "netns", "list").split() if n.startswith(f"{c.prefix}-")]
    assert c.prefix not in sh("ip", "-o", "link", "show")
    assert not mounts_under(c.base) and not c.base.exists()


def test_without_root_it_says_so_and_skips(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to an unprivileged user")
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", PY, "-m",
                        "tools.cluster.vcluster", "--base", str(tmp_path / "vc"), "up"],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == SKIP and "skipped: the virtual cluster needs root" in r.stderr, r


def test_slurm_across_hosts_up_reboot_down(cluster2):
    """`slurm-up`: srun -N 2 runs one task on each host under its own hostname; a second start refuses; a
    rebooted host's slurmd comes back and the node returns to service; `down` ends every daemon by itself."""
    from tools.cluster.vcluster import ClusterUnavailable, slurm

    c = cluster2
    try:
        slurm.start(c)
    except ClusterUnavailable as exc:
        pytest.skip(str(exc))
    daemons = [int(p.read_text()) for p in (c.base / "slurm").glob("*.pid")]
    assert len(daemons) == 4  # munged, slurmctld, two slurmd
    env = {**os.environ, **slurm.env(c)}
    srun = c.login(["srun", "-N", "2", "-n", "2", "hostname"], cwd=c.shared)
    r = subprocess.run(srun, capture_output=True, text=True, timeout=120, env=env)
    assert sorted(r.stdout.split()) == ["node1", "node2"], r
    with pytest.raises(ClusterError, match="already up"):
        slurm.start(c)
    faults.poweroff(c, "node2")
    faults.reboot(c, "node2")
    slurm.wait_idle(c, ["node1", "node2"])
    r = subprocess.run(srun, capture_output=True, text=True, timeout=120, env=env)
    assert sorted(r.stdout.split()) == ["node1", "node2"], r
    removed = down(c.base, c.prefix)
    assert sum(x.startswith("SLURM daemon") for x in removed) == 4, removed
    for pid in daemons:
        assert not Path(f"/proc/{pid}").exists() or _state(pid) == "Z", f"daemon {pid} still runs"

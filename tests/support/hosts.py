"""Several hosts on one machine: Linux network namespaces on a bridge, each with its own address (198.18.0.0/15,
the range reserved for benchmark networks), hostname and hosts file, and a standalone Spark worker; the master
and the notebook's session on the bridge's address.

``hostnames="debian"`` gives each host the hosts file Debian and Ubuntu ship (its own name on 127.0.1.1);
``"resolving"`` puts its own name on its address. Faults: ``link_down`` (a host lost), ``rate_limit`` (a slow link,
``tc tbf``). Needs root and ``ip netns``; ``teardown`` removes every namespace, link, ``/etc/netns`` entry and
process, also after a failure.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .cluster import _TRAMPOLINE, Cluster, START_TIMEOUT_S, _wait_for, fake_gpus, spark_env, stop

__all__ = ["Hosts", "bench_available", "build", "teardown", "kill_worker", "link_down", "rate_limit", "BRIDGE_IP"]

BRIDGE = "jtdbr0"
BRIDGE_IP = "198.18.0.1"
PREFIX = 24


@dataclass
class Hosts:
    names: list[str]                      # hostnames: tdh1, tdh2, ...
    addresses: list[str]                  # 198.18.0.11, ...
    cluster: Cluster
    namespaces: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)  # the bridge side of each host's link

    def netns(self, i: int) -> str:
        return self.namespaces[i]


def bench_available() -> str | None:
    """Why the multi-host bench cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if not shutil.which("ip") or not shutil.which("tc"):
        return "needs iproute2 (ip, tc)"
    probe = subprocess.run(["ip", "netns", "add", "jtd-probe"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"ip netns does not work here: {probe.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", "jtd-probe"], capture_output=True)
    return None


def _ip(*args: str, ns: str | None = None) -> None:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + ["ip", *args]
    subprocess.run(cmd, check=True, capture_output=True, text=True)


def _hosts_file(name: str, address: str, layout: str) -> str:
    own = "127.0.1.1" if layout == "debian" else address
    return f"127.0.0.1\tlocalhost\n{own}\t{name}\n::1\tlocalhost ip6-localhost ip6-loopback\n"


# Exec'd in the host's namespace, in a new UTS namespace (``unshare --uts``): the host's name, then the parent-death
# trampoline of support/cluster.py (every command in the chain execs, so the JVM's parent is the test process).
_NAMED = "import socket, sys; socket.sethostname(sys.argv[1]); sys.argv[1:2] = []; exec(sys.argv.pop(1))"


def _start_worker(c: Cluster, i: int, ns: str, name: str, address: str, cores: int, env: dict[str, str],
                  gpus: int = 0) -> None:
    work = c.workdir / f"work-{name}"
    work.mkdir(exist_ok=True)
    log = c.workdir / f"worker-{name}.log"
    spark_class = os.path.join(env["SPARK_HOME"], "bin", "spark-class")
    host_env = {**env, "SPARK_LOCAL_IP": address}
    if gpus:
        fake_gpus(c.workdir, host_env, gpus)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, "unshare", "--uts", "--mount", "--propagation", "private",  # and no notebooks
             "sh", "-c", 'mount -t tmpfs none "$0" && exec "$@"', str(c.notebooks), sys.executable, "-c", _NAMED,
             name, _TRAMPOLINE,
             str(os.getpid()), spark_class, "org.apache.spark.deploy.worker.Worker", "--host", address, "--port", "0",
             "--webui-port", "0", "--cores", str(cores), "--memory", "2g", "--work-dir", str(work), c.url],
            stdout=out, stderr=subprocess.STDOUT, env=host_env, stdin=subprocess.DEVNULL, start_new_session=True)
    c.procs.append(proc)
    _wait_for(log, r"Successfully registered with master", proc, time.monotonic() + START_TIMEOUT_S)


def build(workdir: Path, hosts: int = 2, cores: int = 1, layout: str = "resolving",
          gpus: tuple[int, ...] = ()) -> Hosts:
    """A bridge, ``hosts`` namespaces with a worker each, and a master on the bridge. Tear down with ``teardown``.
    ``gpus``: how many (fake) GPUs each host's worker declares, in host order (none if not given)."""
    made = Hosts(names=[f"tdh{i + 1}" for i in range(hosts)],
                 addresses=[f"198.18.0.{11 + i}" for i in range(hosts)], cluster=Cluster(url="", workdir=workdir))
    try:
        _ip("link", "add", BRIDGE, "type", "bridge")
        made.links.append(BRIDGE)
        _ip("addr", "add", f"{BRIDGE_IP}/{PREFIX}", "dev", BRIDGE)
        _ip("link", "set", BRIDGE, "up")
        for i, (name, address) in enumerate(zip(made.names, made.addresses)):
            ns, outer = f"jtd-{name}", f"jtdv{i + 1}"
            _ip("netns", "add", ns)
            made.namespaces.append(ns)
            _ip("link", "add", outer, "type", "veth", "peer", "name", "eth0", "netns", ns)
            made.links.append(outer)
            _ip("link", "set", outer, "master", BRIDGE)
            _ip("link", "set", outer, "up")
            _ip("addr", "add", f"{address}/{PREFIX}", "dev", "eth0", ns=ns)
            _ip("link", "set", "eth0", "up", ns=ns)
            _ip("link", "set", "lo", "up", ns=ns)
            etc = Path("/etc/netns") / ns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(_hosts_file(name, address, layout))
            (etc / "hostname").write_text(name + "\n")
        _start_cluster(made, cores, gpus)
    except BaseException:
        teardown(made)
        raise
    return made


def _start_cluster(made: Hosts, cores: int, gpus: tuple[int, ...]) -> None:
    c = made.cluster
    (c.workdir / "local").mkdir(exist_ok=True)
    env = {**spark_env(c.workdir), "SPARK_LOCAL_IP": BRIDGE_IP}
    spark_class = os.path.join(env["SPARK_HOME"], "bin", "spark-class")
    log = c.workdir / "master.log"
    with open(log, "wb") as out:
        master = subprocess.Popen([sys.executable, "-c", _TRAMPOLINE, str(os.getpid()), spark_class,
                                   "org.apache.spark.deploy.master.Master", "--host", BRIDGE_IP, "--port", "0",
                                   "--webui-port", "0"], stdout=out, stderr=subprocess.STDOUT, env=env,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
    c.procs.append(master)
    c.url = _wait_for(log, r"Starting Spark master at (spark://\S+)", master, time.monotonic() + START_TIMEOUT_S)[1]
    for i, (name, address) in enumerate(zip(made.names, made.addresses)):
        _start_worker(c, i, made.namespaces[i], name, address, cores, env, gpus[i] if i < len(gpus) else 0)


def link_down(made: Hosts, i: int) -> None:
    """Host ``i`` is lost: its link goes down (its processes live on, unreachable)."""
    _ip("link", "set", made.links[i + 1], "down")


def kill_worker(made: Hosts, i: int) -> None:
    """Host ``i``'s Spark worker JVM dies (SIGKILL); its executor notices and ends, with the ranks it ran."""
    made.cluster.procs[1 + i].kill()  # procs: the master, then each host's worker (every launcher in it execs)


def rate_limit(made: Hosts, i: int, rate: str = "20mbit") -> None:
    """Host ``i``'s link becomes slow (token bucket on the bridge side: traffic toward the host)."""
    subprocess.run(["tc", "qdisc", "add", "dev", made.links[i + 1], "root", "tbf", "rate", rate, "burst", "32kbit",
                    "latency", "400ms"], check=True, capture_output=True)


def teardown(made: Hosts) -> list[int]:
    """Stop every process, delete namespaces, links and /etc/netns entries; returns surviving pids."""
    survivors = stop(made.cluster) if made.cluster.procs else []
    for ns in made.namespaces:
        subprocess.run(["ip", "netns", "pids", ns], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)
    for link in reversed(made.links):
        subprocess.run(["ip", "link", "del", link], capture_output=True)
    return survivors

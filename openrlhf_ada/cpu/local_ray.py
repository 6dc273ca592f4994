"""`LocalRayCluster`: a private Ray cluster on this machine, started and stopped the way a cluster user does it
(`ray start --head`, `ray start --address` for more nodes), for `make cluster-demo` and the pipeline tests.

Private: its own GCS, dashboard, client, agent and metrics ports (free ones, picked at start) and its own temp dir,
so it neither uses nor disturbs another Ray on the machine; each node is a `ray start --block` process in its own
process group, so stopping kills exactly this cluster's processes (`ray stop` would kill every Ray on the machine).
Each node declares logical GPUs (`--num-gpus`), which is what upstream's {"GPU": 1, "CPU": 1} bundles need on CPU.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import List, Optional

from openrlhf_ada.cpu.shm_leftovers import mapped_segments, remove_orphans, remove_segments, segments


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ray_executable() -> str:
    candidate = os.path.join(os.path.dirname(sys.executable), "ray")
    return candidate if os.path.exists(candidate) else "ray"


class LocalRayCluster:
    """`with LocalRayCluster(nodes=2, gpus_per_node=1, cpus_per_node=3) as cluster: ... cluster.dashboard_url`."""

    def __init__(self, nodes: int = 1, gpus_per_node: int = 2, cpus_per_node: Optional[int] = None,
                 env: Optional[dict] = None, log_dir: Optional[str] = None, start_timeout: float = 120.0):
        if nodes < 1 or gpus_per_node < 0:
            raise ValueError(f"LocalRayCluster: nodes={nodes}, gpus_per_node={gpus_per_node}")
        self.nodes, self.gpus_per_node = nodes, gpus_per_node
        self.cpus_per_node = cpus_per_node if cpus_per_node is not None else gpus_per_node + 2
        self.env = {**os.environ, **(env or {})}
        # Jobs run `python3 ...` from the PATH of the Ray processes: put this interpreter's folder first.
        self.env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + self.env.get("PATH", "")
        self.env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        self.start_timeout = start_timeout
        self.temp_dir = tempfile.mkdtemp(prefix="ray_ada_", dir="/tmp")  # Ray's socket paths must stay < 108 chars
        self.log_dir = log_dir or self.temp_dir
        os.makedirs(self.log_dir, exist_ok=True)
        self.gcs_port = self.dashboard_port = None
        self._procs: List[subprocess.Popen] = []
        self._shm_at_start = segments()

    @property
    def gcs_address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def dashboard_url(self) -> str:
        """What `ray job submit --address` and RAY_ADDRESS take."""
        return f"http://127.0.0.1:{self.dashboard_port}"

    def _node_ports(self) -> list:
        return ["--node-manager-port", str(free_port()), "--object-manager-port", str(free_port()),
                "--dashboard-agent-listen-port", str(free_port()), "--dashboard-agent-grpc-port", str(free_port()),
                "--runtime-env-agent-port", str(free_port()), "--metrics-export-port", str(free_port()),
                "--min-worker-port", "0", "--max-worker-port", "0"]

    def _start_node(self, head: bool) -> None:
        cmd = [_ray_executable(), "start", "--block", "--disable-usage-stats", "--node-ip-address", "127.0.0.1",
               "--num-gpus", str(self.gpus_per_node), "--num-cpus", str(self.cpus_per_node), *self._node_ports()]
        if head:
            self.gcs_port, self.dashboard_port = free_port(), free_port()
            cmd += ["--head", "--port", str(self.gcs_port), "--dashboard-host", "127.0.0.1", "--dashboard-port",
                    str(self.dashboard_port), "--ray-client-server-port", str(free_port()), "--temp-dir",
                    self.temp_dir, "--include-dashboard", "true"]
        else:
            cmd += ["--address", self.gcs_address]
        log = open(os.path.join(self.log_dir, f"ray_node{len(self._procs)}.log"), "w")
        self._procs.append(subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True))

    def _wait(self, what: str, ready) -> None:
        deadline = time.time() + self.start_timeout
        while time.time() < deadline:
            for i, proc in enumerate(self._procs):
                if proc.poll() is not None:
                    raise RuntimeError(f"ray node {i} exited with {proc.returncode} while waiting for {what}; see "
                                       f"{os.path.join(self.log_dir, f'ray_node{i}.log')}")
            if ready():
                return
            time.sleep(1.0)
        raise TimeoutError(f"the local Ray cluster did not reach '{what}' within {self.start_timeout:.0f}s; logs in "
                           f"{self.log_dir}")

    def _status(self) -> str:
        out = subprocess.run([_ray_executable(), "status", "--address", self.gcs_address], env=self.env,
                             capture_output=True, text=True, timeout=60)
        return out.stdout if out.returncode == 0 else ""

    def _gpus(self) -> float:
        """Logical GPUs the cluster reports (`ray status`: "0.0/2.0 GPU")."""
        match = re.search(r"/([0-9.]+) GPU", self._status())
        return float(match.group(1)) if match else -1.0

    def _dashboard_up(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.dashboard_port), timeout=1):
                return True
        except OSError:
            return False

    def start(self) -> "LocalRayCluster":
        self._start_node(head=True)
        self._wait("head and dashboard up", lambda: self._dashboard_up() and "Active" in self._status())
        for _ in range(self.nodes - 1):
            self._start_node(head=False)
        want = float(self.gpus_per_node * self.nodes)
        self._wait(f"{self.nodes} node(s), {want:g} GPUs", lambda: self._gpus() >= want)
        return self

    def stop(self, keep_files: bool = False) -> None:
        """Stop the nodes (workers first, the head last): SIGTERM to each node's process group, SIGKILL after 20 s;
        then remove the temp dir (Ray's session logs) unless `keep_files`, and the shared-memory segments that
        this cluster's killed vLLM engines leave behind, also those of engines that ended before (Ray kills a job's
        actors when it ends): openrlhf_ada.cpu.shm_leftovers."""
        held = mapped_segments([proc.pid for proc in self._procs if proc.poll() is None])
        for proc in reversed(self._procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.time() + 20
        for proc in self._procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                pass
            try:  # whatever of this node is left (raylet, workers, gcs) goes with its group
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._procs.clear()
        remove_segments(held, wait=5.0)
        remove_orphans(self._shm_at_start)
        if not keep_files:
            shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> "LocalRayCluster":
        try:
            return self.start()
        except BaseException:
            self.stop(keep_files=True)  # the node logs say why
            raise

    def __exit__(self, *exc) -> None:
        self.stop()

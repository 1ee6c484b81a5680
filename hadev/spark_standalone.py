"""A Spark standalone cluster on loopback from the ``pyspark`` package's own jars, for tests
and ``bench.soak_scaling`` (docs/operations.md §14.2): one
``spark-class org.apache.spark.deploy.master.Master`` and N
``org.apache.spark.deploy.worker.Worker`` processes, each worker with its own cores, all
stopped by pid (``spark-class`` execs the JVM, so the pid is the JVM's)::

    with SparkStandalone(tmp_path, workers=2, cores=1) as cluster:
        subprocess.run(["hapipe", "soak", "--master", cluster.master_url, ...])

The workers run with no ``PYTHONPATH`` and in their own directories, so an executor finds
this project only in the zip that ``pipeline.session`` ships (``SparkContext.addPyFile``);
its Python is ``python`` (this interpreter, whose environment holds the third-party
dependencies, as an installed worker's would).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from hadev.daemon import free_ports

__all__ = ["SparkStandalone", "SparkStartError", "spark_home"]

START_TIMEOUT = 120.0


class SparkStartError(RuntimeError):
    """The master or a worker did not come up; the message names its log."""


def spark_home() -> Path:
    """The ``pyspark`` package directory: its ``bin/spark-class`` and ``jars/``."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def worker_environment(python: str = sys.executable) -> dict[str, str]:
    """What the master, the workers and so their executors run with: loopback, the
    interpreter for Python workers, and no PYTHONPATH (the code must come in the zip)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    env.update(
        SPARK_HOME=str(spark_home()),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=python,
        SPARK_NO_DAEMONIZE="1",
    )
    return env


class SparkStandalone:
    """A master and ``workers`` workers of ``cores`` cores each, under ``workdir``."""

    def __init__(self, workdir: Path, *, workers: int = 2, cores: int = 1, memory: str = "1g"):
        self.workdir = Path(workdir)
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.port, self.ui_port, *self._worker_ui_ports = free_ports(2 + workers)
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def log_path(self, name: str) -> Path:
        return self.workdir / f"{name}.log"

    def _spawn(self, name: str, args: list[str]) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        cwd = self.workdir / name
        cwd.mkdir(exist_ok=True)
        with open(self.log_path(name), "ab") as out:
            self.processes[name] = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args],
                cwd=cwd,
                env=worker_environment(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def master_state(self) -> dict[str, object]:
        """The master's own JSON (``/json/``): workers, cores, applications."""
        url = f"{self._master_ui()}/json/"
        with urllib.request.urlopen(url, timeout=5) as response:
            return dict(json.load(response))

    def _master_ui(self) -> str:
        """Where the master's web UI listens. Spark moves to the next port when the one asked
        for was taken meanwhile, and says where it bound in its log."""
        try:
            text = self.log_path("master").read_text(errors="replace")
        except FileNotFoundError:
            text = ""
        bound = re.findall(r"Bound MasterWebUI to \S+ and started at (http://\S+)", text)
        return bound[-1] if bound else f"http://127.0.0.1:{self.ui_port}"

    def start(self, timeout: float = START_TIMEOUT) -> SparkStandalone:
        try:
            self._spawn(
                "master",
                ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(self.port), "--webui-port", str(self.ui_port)],
            )
            for i, ui_port in enumerate(self._worker_ui_ports, start=1):
                self._spawn(
                    f"worker{i}",
                    ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                     "--cores", str(self.cores), "--memory", self.memory,
                     "--webui-port", str(ui_port), "--work-dir", str(self.workdir / f"work{i}"),
                     self.master_url],
                )
            self._wait_workers(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_workers(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            for name, proc in self.processes.items():
                if proc.poll() is not None:
                    raise SparkStartError(
                        f"spark {name} exited with {proc.returncode}; see {self.log_path(name)}"
                    )
            try:
                alive = int(str(self.master_state().get("aliveworkers", 0)))
            except (OSError, urllib.error.URLError, http.client.HTTPException, ValueError):
                alive = 0
            if alive >= self.workers:
                return
            if time.monotonic() > deadline:
                raise SparkStartError(
                    f"{alive} of {self.workers} Spark workers registered in {timeout:g}s; "
                    f"see {self.workdir}/*.log"
                )
            time.sleep(0.5)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM each process by pid (workers first), SIGKILL what outlives ``timeout``."""
        order = sorted(self.processes, key=lambda name: name == "master")
        for name in order:
            proc = self.processes[name]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for name in order:
            proc = self.processes[name]
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self.processes.clear()

    def __enter__(self) -> SparkStandalone:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

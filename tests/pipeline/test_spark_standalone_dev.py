"""``hapipe verify`` and ``hapipe analyze`` of a live ``hadev`` cluster, run on a Spark
standalone cluster on loopback (docs/operations.md §14.2; the cluster and the ``hapipe``
runner are test_spark_standalone.py's): the JournalNodes' segment files agree, and the
NameNode's image and edits are analysed, with executors that get the project only in the
shipped zip.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hadev.devcluster import DevCluster
from hadev.spark_standalone import SparkStandalone
from tests.pipeline.test_spark_standalone import hapipe, standalone

__all__ = ["standalone"]  # the module fixture, shared

# Spark JVMs on a shared 2-core machine; opt-in (--spark-standalone), about 8 minutes in all.
pytestmark = [pytest.mark.timeout(2400), pytest.mark.standalone]


def test_verify_and_analyze_a_live_dev_cluster_on_standalone(
    standalone: SparkStandalone, tmp_path: Path
) -> None:
    # Plaintext RPC: what is under test is Spark reading the files; on this loaded 2-core
    # machine the daemons' TLS handshakes at start-up sometimes time out (noted, not ours).
    with DevCluster(tmp_path / "dev", tls=False) as dev:
        with dev.client() as fs:
            for i in range(30):
                fs.mkdirs(f"/spark/d{i}", parents=True)
            fs.create("/spark/f", length=4096)
        dirs = ",".join(str(dev.data_dir / "journal" / jn) for jn in ("jn1", "jn2", "jn3"))
        verify = hapipe("verify", "--dirs", dirs, "--master", standalone.master_url,
                        "--out", str(tmp_path / "verify"))
        assert verify.returncode == 0, (verify.stdout, verify.stderr[-3000:])
        assert verify.stdout.rstrip().splitlines()[-1] == "OK: every copy agrees", verify.stdout
        active = dev.active()
        assert active is not None
        analyze = hapipe(
            "analyze", "--image", str(dev.data_dir / active), "--edits",
            str(dev.data_dir / "journal" / "jn1"), "--master", standalone.master_url,
            "--out", str(tmp_path / "analyze"),
        )
        assert analyze.returncode == 0, (analyze.stdout, analyze.stderr[-3000:])
        print(analyze.stdout)
        # the root, /spark and its 30 directories; one file of 4096 bytes
        assert "namespace: 32 directories (root included), 1 files, 4,096 bytes declared" in (
            analyze.stdout
        )
        assert (tmp_path / "analyze" / "inodes.parquet").is_dir()

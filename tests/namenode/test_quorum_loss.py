"""A majority of JournalNodes down: the active refuses new writes with a clear error, leaves
the active state, and loses nothing it acknowledged; with the JournalNodes back and a new
transition, writing resumes."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from hanamenode.errors import EditLogError, ServiceFailedError, StandbyError, from_rpc_error
from hanamenode.ha import HAState
from proto import namenode_pb2
from tests.namenode.cluster import NameNodeCluster, header, wait_for

pytestmark = pytest.mark.timeout(60)


def mkdir_error(c: NameNodeCluster, nn: str, path: str) -> Exception:
    with pytest.raises(grpc.RpcError) as info:
        c.mkdir(nn, path)
    return from_rpc_error(info.value)


def listing(c: NameNodeCluster, nn: str) -> set[str]:
    request = namenode_pb2.GetListingRequest(header=header(stale=True), path="/")
    return {e.path for e in c.client(nn).GetListing(request, timeout=10).entries}


@pytest.mark.parametrize("next_active", ["nn1", "nn2"])
def test_majority_of_journalnodes_down(tmp_path: Path, next_active: str) -> None:
    with NameNodeCluster(tmp_path) as c:
        c.transition_to_active("nn1")
        acked = {f"/acked{i}" for i in range(10)}
        for path in sorted(acked):
            c.mkdir("nn1", path)
        c.journal.stop(1)
        c.journal.stop(2)

        error = mkdir_error(c, "nn1", "/lost-quorum")
        assert isinstance(error, EditLogError)
        assert error.code is grpc.StatusCode.UNAVAILABLE
        # The reason names the quorum that could not be reached.
        assert "quorum" in str(error)
        wait_for(lambda: c.fsn("nn1").state is HAState.STANDBY, what="nn1 to leave active")
        assert isinstance(mkdir_error(c, "nn1", "/after-step-down"), StandbyError)
        assert c.fsn("nn1").last_failure is not None
        # nn1 dropped the edit that was never acknowledged (it reloaded its image and tails
        # only finalized segments): whether that edit survives is the next active's recovery's
        # decision, not nn1's.
        assert not c.fsn("nn1").namespace.exists("/lost-quorum")

        # Without a quorum nobody can become active; the NameNode stays a standby.
        with pytest.raises(grpc.RpcError) as info:
            c.transition_to_active(next_active)
        error = from_rpc_error(info.value)
        assert isinstance(error, ServiceFailedError) and "fencing earlier writers" in str(error)
        assert c.fsn(next_active).state is HAState.STANDBY

        c.journal.start(1)
        c.journal.start(2)
        c.transition_to_active(next_active)
        assert listing(c, next_active) >= acked
        resumed = c.mkdir(next_active, "/resumed")
        other = "nn2" if next_active == "nn1" else "nn1"
        c.wait_caught_up(other, resumed.txid, timeout=15)
        assert listing(c, other) >= acked | {"/resumed"}
        assert c.fsn(other).namespace.snapshot() == c.fsn(next_active).namespace.snapshot()

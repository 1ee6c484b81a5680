"""Creating a NameNode's storage: ``format`` (a new namespace) and ``bootstrap-standby`` (a
copy of another NameNode's), as the ``hanamenode`` CLI and the tests call them.

- ``format_namenode``: a new cluster id and namespace id; formats every JournalNode of the
  shared edits URI (all must answer) and the name dir: VERSION plus an empty image at txid 0.
  Existing data — a formatted JournalNode, a name dir holding VERSION or images — is erased
  only when ``force`` is set or ``confirm(what)`` says yes (HDFS ``namenode -format``).
- ``bootstrap_standby``: the namespace identity and the newest image from another configured
  NameNode (the active when one is found), the image's md5 checked, and a check that the
  JournalNodes hold every edit after the image (HDFS ``namenode -bootstrapStandby``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import grpc
import structlog

from conf import Settings
from hanamenode import fsimage
from hanamenode.errors import NamenodeError, NamenodeUnavailableError, from_rpc_error
from hanamenode.journal import connect_journal
from hanamenode.namespace import Namespace
from hanamenode.peers import NameNodePeers, Peer, until_reached
from hanamenode.storage import NameDirectory, new_namespace_info
from hanamenode.tailer import EditsUnavailableError as EditsUnavailableError
from hanamenode.tailer import check_edits_available as check_edits_available
from hanamenode.tailer import edit_source_for
from proto import namenode_pb2
from proto.values import NamespaceInfo
from qjm.journal_manager import QuorumJournalManager

log = structlog.get_logger(__name__)

Confirm = Callable[[str], bool]
"""Asked ``what`` data exists; True to erase it."""

IMAGE_DOWNLOAD_TIMEOUT = 600.0

REACH_TIMEOUT = 30.0
"""How long ``bootstrap-standby`` waits for another NameNode to be reachable: it is often run
while the one it copies from is still starting (HDFS's IPC client retries connecting, too)."""


class FormatAbortedError(Exception):
    """Existing data was found and neither forced nor confirmed away."""


def _never(what: str) -> bool:
    return False


def format_namenode(
    settings: Settings,
    nn_id: str,
    *,
    force: bool = False,
    confirm: Confirm = _never,
    cluster_id: str | None = None,
) -> NamespaceInfo:
    """Format the JournalNodes and ``nn_id``'s name dir; return the new NamespaceInfo."""
    name_dir = NameDirectory(settings.namenode(nn_id).name_dir)
    ns_info = new_namespace_info()
    if cluster_id:
        ns_info = NamespaceInfo(
            cluster_id, ns_info.namespace_id, ns_info.ctime, ns_info.layout_version
        )
    with name_dir.locked(), contextlib.closing(connect_journal(settings, ns_info)) as qjm:
        where = "JournalNode" if isinstance(qjm, QuorumJournalManager) else "ZooKeeper journal"
        holders = [f"{where} {a}" for a, held in sorted(qjm.is_formatted().items()) if held]
        if name_dir.has_data():
            holders.append(f"name directory {name_dir.path}")
        if holders and not force:
            what = "existing data in " + ", ".join(holders)
            if not confirm(what):
                raise FormatAbortedError(f"{what}; not erased (use --force)")
        # A JournalNode refuses to erase data unless forced; consent was given above.
        qjm.format(force=bool(holders))
        name_dir.clear()
        name_dir.write_version(ns_info)
        root = Namespace(root_mtime_ms=time.time_ns() // 1_000_000)
        fsimage.save_image(root, name_dir.path, 0, ns_info)
    log.info(
        "formatted",
        nn=nn_id,
        cluster=ns_info.cluster_id,
        namespace=ns_info.namespace_id,
        journal=str(settings.shared_edits_uri),
    )
    return ns_info


@dataclass(frozen=True, slots=True)
class BootstrapResult:
    source: Peer
    ns_info: NamespaceInfo
    image_txid: int


def _choose_source(
    peers: NameNodePeers, reach_timeout: float
) -> tuple[Peer, NamespaceInfo, namenode_pb2.CheckpointInfo]:
    """The NameNode to copy from (the active first), with its namespace and newest image. While
    one could not be reached (starting, or a connection that failed at once), every one is
    asked again, for up to ``reach_timeout`` seconds; when all of them refuse, at once."""
    logged = False

    def ask_each(_left: float) -> tuple[Peer, NamespaceInfo, namenode_pb2.CheckpointInfo]:
        try:
            active = peers.find_active()
            ordered = [active] + [p for p in peers.peers if p != active]
        except NamenodeError:
            ordered = list(peers.peers)
        answers: list[str] = []
        unreachable = False
        for peer in ordered:
            stub = peers.namenode(peer)
            try:
                info = stub.GetNamespaceInfo(namenode_pb2.HAEmpty(), timeout=peers.timeout)
                checkpoint = stub.GetMostRecentCheckpoint(
                    namenode_pb2.HAEmpty(), timeout=peers.timeout
                )
            except grpc.RpcError as err:
                error = from_rpc_error(err)
                unreachable = unreachable or isinstance(error, NamenodeUnavailableError)
                answers.append(f"{peer}: {error}")
                continue
            return peer, NamespaceInfo.from_pb(info.namespace_info), checkpoint
        what = "no other NameNode answered: " + ("; ".join(answers) or "none configured")
        if not unreachable:
            raise NamenodeError(what)
        nonlocal logged
        if not logged:
            log.info("no other NameNode reachable yet; asking again", answers=answers)
            logged = True
        raise NamenodeUnavailableError(what)

    return until_reached(ask_each, reach_timeout)


def _download(peers: NameNodePeers, peer: Peer, txid: int) -> Iterator[bytes]:
    request = namenode_pb2.GetImageRequest(txid=txid)
    try:
        for chunk in peers.namenode(peer).GetImage(request, timeout=IMAGE_DOWNLOAD_TIMEOUT):
            yield chunk.data
    except grpc.RpcError as err:
        error = from_rpc_error(err)
        raise type(error)(f"downloading image {txid} from {peer}: {error}") from None


def bootstrap_standby(
    settings: Settings,
    nn_id: str,
    *,
    force: bool = False,
    confirm: Confirm = _never,
    peers: NameNodePeers | None = None,
    reach_timeout: float = REACH_TIMEOUT,
) -> BootstrapResult:
    """Fill ``nn_id``'s name dir from another NameNode; see the module docstring.
    ``reach_timeout``: how long to wait while no other NameNode can be reached."""
    name_dir = NameDirectory(settings.namenode(nn_id).name_dir)
    own_peers = peers is None
    peers = peers if peers is not None else NameNodePeers.from_settings(settings, nn_id)
    try:
        if not peers.peers:
            raise NamenodeUnavailableError(
                f"no other NameNode in dfs.ha.namenodes.{settings.nameservice} to copy from"
            )
        source, ns_info, checkpoint = _choose_source(peers, reach_timeout)
        with name_dir.locked():
            if name_dir.has_data() and not force:
                what = f"name directory {name_dir.path} already holds data"
                if not confirm(what):
                    raise FormatAbortedError(f"{what}; not overwritten (use --force)")
            # With the ZooKeeper journal, txids its publisher deleted count as available
            # when another NameNode's packed segments hold them (fetched again at start).
            journal = connect_journal(settings, ns_info, nn_id=nn_id)
            with contextlib.closing(journal):
                edit_source_for(journal).check_edits_available(checkpoint.txid + 1)
            name_dir.clear()
            fsimage.install_image(
                name_dir.path, checkpoint.txid, _download(peers, source, checkpoint.txid),
                checkpoint.md5,
            )
            name_dir.write_version(ns_info)
            name_dir.load_newest_image()  # the copy must load, not only match its md5
    finally:
        if own_peers:
            peers.close()
    log.info("bootstrapped standby", nn=nn_id, source=str(source), image_txid=checkpoint.txid)
    return BootstrapResult(source, ns_info, checkpoint.txid)

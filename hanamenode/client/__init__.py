"""The NameNode's client side (docs/architecture.md §1 and §5.6): ``FailoverProxy`` (the
configured NameNodes plus one retry policy, reusing ``(client_id, call_id)`` on every retry),
``HaFsClient`` (mkdirs/create/delete/rename/list/stat through it), ``resolver`` and
``zk_resolver`` (the NameNodes found in the election znodes instead of configured) and
``shell`` (``hafs``).

    from hanamenode.client import HaFsClient
    with HaFsClient(settings) as fs:
        fs.mkdirs("/a/b", parents=True)
"""

# hafs's entry point is in this package: gRPC core must not print to its terminal, and it
# reads its log level once, when grpc is first imported (conf.quiet_grpc).
import conf.quiet_grpc  # noqa: F401
from hanamenode.client.client import (
    CreateOp,
    DeleteOp,
    HaFsClient,
    ListingsAhead,
    MkdirsOp,
    RenameOp,
    status_from_pb,
)
from hanamenode.client.failover_proxy import FailoverProxy, RetryPolicy
from hanamenode.client.resolver import NameNodeAddress, NameNodeResolver, Resolution

__all__ = [
    "CreateOp",
    "DeleteOp",
    "FailoverProxy",
    "HaFsClient",
    "ListingsAhead",
    "MkdirsOp",
    "NameNodeAddress",
    "NameNodeResolver",
    "RenameOp",
    "Resolution",
    "RetryPolicy",
    "status_from_pb",
]

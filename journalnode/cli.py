"""``journalnode`` command line: ``journalnode run --conf FILE --id jn1``.

Reads the configuration once (``--conf`` or ``HANAMENODE_CONF``), starts a
``JournalNodeServer`` with the JournalNode's rpc address, metrics (http) address and edits
directory, and serves until SIGTERM/SIGINT. A bad configuration, a busy port or a storage
directory locked by another live JournalNode is a one-line error and exit status 1.
"""

from __future__ import annotations

import sys

import click
import structlog

from conf import ConfigError, JournalNodeSettings, QJournalUri, load_settings
from conf.gcpauses import freeze_after_start
from conf.logging import LOG_FORMAT_OPTION, setup_logging
from conf.rpc import PortInUseError, daemon_settings
from conf.signals import stop_on_signals
from journalnode.errors import JournalError
from journalnode.server import JournalNodeServer
from journalnode.syncer import SyncConfig, sync_peers

log = structlog.get_logger(__name__)


@click.group()
def main() -> None:
    """JournalNode: durable storage of edit-log segments for the Quorum Journal Manager."""


@main.command()
@click.option(
    "--conf",
    "conf_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Hadoop-style XML configuration (default: $HANAMENODE_CONF).",
)
@click.option("--id", "jn_id", required=True, help="This JournalNode's id, e.g. jn1.")
@LOG_FORMAT_OPTION
def run(conf_path: str | None, jn_id: str, log_format: str) -> None:
    """Serve QJournalService and /metrics until SIGTERM or SIGINT."""
    setup_logging(log_format)
    stopped = stop_on_signals("journalnode")  # before the server starts (conf/signals.py)
    try:
        settings = daemon_settings(load_settings(conf_path), jn_id)
        jn = settings.journalnode(jn_id)
        sync = _sync_config(settings.journal_uri, jn, settings.journalnode_names())
        server = JournalNodeServer(
            jn.edits_dir,
            jn.rpc_address,
            metrics_address=jn.http_address,
            edits_address=jn.edits_address,
            tls=settings.tls,
            handler_count=settings.rpc.handler_count,
            max_message_bytes=settings.rpc.max_message_bytes,
            connection_bounds=settings.rpc,
            edit_cache_bytes=jn.edit_cache_bytes,
            max_journals=jn.max_journals,
            subscriber_queue_bytes=jn.subscriber_queue_bytes,
            max_subscribers=jn.max_subscribers,
            sync=sync,
            node_id=jn_id,
        )
        server.start()
        freeze_after_start(settings.gc_freeze_after_start, jn_id)
    except PortInUseError as exc:
        raise click.ClickException(str(exc)) from None
    except ConfigError as exc:
        raise click.ClickException(f"bad configuration: {exc}") from None
    except JournalError as exc:
        raise click.ClickException(f"journalnode {jn_id}: {exc}") from None
    except OSError as exc:
        raise click.ClickException(f"journalnode {jn_id}: {exc}") from None

    click.echo(
        f"journalnode {jn_id} serving on {server.address}, metrics on port {server.metrics_port}",
        err=True,
    )
    stopped.wait()
    server.stop(grace=2.0)
    sys.exit(0)


def _sync_config(
    uri: QJournalUri | None, jn: JournalNodeSettings, names: dict[str, str]
) -> SyncConfig | None:
    """The sync thread's configuration (docs/protocol.md §10), or None when sync is off, or
    when the shared edits URI does not name the peers (then the log says why)."""
    if not jn.sync_enabled:
        return None
    if uri is None:
        log.info("journal sync off: dfs.namenode.shared.edits.dir is not set", id=jn.id)
        return None
    try:
        peers = sync_peers(uri.addresses, [jn.rpc_address])
    except ValueError as exc:
        # Not fatal: the JournalNode serves as it did before sync existed, and says why not.
        log.error("journal sync off", id=jn.id, reason=str(exc))
        return None
    return SyncConfig(
        uri.journal_id, peers, len(uri.addresses), jn.sync_interval, jn.sync_format,
        tuple(sorted(names.items())),
    )


if __name__ == "__main__":
    main()

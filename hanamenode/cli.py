"""``hanamenode`` command line (docs/architecture.md §1):

- ``hanamenode format --conf C --id nn1 [--force] [--non-interactive]``: a new cluster id and
  namespace id; formats every JournalNode of the shared edits URI and this NameNode's name dir
  (VERSION and an empty image at txid 0). Existing data (a formatted JournalNode, a name dir
  with VERSION or images) is erased only with ``--force`` or after a confirmation, which
  ``--non-interactive`` turns into a refusal (HDFS ``namenode -format`` semantics).
- ``hanamenode bootstrap-standby --conf C --id nn2``: copies the namespace identity and the
  newest image from another configured NameNode, checks its md5 and that the JournalNodes hold
  every edit after it, and writes them into this NameNode's name dir.
- ``hanamenode run --conf C --id nn1``: serves until SIGTERM/SIGINT, starting as standby (as an
  observer when ``dfs.namenode.observer.<ns>.<id>`` is true, docs/consistency.md §9).

The work is ``hanamenode.bootstrap`` and ``hanamenode.server``; this module parses options,
asks for confirmation, and turns every failure into one line on stderr and exit status 1.
``namenode_cli(elector_factory)`` builds the command group with the elector handed in:
the NameNode process embeds the ``failover`` layer's elector, which this layer may not
import, so the group is composed one layer up, in ``namenoded.cli`` (the ``hanamenode``
program, ``python -m namenoded``; docs/architecture.md §2.1).
"""

from __future__ import annotations

import sys

import click
import structlog

from conf import ConfigError, Settings, load_settings
from conf.gcpauses import freeze_after_start
from conf.logging import LOG_FORMAT_OPTION, setup_logging
from conf.rpc import daemon_settings
from conf.signals import stop_on_signals
from hanamenode.bootstrap import (
    Confirm,
    EditsUnavailableError,
    FormatAbortedError,
    bootstrap_standby,
    format_namenode,
)
from hanamenode.errors import NamenodeError
from hanamenode.server import ElectorFactory, NameNodeServer
from qjm.errors import QJMError

log = structlog.get_logger(__name__)

_CONF_OPTION = click.option(
    "--conf",
    "conf_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Hadoop-style XML configuration (default: $HANAMENODE_CONF).",
)
_ID_OPTION = click.option("--id", "nn_id", required=True, help="This NameNode's id, e.g. nn1.")
_FORCE_OPTION = click.option("--force", is_flag=True, help="Erase existing data without asking.")
_NON_INTERACTIVE_OPTION = click.option(
    "--non-interactive", is_flag=True, help="Never ask: refuse when data exists (unless --force)."
)

# What a command can fail with, each reported as one line.
_FAILURES = (
    ConfigError,
    NamenodeError,
    QJMError,
    FormatAbortedError,
    EditsUnavailableError,
    OSError,
)


def _settings(conf_path: str | None, nn_id: str) -> Settings:
    try:
        settings = load_settings(conf_path)
        settings.namenode(nn_id)
    except ConfigError as exc:
        raise click.ClickException(f"bad configuration: {exc}") from None
    if settings.shared_edits_uri is None:
        raise click.ClickException(
            "bad configuration: dfs.namenode.shared.edits.dir is not set "
            "(qjournal://h1:p;h2:p;h3:p/journal-id or zookeeper://h1:p,h2:p/path)"
        )
    return settings


def _confirm(non_interactive: bool) -> Confirm:
    def confirm(what: str) -> bool:
        if non_interactive:
            return False
        return click.confirm(f"{what}. Erase it?", default=False, err=True)

    return confirm


@click.command("format")
@_CONF_OPTION
@_ID_OPTION
@_FORCE_OPTION
@_NON_INTERACTIVE_OPTION
@click.option("--cluster-id", default=None, help="Use this cluster id instead of a new one.")
@LOG_FORMAT_OPTION
def format_command(
    conf_path: str | None,
    nn_id: str,
    force: bool,
    non_interactive: bool,
    cluster_id: str | None,
    log_format: str,
) -> None:
    """Format the JournalNodes and this NameNode's name dir for a new namespace."""
    setup_logging(log_format)
    settings = _settings(conf_path, nn_id)
    try:
        ns_info = format_namenode(
            settings, nn_id, force=force, confirm=_confirm(non_interactive), cluster_id=cluster_id
        )
    except _FAILURES as exc:
        raise click.ClickException(f"format failed: {exc}") from None
    click.echo(
        f"formatted namespace {ns_info.namespace_id} of cluster {ns_info.cluster_id} "
        f"on {settings.shared_edits_uri} and {settings.namenode(nn_id).name_dir}",
        err=True,
    )


@click.command("bootstrap-standby")
@_CONF_OPTION
@_ID_OPTION
@_FORCE_OPTION
@_NON_INTERACTIVE_OPTION
@LOG_FORMAT_OPTION
def bootstrap_standby_command(
    conf_path: str | None, nn_id: str, force: bool, non_interactive: bool, log_format: str
) -> None:
    """Copy the namespace identity and the newest image from another NameNode."""
    setup_logging(log_format)
    settings = _settings(conf_path, nn_id)
    try:
        result = bootstrap_standby(
            settings, nn_id, force=force, confirm=_confirm(non_interactive)
        )
    except _FAILURES as exc:
        raise click.ClickException(f"bootstrap-standby failed: {exc}") from None
    click.echo(
        f"bootstrapped {nn_id} from {result.source}: namespace {result.ns_info.namespace_id} "
        f"of cluster {result.ns_info.cluster_id}, image at txid {result.image_txid}",
        err=True,
    )


def _run_command(elector_factory: ElectorFactory) -> click.Command:
    """``run``, whose NameNode embeds the elector ``elector_factory`` builds."""

    @click.command()
    @_CONF_OPTION
    @_ID_OPTION
    @LOG_FORMAT_OPTION
    def run(conf_path: str | None, nn_id: str, log_format: str) -> None:
        """Serve ClientProtocol, HAServiceProtocol, NamenodeProtocol and /metrics until
        SIGTERM."""
        setup_logging(log_format)
        try:
            settings = daemon_settings(_settings(conf_path, nn_id), nn_id)
        except ConfigError as exc:
            raise click.ClickException(f"bad configuration: {exc}") from None
        stopped = stop_on_signals("namenode")  # before the server starts (conf/signals.py)
        server = NameNodeServer(settings, nn_id, elector_factory=elector_factory)
        try:
            server.start()  # a busy port is a PortInUseError, which is a ConfigError
        except _FAILURES as exc:
            raise click.ClickException(f"namenode {nn_id}: {exc}") from None
        freeze_after_start(settings.gc_freeze_after_start, nn_id)
        click.echo(
            f"namenode {nn_id} serving on {server.address} as {server.state.value}, "
            f"metrics on port {server.metrics_port}",
            err=True,
        )
        while not stopped.wait(1.0):
            pass
        server.stop(grace=2.0)
        sys.exit(0)

    return run


def namenode_cli(elector_factory: ElectorFactory) -> click.Group:
    """The ``hanamenode`` command group; ``run`` hands ``elector_factory`` to the server."""

    @click.group()
    def main() -> None:
        """NameNode: the namespace server of the HA nameservice."""

    main.add_command(format_command)
    main.add_command(bootstrap_standby_command)
    main.add_command(_run_command(elector_factory))
    return main

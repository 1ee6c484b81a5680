"""``hactl``: HA administration of the NameNodes (docs/operations.md §3.2), in the habit of
``hdfs haadmin`` and ``hdfs zkfc -formatZK``::

    hactl --conf C get-service-state nn1          # prints active / standby
    hactl --conf C get-all-service-state          # "nn1  127.0.0.1:8020  active", one each
    hactl --conf C check-health nn1               # exit 0 when healthy
    hactl --conf C failover nn1 nn2               # make nn2 active (graceful)
    hactl --conf C transition-to-active [--forcemanual] nn1
    hactl --conf C transition-to-standby [--forcemanual] nn1
    hactl --conf C transition-to-observer nn3     # a standby becomes an observer
    hactl --conf C format-zk [--force] [--non-interactive]

``transition-to-observer`` and ``transition-to-standby`` of an observer move a NameNode
between standby and observer; neither takes part in the election, so they need no
``--forcemanual`` (HDFS-14067); an active is refused.

``failover``: with automatic failover, nn2 asks the active to cede and wins the election lock
itself (no fencing); without it, hactl asks nn1 to step down (fencing it with
``dfs.ha.fencing.methods`` if that fails) and makes nn2 active. Manual transitions are refused
while automatic failover is on, unless ``--forcemanual`` (after a confirmation that ``--yes``
answers).

Exit status: 0 on success; 255 (``hdfs haadmin``'s -1) on any failure, with the reason on
stderr: ``Illegal argument: ...`` (an unknown NameNode id), ``Operation failed: ...``,
``Failover failed: ...``, ``Health check failed: ...``; 2 for a usage error. ``format-zk``,
as ``hdfs zkfc -formatZK``: 2 when the znode exists and may not be cleared, 5 when automatic
failover is not enabled, 6 when ZooKeeper is not configured or cannot be reached.
"""

from __future__ import annotations

import sys
from typing import NoReturn

import click

import conf.quiet_grpc  # noqa: F401 - before grpc: no gRPC core line on the terminal
from conf import ConfigError, Settings, load_settings
from conf.logging import setup_logging
from conf.rpc_failures import failure_line
from failover.controller import (
    REQUEST_BY_USER,
    REQUEST_BY_USER_FORCED,
    HAServiceTarget,
    describe_status,
    format_zk,
    manual_failover,
)
from failover.errors import (
    FailoverFailedError,
    FormatDeniedError,
    UnknownNameNodeError,
    ZooKeeperUnavailableError,
)
from failover.fencing import NodeFencer
from hanamenode.errors import HealthCheckFailedError, NamenodeError
from hanamenode.ha import HAState

__all__ = ["EXIT_FAILED", "main"]

EXIT_FAILED = 255
"""``hdfs haadmin`` returns -1, which the shell sees as 255."""
EXIT_FORMAT_DENIED = 2
EXIT_AUTO_FAILOVER_DISABLED = 5
EXIT_NO_ZK = 6

_FORCEMANUAL_WARNING = (
    "You have specified the --forcemanual flag. This flag is dangerous, as it can induce "
    "a split-brain scenario that WILL CORRUPT your namespace, possibly irrecoverably.\n\n"
    "It is recommended not to use this flag, but instead to shut down the cluster and "
    "disable automatic failover if you prefer to manually manage your HA state.\n\n"
    "You may abort safely by answering 'n' or hitting ^C now.\n"
)


def _fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    click.echo(message, err=True)
    sys.exit(code)


def _why(target: HAServiceTarget, exc: NamenodeError) -> str:
    """The NameNode's refusal as it said it; a NameNode that did not answer (refused, TLS,
    timeout) or refused the caller's role as ``NameNode nn2 at 127.0.0.1:8021: connection
    refused`` (``conf.rpc_failures``)."""
    return failure_line(str(target), exc, tls=target.speaks_tls)


class _Context:
    def __init__(self, conf_path: str | None) -> None:
        self.conf_path = conf_path
        self._settings: Settings | None = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            try:
                self._settings = load_settings(self.conf_path)
            except ConfigError as exc:
                _fail(f"hactl: bad configuration: {exc}")
        return self._settings

    def target(self, nn_id: str) -> HAServiceTarget:
        try:
            return HAServiceTarget.from_settings(self.settings, nn_id)
        except UnknownNameNodeError as exc:
            _fail(f"Illegal argument: {exc}")

    @property
    def rpc_timeout(self) -> float:
        return self.settings.ha.cli_check_timeout

    @property
    def transition_timeout(self) -> float:
        return self.settings.ha.new_active_timeout


pass_context = click.make_pass_decorator(_Context)


@click.group()
@click.option(
    "--conf",
    "conf_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Hadoop-style XML configuration (default: $HANAMENODE_CONF).",
)
@click.option(
    "--log-format", type=click.Choice(["console", "json"]), default="console",
    show_default=True, help="How log lines (stderr) are rendered.",
)
@click.option(
    "--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="warning",
    show_default=True, help="Least severe log level shown.",
)
@click.pass_context
def cli(ctx: click.Context, conf_path: str | None, log_format: str, log_level: str) -> None:
    """HA administration of the NameNodes (hdfs haadmin, hdfs zkfc -formatZK).

    \b
    Exit status: 0 on success, 255 on failure (the reason on stderr), 2 for a
    usage error; format-zk: 2 when the znode exists and may not be cleared,
    5 when automatic failover is off, 6 when ZooKeeper is missing or down.
    """
    setup_logging(log_format, log_level)
    ctx.obj = _Context(conf_path)


@cli.command("get-service-state")
@click.argument("nn_id")
@pass_context
def get_service_state(c: _Context, nn_id: str) -> None:
    """Print the HA state of NN_ID: active or standby, followed by what keeps automatic
    failover from acting, if anything ("active (ZooKeeper unreachable: automatic failover
    suspended)")."""
    target = c.target(nn_id)
    try:
        status = target.status(c.rpc_timeout)
    except NamenodeError as exc:
        _fail(f"Operation failed: {_why(target, exc)}")
    click.echo(describe_status(status))


@cli.command("get-all-service-state")
@pass_context
def get_all_service_state(c: _Context) -> None:
    """Print the id, address and HA state of every NameNode, one per line
    (``nn1  127.0.0.1:8020  active``): the id is what the other commands take."""
    targets = [c.target(nn) for nn in c.settings.namenode_ids]
    id_width = max((len(t.nn_id) for t in targets), default=0)
    width = max((len(t.address) for t in targets), default=0)
    for target in targets:
        try:
            state = describe_status(target.status(c.rpc_timeout))
        except NamenodeError as exc:
            state = f"Failed to connect: {target.why(exc)}"  # hdfs haadmin's words
        click.echo(f"{target.nn_id:<{id_width}}  {target.address:<{width}}  {state}")


@cli.command("check-health")
@click.argument("nn_id")
@pass_context
def check_health(c: _Context, nn_id: str) -> None:
    """Exit 0 when NN_ID is healthy; otherwise print why and exit 255."""
    target = c.target(nn_id)
    try:
        target.monitor_health(c.rpc_timeout)
    except HealthCheckFailedError as exc:
        _fail(f"Health check failed: {exc}")
    except NamenodeError as exc:
        _fail(f"Operation failed: {_why(target, exc)}")


def _check_manual(c: _Context, target: HAServiceTarget, forcemanual: bool, yes: bool) -> bool:
    """Whether the manual transition may go on; True means as REQUEST_BY_USER_FORCED."""
    if not c.settings.ha.automatic_failover_enabled:
        return False
    if not forcemanual:
        _fail(
            f"Automatic failover is enabled for {target}\n"
            "Refusing to manually manage HA state, since it may cause\n"
            "a split-brain scenario or other incorrect state.\n"
            "If you are very sure you know what you are doing, please\n"
            "specify the --forcemanual flag."
        )
    click.echo(_FORCEMANUAL_WARNING, err=True)
    if not yes and not click.confirm("Are you sure you want to continue?", err=True):
        _fail("Aborted.")
    click.echo(
        f"Proceeding with manual HA state management even though\n"
        f"automatic failover is enabled for {target}",
        err=True,
    )
    return True


_FORCEMANUAL = click.option(
    "--forcemanual", is_flag=True,
    help="Transition even though automatic failover is on (dangerous: split brain).",
)
_YES = click.option("--yes", "-y", is_flag=True, help="Do not ask before --forcemanual.")


@cli.command("transition-to-active")
@_FORCEMANUAL
@click.option("--forceactive", is_flag=True, help="Even if another NameNode is active.")
@_YES
@click.argument("nn_id")
@pass_context
def transition_to_active(
    c: _Context, nn_id: str, forcemanual: bool, forceactive: bool, yes: bool
) -> None:
    """Make NN_ID active (refused while automatic failover is on, unless --forcemanual)."""
    target = c.target(nn_id)
    forced = _check_manual(c, target, forcemanual, yes)
    if not forceactive:
        for other in c.settings.namenode_ids:
            if other == nn_id:
                continue
            try:
                active = c.target(other).state(c.rpc_timeout) is HAState.ACTIVE
            except NamenodeError:
                continue  # unreachable: not a reason to refuse
            if active:
                _fail(f"transition-to-active: NameNode {other} is already active")
    source = REQUEST_BY_USER_FORCED if forced else REQUEST_BY_USER
    try:
        target.transition_to_active(source, c.transition_timeout)
    except NamenodeError as exc:
        _fail(f"Operation failed: {_why(target, exc)}")


@cli.command("transition-to-standby")
@_FORCEMANUAL
@_YES
@click.argument("nn_id")
@pass_context
def transition_to_standby(c: _Context, nn_id: str, forcemanual: bool, yes: bool) -> None:
    """Make NN_ID standby (refused while automatic failover is on, unless --forcemanual or
    NN_ID is an observer)."""
    target = c.target(nn_id)
    try:
        observer = target.state(c.rpc_timeout) is HAState.OBSERVER
    except NamenodeError as exc:
        _fail(f"Operation failed: {_why(target, exc)}")
    forced = not observer and _check_manual(c, target, forcemanual, yes)
    source = REQUEST_BY_USER_FORCED if forced else REQUEST_BY_USER
    try:
        target.transition_to_standby(source, c.transition_timeout)
    except NamenodeError as exc:
        _fail(f"Operation failed: {_why(target, exc)}")


@cli.command("transition-to-observer")
@click.argument("nn_id")
@pass_context
def transition_to_observer(c: _Context, nn_id: str) -> None:
    """Make the standby NN_ID an observer: it keeps tailing the log, answers reads and
    leaves the election (refused for an active NameNode: make it standby first)."""
    target = c.target(nn_id)
    try:
        target.transition_to_observer(REQUEST_BY_USER, c.transition_timeout)
    except NamenodeError as exc:
        _fail(f"Operation failed: {_why(target, exc)}")


@cli.command()
@click.argument("from_nn")
@click.argument("to_nn")
@pass_context
def failover(c: _Context, from_nn: str, to_nn: str) -> None:
    """Make TO_NN active in place of FROM_NN.

    With automatic failover TO_NN asks the active to cede and wins the election itself;
    without it, FROM_NN steps down (or is fenced) and TO_NN becomes active.
    """
    source, target = c.target(from_nn), c.target(to_nn)
    if from_nn == to_nn:
        _fail(f"Illegal argument: cannot fail over from {from_nn} to itself")
    ha = c.settings.ha
    if ha.automatic_failover_enabled:
        timeout = 2 * ha.new_active_timeout + 2 * ha.graceful_fence_timeout + 5.0
        try:
            target.graceful_failover(timeout)
        except NamenodeError as exc:
            _fail(f"Failover failed: {_why(target, exc)}")
        click.echo(f"Failover to {target} successful")
        return
    try:
        fencer = NodeFencer.from_settings(c.settings)
        manual_failover(
            source,
            target,
            fencer,
            nameservice=c.settings.nameservice,
            graceful_timeout=ha.graceful_fence_timeout,
            rpc_timeout=c.rpc_timeout,
            transition_timeout=c.transition_timeout,
        )
    except ConfigError as exc:
        _fail(f"hactl: bad configuration: {exc}")
    except FailoverFailedError as exc:
        _fail(f"Failover failed: {exc}")
    click.echo(f"Failover from {from_nn} to {to_nn} successful")


@cli.command("format-zk")
@click.option("--force", is_flag=True, help="Clear an existing working znode without asking.")
@click.option(
    "--non-interactive", is_flag=True,
    help="Never ask: refuse when the working znode exists (unless --force).",
)
@pass_context
def format_zk_command(c: _Context, force: bool, non_interactive: bool) -> None:
    """Create the nameservice's znodes in ZooKeeper for automatic failover."""
    settings = c.settings
    if not settings.ha.automatic_failover_enabled:
        _fail(
            "Automatic failover is not enabled for nameservice "
            f"{settings.nameservice} (dfs.ha.automatic-failover.enabled)",
            EXIT_AUTO_FAILOVER_DISABLED,
        )

    def confirm(question: str) -> bool:
        if non_interactive:
            return False
        click.echo("=" * 47 + "\n" + question + "\n" + "=" * 47, err=True)
        return click.confirm("Proceed formatting?", default=False, err=True)

    try:
        path = format_zk(settings, force=force, confirm=confirm)
    except ConfigError as exc:
        _fail(f"hactl: bad configuration: {exc}", EXIT_NO_ZK)
    except ZooKeeperUnavailableError as exc:
        _fail(f"format-zk failed: {exc}", EXIT_NO_ZK)
    except FormatDeniedError as exc:
        _fail(f"format-zk: {exc}", EXIT_FORMAT_DENIED)
    click.echo(f"Successfully created {path} in ZooKeeper {settings.zk.quorum}")


def main() -> None:
    """The ``hactl`` console script."""
    cli(prog_name="hactl")


if __name__ == "__main__":
    main()

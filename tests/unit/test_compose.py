"""``docker-compose.yml`` against our CLIs and ``conf/examples/compose-site.xml``.

Docker does not run here, so this checks what would break a ``docker compose up``: every
command a service runs (exec form, or the lines of an ``sh -ec`` script) names one of our
programs and a subcommand that exists, with options that exist and parse (click's own
parser, and ``--help`` through ``CliRunner``); every ``--id`` is an id of the configuration;
every ``--conf`` is where the service mounts the configuration; each daemon's service is
named after its id and exposes the ports of its configured addresses; data directories are
volumes; and the image copies every package of the project.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner

from conf import Settings, load_settings
from failover.hactl import cli as hactl_cli
from hanamenode.client.shell import main as hafs_cli
from journalnode.cli import main as journalnode_cli
from namenoded.cli import main as hanamenode_cli

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
CONF = ROOT / "conf" / "examples" / "compose-site.xml"
CONF_IN_CONTAINER = "/etc/hanamenode/ha-site.xml"

PROGRAMS: dict[str, click.Group] = {
    "journalnode": journalnode_cli,
    "hanamenode": hanamenode_cli,
    "hactl": hactl_cli,
    "hafs": hafs_cli,
}
# Where one simple command of a shell script ends.
_SHELL_STOP = {";", "||", "&&", "|", "&", ")", "then", "do", "fi", "done", "]"}


@dataclass(frozen=True)
class Invocation:
    service: str
    program: str
    args: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.service}: {self.program} {' '.join(self.args)}"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(loaded, dict), "docker-compose.yml is not a mapping"
    return loaded


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found = compose.get("services")
    assert isinstance(found, dict) and found, "docker-compose.yml has no services"
    return found


@pytest.fixture(scope="module")
def settings() -> Settings:
    return load_settings(CONF)


def shell_invocations(script: str) -> Iterator[list[str]]:
    """Each simple command of ``script`` that runs one of our programs, as arguments."""
    for line in script.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        tokens = list(lexer)
        i = 0
        while i < len(tokens):
            if tokens[i] in PROGRAMS:
                end = i + 1
                while end < len(tokens) and tokens[end] not in _SHELL_STOP:
                    end += 1
                yield tokens[i:end]
                i = end
            else:
                i += 1


def invocations(services: dict[str, dict[str, Any]]) -> list[Invocation]:
    out: list[Invocation] = []
    for name, service in services.items():
        command = service.get("command")
        if command is None:
            continue
        assert isinstance(command, list), f"{name}: write the command in exec form (a list)"
        if command[0] in PROGRAMS:
            out.append(Invocation(name, command[0], tuple(command[1:])))
            continue
        assert command[:2] == ["sh", "-ec"] and len(command) == 3, (
            f"{name}: a command is one of our programs or `sh -ec SCRIPT`, got {command}"
        )
        found = [
            Invocation(name, args[0], tuple(args[1:])) for args in shell_invocations(command[2])
        ]
        assert found, f"{name}: its script runs none of {sorted(PROGRAMS)}"
        out.extend(found)
    return out


def parse(invocation: Invocation) -> tuple[str, dict[str, Any]]:
    """The subcommand and its parsed options; click's error (an unknown option, a missing
    value) fails the test."""
    group = PROGRAMS[invocation.program]
    args = list(invocation.args)
    index = next((i for i, a in enumerate(args) if a in group.commands), None)
    assert index is not None, f"{invocation}: no subcommand of {invocation.program}"
    ctx = (
        group.make_context(invocation.program, args[:index])
        if index
        else click.Context(group, info_name=invocation.program)
    )
    name = args[index]
    try:
        sub = group.commands[name].make_context(name, args[index + 1 :], parent=ctx)
    except click.UsageError as exc:
        pytest.fail(f"{invocation}: {exc}")
    return name, {**ctx.params, **sub.params}


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """Mount target -> source of a service's short-syntax volumes."""
    out = {}
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        out[target] = source
    return out


def exposed(service: dict[str, Any]) -> set[int]:
    return {int(port) for port in service.get("expose", [])}


def host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def test_every_command_is_a_subcommand_of_our_clis_with_existing_options(
    services: dict[str, dict[str, Any]],
) -> None:
    found = invocations(services)
    seen = {(i.program, parse(i)[0]) for i in found}
    # What the cluster needs: the daemons, and the one-time formatting.
    assert {
        ("journalnode", "run"),
        ("hanamenode", "run"),
        ("hanamenode", "format"),
        ("hanamenode", "bootstrap-standby"),
        ("hactl", "format-zk"),
    } <= seen
    runner = CliRunner()
    for invocation in found:
        name, _ = parse(invocation)
        group = PROGRAMS[invocation.program]
        result = runner.invoke(group, [name, "--help"])
        assert result.exit_code == 0, f"{invocation}: --help failed: {result.output}"
        for option in (a.split("=")[0] for a in invocation.args if a.startswith("--")):
            in_help = option in result.output or option in runner.invoke(group, ["--help"]).output
            assert in_help, f"{invocation}: {option} is not in {invocation.program} {name} --help"


def test_ids_and_conf_paths_match_the_configuration(
    services: dict[str, dict[str, Any]], settings: Settings
) -> None:
    for invocation in invocations(services):
        _, params = parse(invocation)
        service = services[invocation.service]
        assert params.get("conf_path") == CONF_IN_CONTAINER, f"{invocation}: --conf"
        assert mounts(service).get(CONF_IN_CONTAINER) == "./conf/examples/compose-site.xml", (
            f"{invocation.service} does not mount the configuration at {CONF_IN_CONTAINER}"
        )
        if "jn_id" in params:
            assert params["jn_id"] in settings.journalnode_ids, f"{invocation}: --id"
        if "nn_id" in params:
            assert params["nn_id"] in settings.namenode_ids, f"{invocation}: --id"
    daemons = {
        parse(i)[1].get("jn_id") or parse(i)[1].get("nn_id")
        for i in invocations(services)
        if parse(i)[0] == "run"
    }
    assert daemons == {*settings.journalnode_ids, *settings.namenode_ids}
    for name, service in services.items():
        env = service.get("environment", {})
        if "HANAMENODE_CONF" in env:
            assert env["HANAMENODE_CONF"] == CONF_IN_CONTAINER, name


def test_each_daemon_listens_where_the_configuration_says(
    services: dict[str, dict[str, Any]], settings: Settings
) -> None:
    addresses: list[tuple[str, str]] = []
    for jn in settings.journalnode_ids:
        js = settings.journalnode(jn)
        addresses += [(jn, js.rpc_address), (jn, js.http_address)]
    for nn in settings.namenode_ids:
        ns = settings.namenode(nn)
        addresses += [(nn, ns.rpc_address), (nn, ns.http_address)]
    for address in settings.zk.quorum.split("/")[0].split(","):
        addresses.append((host_port(address)[0], address))
    for service_name, address in addresses:
        host, port = host_port(address)
        assert host == service_name, f"{address}: the host must be the service name"
        assert service_name in services, f"no service {service_name} for {address}"
        assert port in exposed(services[service_name]), f"{service_name} does not expose {port}"
    assert settings.journal_uri is not None
    configured = {settings.journalnode(jn).rpc_address for jn in settings.journalnode_ids}
    assert set(settings.journal_uri.addresses) == configured, "the qjournal URI's JournalNodes"


def test_healthchecks_probe_the_configured_metrics_port(
    services: dict[str, dict[str, Any]], settings: Settings
) -> None:
    http = {jn: settings.journalnode(jn).http_address for jn in settings.journalnode_ids}
    http |= {nn: settings.namenode(nn).http_address for nn in settings.namenode_ids}
    for name, address in http.items():
        test = " ".join(services[name]["healthcheck"]["test"])
        urls = re.findall(r"http://([^/']+)/metrics", test)
        assert urls == [address], f"{name}: healthcheck probes {urls}, configured {address}"


def test_data_directories_are_volumes_shared_with_the_format_steps(
    services: dict[str, dict[str, Any]], settings: Settings, compose: dict[str, Any]
) -> None:
    volumes = set(compose.get("volumes", {}))
    edits_volume = {}
    for jn in settings.journalnode_ids:
        source = mounts(services[jn]).get(str(settings.journalnode(jn).edits_dir))
        assert source in volumes, f"{jn}: its edits dir is not on a named volume"
        edits_volume[jn] = source
    name_volume = {}
    for nn in settings.namenode_ids:
        source = mounts(services[nn]).get(str(settings.namenode(nn).name_dir))
        assert source in volumes, f"{nn}: its name dir is not on a named volume"
        name_volume[nn] = source
    shared = [*edits_volume.values(), *name_volume.values()]
    assert len(set(shared)) == len(shared), f"daemons share a data volume: {shared}"
    for invocation in invocations(services):
        subcommand, params = parse(invocation)
        if invocation.program == "hanamenode" and subcommand in ("format", "bootstrap-standby"):
            nn = params["nn_id"]
            target = str(settings.namenode(nn).name_dir)
            assert mounts(services[invocation.service]).get(target) == name_volume[nn], (
                f"{invocation}: must write {nn}'s name dir volume {name_volume[nn]}"
            )
    for name, service in services.items():
        for dependency in service.get("depends_on", {}):
            assert dependency in services, f"{name} depends on unknown service {dependency}"


def test_the_image_holds_every_package(compose: dict[str, Any]) -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.split(".")[0] for p in pyproject["tool"]["setuptools"]["packages"]}
    dockerfile = compose["x-hanamenode"]["build"]["dockerfile_inline"]
    copied = set(re.findall(r"^COPY (\S+) \1$", dockerfile, re.MULTILINE))
    assert packages <= copied, f"the image lacks {sorted(packages - copied)}"
    assert "COPY pyproject.toml README.md ./" in dockerfile


def test_the_configuration_loads() -> None:
    settings = load_settings(CONF)
    assert settings.ha.automatic_failover_enabled
    assert len(settings.journalnode_ids) == 3 and len(settings.namenode_ids) == 2

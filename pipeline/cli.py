"""``hapipe``: the Spark jobs of docs/architecture.md §8.5 from the command line.

    hapipe soak --seeds 5000 [--first-seed 0] [--steps 200] [--mutant ignore-writer-epoch]
    hapipe soak --mutants --seeds 200 [--mutant NAME ...] [--charts]
    hapipe soak --mutants --seeds 10000 --out D [--resume]   (checkpointed: goes on after a stop)
    hapipe soak --namenodes [--mutants] --seeds 200      (the NameNode layer's simulation, nnsim)
    hapipe verify --dirs /data/jn1,/data/jn2,/data/jn3 [--logtester-dirs /tmp/lt]
    hapipe verify --journalnodes h1:8485,h2:8485,h3:8485 --journal-id ns1
    hapipe verify                       (the JournalNodes and journal of --conf/$HANAMENODE_CONF)
    hapipe analyze --image name/fsimage_0000000000000000000.db --edits /data/jn1/ns1/current

On the ``hadev`` cluster in D: ``hapipe verify --dirs D/data/journal/jn1,D/data/journal/jn2,
D/data/journal/jn3`` (or its JournalNodes' addresses with ``--journal-id``), and
``hapipe analyze --image D/data/nn1 --edits D/data/journal/jn1``.

Every command runs on ``local[*]`` unless ``--master`` names another Spark master, and takes
``--spark-conf key=value`` for anything else. The same commands can be submitted, with this
project installed where ``spark-submit`` runs (``pip install -e '.[spark]'``)::

    PYSPARK_PYTHON=.venv/bin/python spark-submit --master spark://host:7077 \
        --driver-java-options -Dlog4j2.configurationFile=pipeline/log4j2.properties \
        pipeline/cli.py soak --seeds 5000

(the log4j option keeps the driver as quiet as ``hapipe`` alone makes it). Exit status: 0 when
all is well, 1 when a soak seed failed or verify found something, 2 when the job could not
run (a one-line error).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, TypeVar

import click

import conf.quiet_grpc  # noqa: F401 - before grpc: no gRPC core line on the terminal
from conf.logging import LOG_FORMAT_OPTION, LOG_LEVEL_OPTION, setup_logging
from conf.mutants import Mutant
from conf.xmlconf import ConfigError

_F = TypeVar("_F", bound=Callable[..., Any])

SPARK_MISSING = "PySpark is not installed: pip install -e '.[spark]' (and a Java 17+ runtime)"


def _spark_options(fn: _F) -> _F:
    """``--master``, ``--ui`` and ``--spark-conf`` for every command."""
    fn = click.option(
        "--spark-conf",
        "spark_conf",
        multiple=True,
        metavar="KEY=VALUE",
        help="A Spark property, e.g. spark.driver.memory=4g (repeatable).",
    )(fn)
    fn = click.option(
        "--ui/--no-ui", default=False, show_default=True, help="Serve the Spark web UI."
    )(fn)
    fn = click.option(
        "--master",
        default=None,
        help="Spark master URL [default: local[*], or spark-submit's --master].",
    )(fn)
    return fn


def _session_settings(master: str | None, ui: bool, spark_conf: tuple[str, ...]) -> Any:
    from pipeline.session import SessionSettings

    conf = {}
    for item in spark_conf:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--spark-conf")
        conf[key.strip()] = value.strip()
    return SessionSettings(master=master, ui=ui, conf=conf)


def _split(values: tuple[str, ...]) -> tuple[str, ...]:
    """``a,b`` and ``c`` -> (a, b, c): list options given comma-separated, repeated or both."""
    return tuple(v.strip() for value in values for v in value.split(",") if v.strip())


def _default_out(job: str) -> Path:
    return Path(f"hapipe-{job}-{time.strftime('%Y%m%d-%H%M%S')}")


class _Fail(click.ClickException):
    """A job that could not run: ``hapipe: error: <one line>``, exit status 2."""

    exit_code = 2

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"hapipe: error: {self.format_message()}", err=True)


def _run_job(job: Callable[[], int]) -> None:
    """Run a job; map its refusal to a one-line error and its verdict to the exit status."""
    try:
        import pyspark  # noqa: F401 - only to fail early with a useful message
    except ImportError:
        raise _Fail(SPARK_MISSING) from None
    from pipeline.errors import PipelineError

    try:
        status = job()
    except (PipelineError, ConfigError) as exc:
        raise _Fail(str(exc)) from None
    except OSError as exc:
        raise _Fail(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": ")) from None
    sys.exit(status)


class ProgressPrinter:
    """A soak's progress on stderr: one line rewritten in place on a terminal, otherwise a
    new line every ``every`` seconds (logs and CI stay readable)."""

    def __init__(self, stream: IO[str] | None = None, every: float = 10.0) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.every = every
        self._tty = self.stream.isatty()
        self._last = 0.0
        self._width = 0
        self._finished = False

    def __call__(self, progress: Any) -> None:
        line = progress.line()
        if self._tty:
            self.stream.write("\r" + line.ljust(self._width))
            self._width = len(line)
            self.stream.flush()
            return
        now = time.monotonic()
        finished = progress.done == progress.total
        if finished and self._finished:
            return
        if finished or now - self._last >= self.every:
            self._last = now
            self._finished = finished
            self.stream.write(line + "\n")
            self.stream.flush()

    def close(self) -> None:
        if self._tty and self._width:
            self.stream.write("\n")
            self.stream.flush()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@LOG_FORMAT_OPTION
@LOG_LEVEL_OPTION
def main(log_format: str, log_level: str) -> None:
    """Spark jobs over hanamenode: fault soak, cluster log audit, namespace analytics."""
    setup_logging(log_format, log_level)


@main.command()
@click.option("--seeds", type=click.IntRange(min=1), required=True, help="How many seeds.")
@click.option("--first-seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--steps", type=click.IntRange(min=0), default=200, show_default=True)
@click.option(
    "--journalnodes", "n_journalnodes", type=click.IntRange(min=1), default=3, show_default=True
)
@click.option(
    "--mutant",
    "mutant_names",
    multiple=True,
    type=click.Choice([m.switch for m in Mutant]),
    help="Plant this bug (conf.mutants; repeatable), e.g. ignore-writer-epoch: the soak must "
    "find it. With --mutants: score only these.",
)
@click.option(
    "--mutants",
    "mutation_score",
    is_flag=True,
    help="Score the simulator: run each planted bug of the catalogue alone, and the clean "
    "code, over the seeds; write the mutation-score table.",
)
@click.option(
    "--namenodes",
    is_flag=True,
    help="Simulate the NameNode layer (nnsim: NameNodes, a ZooKeeper model and clients over the "
    "simulated JournalNodes; --steps counts client operations). With --mutants: score the "
    "NameNode layer's catalogue.",
)
@click.option(
    "--charts", is_flag=True, help="With --mutants: also write mutation_score.png (matplotlib)."
)
@click.option(
    "--resume",
    is_flag=True,
    help="With --mutants: go on with the unfinished soak in --out (same seeds, same code); "
    "the blocks it finished are not run again.",
)
@click.option(
    "--chunk-seeds",
    type=click.IntRange(min=1),
    default=None,
    help="With --mutants: seeds per checkpointed block [default: 200].",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory for results.parquet and the summary [default: ./hapipe-soak-<time>].",
)
@_spark_options
def soak(
    seeds: int,
    first_seed: int,
    steps: int,
    n_journalnodes: int,
    mutant_names: tuple[str, ...],
    mutation_score: bool,
    namenodes: bool,
    charts: bool,
    resume: bool,
    chunk_seeds: int | None,
    out: Path | None,
    master: str | None,
    ui: bool,
    spark_conf: tuple[str, ...],
) -> None:
    """Run the QJM fault simulator for every seed, one Spark task each; report failing seeds
    with the command that replays each one. Exit status 1 if any seed failed.

    With --mutants, score the simulator instead: every planted bug of its catalogue, and the
    clean code, over the seeds; exit status 1 if the clean code failed or a mutant was never
    caught."""
    if not mutation_score:
        for flag, given in (
            ("--charts", charts),
            ("--resume", resume),
            ("--chunk-seeds", chunk_seeds),
        ):
            if given:
                raise click.UsageError(f"{flag} goes with --mutants")
    if resume and out is None:
        raise click.UsageError("--resume needs the --out directory of the soak to go on with")

    def mutation_job() -> int:
        from pipeline.mutants import (
            DEFAULT_CHUNK_SEEDS,
            MutationSoakConfig,
            format_mutation_summary,
            run_mutation_soak,
        )
        from pipeline.session import spark_session
        from pipeline.soak import prepare_out

        config = MutationSoakConfig(
            first_seed,
            seeds,
            steps,
            n_journalnodes,
            mutants=tuple(mutant_names),
            namenodes=namenodes,
        )
        out_dir = out or _default_out("soak-mutants")
        prepare_out(out_dir)  # refuse before a JVM starts
        printer = ProgressPrinter()
        with spark_session(_session_settings(master, ui, spark_conf)) as spark:
            try:
                summary = run_mutation_soak(
                    spark,
                    config,
                    out_dir,
                    progress=printer,
                    charts=charts,
                    resume=resume,
                    chunk_seeds=chunk_seeds or DEFAULT_CHUNK_SEEDS,
                )
            finally:
                printer.close()
        click.echo(format_mutation_summary(summary))
        return 0 if summary.passed else 1

    if mutation_score:
        _run_job(mutation_job)
        return

    def job() -> int:
        from pipeline.session import spark_session
        from pipeline.soak import SoakConfig, format_summary, prepare_out, run_soak

        config = SoakConfig(
            first_seed, seeds, steps, n_journalnodes, tuple(mutant_names), namenodes=namenodes
        )
        out_dir = out or _default_out("soak")
        prepare_out(out_dir)  # refuse before a JVM starts
        printer = ProgressPrinter()
        with spark_session(_session_settings(master, ui, spark_conf)) as spark:
            try:
                summary = run_soak(spark, config, out_dir, progress=printer)
            finally:
                printer.close()
        click.echo(format_summary(summary))
        return 0 if summary.passed else 1

    _run_job(job)


@main.command()
@click.option(
    "--journalnodes",
    multiple=True,
    metavar="HOST:PORT,...",
    help="Live JournalNodes to read over RPC (needs --journal-id) [default: the configured "
    "ones, with their journal, when neither this nor --dirs is given].",
)
@click.option(
    "--journal-id",
    "journal_ids",
    multiple=True,
    metavar="ID,...",
    help="Journal ids to check over RPC (repeatable or comma-separated).",
)
@click.option(
    "--dirs",
    multiple=True,
    metavar="DIR,...",
    help="JournalNode storage directories (dfs.journalnode.edits.dir), one per JournalNode.",
)
@click.option(
    "--logtester-dirs",
    multiple=True,
    metavar="DIR,...",
    help="Directories holding LogTester *.acked files: no txid may be acked twice.",
)
@click.option(
    "--conf",
    "conf_path",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="Configuration whose TLS settings (and, by default, JournalNodes) the RPCs use "
    "[default: $HANAMENODE_CONF].",
)
@click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds per RPC.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Also write segment_copies.parquet (and acked_claims.parquet) here.",
)
@_spark_options
def verify(
    journalnodes: tuple[str, ...],
    journal_ids: tuple[str, ...],
    dirs: tuple[str, ...],
    logtester_dirs: tuple[str, ...],
    conf_path: Path | None,
    timeout: float,
    out: Path | None,
    master: str | None,
    ui: bool,
    spark_conf: tuple[str, ...],
) -> None:
    """Check that every finalized segment is identical on every JournalNode, and that no
    txid was acknowledged to two LogTesters. Exit status 1 on any finding."""

    def job() -> int:
        from pipeline.session import spark_session
        from pipeline.verify import format_report, list_rpc_segments, run_verify

        sources = verify_sources(
            conf_path,
            journalnodes=_split(journalnodes),
            journal_ids=_split(journal_ids),
            dirs=_split(dirs),
            logtester_dirs=_split(logtester_dirs),
            timeout=timeout,
        )
        listed = None
        if sources.journalnodes:
            # Before Spark starts: a cluster this client cannot reach is one line, at once.
            listed = list_rpc_segments(
                sources.journalnodes,
                sources.journal_ids,
                sources.tls,
                sources.timeout,
                dict(sources.names),
            )
        with spark_session(_session_settings(master, ui, spark_conf)) as spark:
            report = run_verify(spark, sources, out=out, listed=listed)
        click.echo(format_report(report))
        return 0 if report.ok else 1

    _run_job(job)


def verify_sources(
    conf_path: Path | None,
    *,
    journalnodes: tuple[str, ...],
    journal_ids: tuple[str, ...],
    dirs: tuple[str, ...],
    logtester_dirs: tuple[str, ...],
    timeout: float,
) -> Any:
    """What ``hapipe verify`` reads, as every command does it: the configuration of
    ``--conf``, else of ``$HANAMENODE_CONF`` (its TLS for the RPCs, its JournalNodes' ids in
    findings); without either, plaintext. Given neither JournalNodes nor directories, the
    configured JournalNodes (``dfs.namenode.shared.edits.dir``) and their journal id."""
    import os

    from conf import CONF_ENV, load_settings
    from pipeline.errors import PipelineError
    from pipeline.verify import VerifySources

    settings = None
    if conf_path is not None or os.environ.get(CONF_ENV):
        settings = load_settings(conf_path)
    if not journalnodes and not dirs:
        if settings is None or settings.journal_uri is None:
            raise PipelineError(
                "give --journalnodes (with --journal-id) or --dirs, or a configuration that "
                f"names the JournalNodes (--conf or ${CONF_ENV}: dfs.namenode.shared.edits.dir)"
            )
        journalnodes = tuple(settings.journal_uri.addresses)
        journal_ids = journal_ids or (settings.journal_uri.journal_id,)
    tls = settings.tls if settings is not None and settings.tls.enabled else None
    names = tuple(sorted(settings.journalnode_names().items())) if settings is not None else ()
    return VerifySources(
        journalnodes=journalnodes,
        journal_ids=journal_ids,
        dirs=dirs,
        logtester_dirs=logtester_dirs,
        tls=tls,
        timeout=timeout,
        names=names,
    )


@main.command()
@click.option(
    "--image",
    type=click.Path(exists=True, path_type=Path),
    required=True,
    help="An fsimage_<txid>.db file, or a name directory (its newest image).",
)
@click.option(
    "--edits",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Edit segments: a JournalNode's <journal>/current directory or any edits_* directory.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory for the Parquet tables [default: ./hapipe-analyze-<time>].",
)
@click.option("--charts", is_flag=True, help="Also write ops_per_minute.png (needs matplotlib).")
@_spark_options
def analyze(
    image: Path,
    edits: Path | None,
    out: Path | None,
    charts: bool,
    master: str | None,
    ui: bool,
    spark_conf: tuple[str, ...],
) -> None:
    """Turn an fsimage plus edit segments into tables (inodes, edit ops) and print the
    namespace's size, largest and busiest directories, and edit ops per type per minute."""

    def job() -> int:
        from pipeline.analyze import check_out, format_report, load, run_analyze
        from pipeline.session import spark_session

        out_dir = out or _default_out("analyze")
        check_out(out_dir)
        loaded = load(image, edits)
        with spark_session(_session_settings(master, ui, spark_conf)) as spark:
            report = run_analyze(spark, loaded, out=out_dir, charts=charts)
        click.echo(format_report(report))
        return 0

    _run_job(job)


if __name__ == "__main__":
    main()

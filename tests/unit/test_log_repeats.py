"""conf.logging.RepeatFilter: a run of identical warnings (or kazoo lines) becomes a few lines
per window, and the first line let through in the next window carries the count of those held
back."""

from __future__ import annotations

import logging

from conf.logging import RepeatFilter


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.msg
        if isinstance(msg, dict):
            self.lines.append(" ".join(f"{k}={v}" for k, v in sorted(msg.items())))
        else:
            self.lines.append(f"{record.name}: {record.getMessage()}")


def logger(name: str, clock: Clock) -> tuple[logging.Logger, Lines]:
    lines = Lines()
    lines.addFilter(RepeatFilter(window=60.0, clock=clock))
    log = logging.getLogger(name)
    log.handlers[:] = [lines]
    log.propagate = False
    log.setLevel(logging.DEBUG)
    return log, lines


def test_identical_kazoo_lines_are_a_few_per_window_then_a_count() -> None:
    clock = Clock()
    log, lines = logger("kazoo.repeat-test", clock)
    connecting = "kazoo.repeat-test: Connecting to 127.0.0.1:2181, use_ssl: False"
    dropped = "kazoo.repeat-test: Connection dropped: socket connection error: Connection refused"
    for _ in range(100):
        log.info("Connecting to %s, use_ssl: %s", "127.0.0.1:2181", False)
        log.warning("Connection dropped: socket connection error: Connection refused")
        clock.now += 0.25  # 25 s of reconnect attempts
    assert lines.lines == [connecting, dropped] * 3
    clock.now = 70.0
    log.warning("Connection dropped: socket connection error: Connection refused")
    log.info("Connecting to %s, use_ssl: %s", "127.0.0.1:2182", False)  # another host
    log.warning("Connection dropped: socket connection error: Connection refused")
    assert lines.lines[6:] == [
        f"{dropped} (repeated 97 times)",
        "kazoo.repeat-test: Connecting to 127.0.0.1:2182, use_ssl: False",
        dropped,
    ]


def test_other_info_lines_and_different_warnings_all_pass() -> None:
    clock = Clock()
    log, lines = logger("hanamenode.repeat-test", clock)
    for i in range(3):
        log.info("rolled the log")
        log.warning("could not roll: attempt %d", i)
    assert len(lines.lines) == 6


def test_structlog_events_compare_without_their_timestamp() -> None:
    # structlog's wrap_for_formatter hands the handler its event dict as the record's msg.
    clock = Clock()
    _, lines = logger("failover.repeat-test", clock)
    for i in range(8):
        record = logging.LogRecord("failover.repeat-test", logging.WARNING, __file__, 1,
                                   {"event": "membership not registered", "nn": "nn1",
                                    "timestamp": f"t{i}"}, None, None)
        logging.getLogger("failover.repeat-test").handle(record)
        clock.now += 12
    # t=0, 12, 24 pass; 36, 48 held; 60 opens a window (repeated=2): 60, 72, 84 pass.
    assert lines.lines == [
        "event=membership not registered nn=nn1 timestamp=t0",
        "event=membership not registered nn=nn1 timestamp=t1",
        "event=membership not registered nn=nn1 timestamp=t2",
        "event=membership not registered nn=nn1 repeated=2 timestamp=t5",
        "event=membership not registered nn=nn1 timestamp=t6",
        "event=membership not registered nn=nn1 timestamp=t7",
    ]

"""Reading a daemon's Prometheus ``/metrics`` page: one sample summed over its labels
(tests and benchmarks)."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def metric_value(url: str | None, name: str, **labels: str) -> float:
    """The sum of the samples ``name`` on the page at ``url`` whose labels include
    ``labels`` (0.0 when there is none)."""
    assert url is not None, "the daemon serves no metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )

"""The queries of the ``barriered-kafka`` sink tests and what their topic must hold.

The queries are :func:`runs.sink_query`'s (``append``: one ``(user, n)`` row per record;
``update``: each user's running total on every change), written as Kafka records with the
user as key and the number as value text. :func:`published` reads the topic with a
``read_committed`` consumer: every record (append), or the last value per key (update;
a key's records lie in one partition, in order).
"""

from __future__ import annotations

from typing import Any

from runs import sink_query

FORMAT = "barriered-kafka"


def as_records(df: Any) -> Any:
    """The processor's output as Kafka records: key = user, value = the number as text."""
    second = "n" if "n" in df.columns else "total"
    return df.selectExpr("user_id AS key", f"CAST({second} AS STRING) AS value")


def kafka_query(kind: str, bootstrap: str, topic: str) -> tuple[Any, dict[str, str]]:
    """The processor of ``kind`` and the options of its ``barriered-kafka`` sink."""
    processor, _ = sink_query(kind, "unused")
    return processor, {"kafka.bootstrap.servers": bootstrap, "topic": topic}


def published(broker: Any, topic: str, kind: str) -> list[tuple[str, int]]:
    """What a ``read_committed`` consumer sees in ``topic``, as sorted (user, number):
    every record (append) or the last per key (update)."""
    pairs = [(r.key.decode(), int(r.value)) for r in broker.read_committed(topic)]
    if kind == "append":
        return sorted(pairs)
    return sorted(dict(pairs).items())

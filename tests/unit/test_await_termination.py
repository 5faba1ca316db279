"""barriered.await_termination waits for the query, then for its coordinator (no Spark)."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from barriered import api
from barriered.coordinator.listener import BarrieredListener
from barriered.errors import CheckpointError, ConfigError


class FakeQuery:
    def __init__(self, query_id: str, ends: bool = True) -> None:
        self.id = query_id
        self.ends = ends

    def awaitTermination(self, timeout: float | None = None) -> bool | None:
        return self.ends if timeout is not None else None


@pytest.fixture()
def listener(monkeypatch: pytest.MonkeyPatch) -> BarrieredListener:
    lis = BarrieredListener()
    monkeypatch.setattr(api, "_LISTENERS", {1: lis})
    return lis


def event(query_id: str) -> Any:
    return SimpleNamespace(id=query_id)


def test_returns_once_the_listener_handled_the_end(listener: BarrieredListener) -> None:
    listener.onQueryStarted(event("q1"))
    ended = threading.Timer(0.05, listener.onQueryTerminated, args=(event("q1"),))
    ended.start()
    api.await_termination(FakeQuery("q1"), timeout=30)
    assert listener.wait_ended("q1", 0)


def test_times_out_while_the_coordinator_has_not_seen_the_end(
    listener: BarrieredListener,
) -> None:
    listener.onQueryStarted(event("q2"))
    with pytest.raises(CheckpointError, match="coordinator has not finished"):
        api.await_termination(FakeQuery("q2"), timeout=0.05)
    with pytest.raises(CheckpointError, match="still running"):
        api.await_termination(FakeQuery("q2", ends=False), timeout=0.05)


def test_a_query_no_coordinator_saw_is_an_error(listener: BarrieredListener) -> None:
    with pytest.raises(ConfigError, match=r"barriered.install\(spark\) was called"):
        api.await_termination(FakeQuery("unknown"), timeout=1)

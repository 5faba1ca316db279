"""barriered.await_termination waits for the query, then for its coordinator (no Spark)."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from barriered import api, session
from barriered.coordinator.listener import BarrieredListener
from barriered.errors import CheckpointError, ConfigError


class FakeQuery:
    def __init__(self, query_id: str, ends: bool = True, run: str = "r1") -> None:
        self.id = query_id
        self.runId = f"{query_id}-{run}"
        self.ends = ends

    def awaitTermination(self, timeout: float | None = None) -> bool | None:
        return self.ends if timeout is not None else None


@pytest.fixture()
def listener(monkeypatch: pytest.MonkeyPatch) -> BarrieredListener:
    lis = BarrieredListener()
    monkeypatch.setattr(session, "_INSTALLED", {1: (None, lis)})
    return lis


def event(query_id: str, run: str = "r1") -> Any:
    return SimpleNamespace(id=query_id, runId=f"{query_id}-{run}")


def test_returns_once_the_listener_handled_the_end(listener: BarrieredListener) -> None:
    listener.onQueryStarted(event("q1"))
    ended = threading.Timer(0.05, listener.onQueryTerminated, args=(event("q1"),))
    ended.start()
    api.await_termination(FakeQuery("q1"), timeout=30)
    assert listener.wait_ended("q1-r1", 0)


def test_a_restarted_query_waits_for_its_own_run(listener: BarrieredListener) -> None:
    """A query restarted on its checkpoint location keeps its id: the end of its first
    run must not end the wait for the second."""
    listener.onQueryStarted(event("q3", "r1"))
    listener.onQueryTerminated(event("q3", "r1"))
    listener.onQueryStarted(event("q3", "r2"))
    assert listener.running() == ["q3-r2"]
    with pytest.raises(CheckpointError, match=r"run q3-r2\) ended but its checkpoint"):
        api.await_termination(FakeQuery("q3", run="r2"), timeout=0.05)
    ended = threading.Timer(0.05, listener.onQueryTerminated, args=(event("q3", "r2"),))
    ended.start()
    api.await_termination(FakeQuery("q3", run="r2"), timeout=30)
    assert listener.running() == []


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

"""``barriered rescale PATH`` without a running managed handle, or while another request
is pending: refused with the reason, and nothing written (the end-to-end rescale through
a handle is in tests/recovery/test_managed_rescale.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from barriered import cli, wall_time
from barriered.control import rescale_mailbox as mailbox
from barriered.files.fileio import write_json
from barriered.statestore.layout import SnapshotLayout


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture()
def layout(tmp_path: Path) -> SnapshotLayout:
    layout = SnapshotLayout.at(str(tmp_path / "snap"))
    write_json(layout.config_file, {"conf": {"max_parallelism": 8}})
    return layout


def _refused(layout: SnapshotLayout, capsys: pytest.CaptureFixture[str], message: str) -> None:
    root = Path(layout.root)
    before = _files(root)
    assert cli.main(["rescale", layout.root, "--partitions", "4", "--timeout", "5"]) == 1
    assert message in capsys.readouterr().err
    assert _files(root) == before


def test_no_managed_handle_is_refused_and_nothing_written(
    layout: SnapshotLayout, capsys: pytest.CaptureFixture[str]
) -> None:
    _refused(layout, capsys, "no query started by barriered.managed(start, ...) runs on")


def test_a_handle_silent_for_longer_than_its_period_is_no_handle(
    layout: SnapshotLayout, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = wall_time.now_ms() - mailbox.ALIVE_WITHIN_MS - 1000
    mailbox.alive(layout, "q", "r", 2, stale)
    _refused(layout, capsys, "no query started by barriered.managed(start, ...) runs on")


def test_a_pending_request_refuses_another_and_is_kept(
    layout: SnapshotLayout, capsys: pytest.CaptureFixture[str]
) -> None:
    now = wall_time.now_ms()
    mailbox.alive(layout, "q", "r", 2, now)
    mailbox.post(layout, mailbox.RescaleRequest.new(3, now, 60_000))
    _refused(layout, capsys, "a rescale request to 3 partitions is pending")
    kept = mailbox.pending(layout)
    assert kept is not None and kept.partitions == 3


def test_an_answer_is_read_once_by_its_request_id_and_nothing_stays_behind(
    layout: SnapshotLayout,
) -> None:
    request = mailbox.RescaleRequest.new(3, wall_time.now_ms(), 60_000)
    mailbox.post(layout, request)
    assert mailbox.pending(layout) == request
    reply = mailbox.Answer(request.request_id, "refused", error="why")
    mailbox.answer(layout, reply)
    assert mailbox.pending(layout) is None
    assert mailbox.answer_of(layout, request.request_id) == reply
    assert mailbox.answer_of(layout, request.request_id) is None  # read once, then removed
    assert mailbox.answer_of(layout, "other") is None
    assert not list((Path(layout.root) / "_coordinator" / "rescale").iterdir())

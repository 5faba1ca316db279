"""The demo's last lines: where it left its output and the commands that look further
(no Spark)."""

from __future__ import annotations

from pathlib import Path

from barriered.demo import next_steps


def test_the_commands_name_the_mode_with_the_most_completed_checkpoints() -> None:
    done, aborted = {"status": "completed"}, {"status": "aborted"}
    results = {"aligned": [done], "unaligned": [done, done, aborted], "aligned_with_timeout": []}
    plots = [Path("/o/plots/aligned.png"), Path("/o/plots/unaligned.png")]
    assert next_steps(Path("/o"), results, plots).splitlines() == [
        "Snapshot paths (Delta tables), one per mode: /o/snapshots/<mode>",
        "Checkpoint plots: /o/plots/aligned.png, /o/plots/unaligned.png",
        "Look further:",
        "  barriered checkpoints /o/snapshots/unaligned",
        "  barriered ui /o/snapshots/unaligned",
        "  barriered inspect /o/snapshots/unaligned",
        "  barriered inspect /o/snapshots/unaligned --key user-1 --partitions 2",
        "  barriered plot /o/snapshots/unaligned -o unaligned.png",
    ]


def test_without_a_completed_checkpoint_only_the_history_is_named() -> None:
    results = {"aligned": [], "unaligned": [{"status": "aborted"}]}
    assert next_steps(Path("/o"), results, []).splitlines() == [
        "Snapshot paths (Delta tables), one per mode: /o/snapshots/<mode>",
        "Look further:",
        "  barriered checkpoints /o/snapshots/aligned",
        "  barriered ui /o/snapshots/aligned",
    ]

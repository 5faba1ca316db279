"""Where a restore would start, as ``barriered restore-plan`` prints it, after checking
every file it reads (nothing is written)."""

from __future__ import annotations

from barriered.config.source_options import RESTORE_FROM
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.restore_point import resolve


def restore_plan(path: str, source: str) -> str:
    """The restore point ``source`` (``latest``, a checkpoint id or a savepoint folder) of
    the snapshot path ``path``: its files (all checked readable), where each channel
    resumes and what it replays, its operators, and the option that restores it.

    Raises
    ------
    RestoreError
        When the point cannot be resolved or a file it reads is missing or damaged.
    """
    own = source.strip().lower() == "latest" or source.strip().isdigit()
    # A savepoint is planned into any path (a new one, usually); its own checkpoints
    # only into an existing snapshot path.
    layout = (SnapshotLayout.existing if own else SnapshotLayout.configured)(path)
    point = resolve(layout, source, f"restore-plan --from {source!r}")
    point.check_files()
    state = point.state_files()
    inflight = {c: (a, b) for c, a, b in point.inflight}
    by_value = {int(f.partition_values.get("checkpoint_id") or 0) for f in point.inflight_files()}
    lines = [
        f"{point.describe()}: {point.mode}, state table version {point.state_version}",
        f"  state: {len(state)} file(s), {sum(f.size for f in state)} bytes, all readable",
    ]
    for channel, barrier in enumerate(point.barrier):
        line = f"  channel {channel}: resumes at {point.start_positions[channel]}"
        if channel in inflight:
            a, b = inflight[channel]
            how = "from the inflight table" if by_value else "from the upstream"
            line += f", replays [{a}, {b}) {how}, then reads the upstream from {barrier}"
        lines.append(line)
    lines.append(f"  operators: {', '.join(sorted(point.operators())) or 'none'}")
    lines.append(
        f'restore with .option("{RESTORE_FROM.name}", "{source}") and a new checkpointLocation'
    )
    return "\n".join(lines)

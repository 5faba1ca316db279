"""Where one key lives (``barriered inspect PATH --key VALUE``).

The key group of the key (``pmod(hash(key cols), maxParallelism)``, computed from the
key column types the keyed operator recorded on the snapshot path), with
``--partitions N`` the Spark shuffle partition that owns that key group, and the key's
rows in the ``state`` table at a completed checkpoint (the latest by default).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow.compute as pc

from barriered.errors import ConfigError
from barriered.statestore.delta_tables import open_table, read_table
from barriered.statestore.key_groups import (
    key_group_for_key,
    key_types,
    parse_key,
    shuffle_partition,
    spark_hash,
)
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.state_schema import columns_schema
from barriered.tools.history import open_history, retained_ids, select_checkpoint

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KeyLocation:
    """Where a key of a keyed operator lives, and its state at a checkpoint."""

    operator: str
    key: dict[str, str]  # column -> the value as given
    hash: int
    key_group: int
    max_parallelism: int
    partitions: int | None
    partition: int | None
    checkpoint_id: int | None  # None: no completed checkpoint yet
    state_rows: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-able form."""
        return asdict(self)


def _operator(path: str, layout: SnapshotLayout, name: str | None) -> dict[str, Any]:
    specs = layout.registrations()
    names = sorted(specs)
    if not specs:
        raise ConfigError(f"{path!r} has no keyed operator (no _coordinator/operators/*.json)")
    if name is None and len(specs) > 1:
        raise ConfigError(
            f"{path!r} has the keyed operators {names}: choose one with --operator NAME"
        )
    if name is not None and name not in specs:
        raise ConfigError(f"{path!r} has no keyed operator {name!r}; it has {names}")
    return dict(specs[name if name is not None else names[0]])


def _split(texts: Sequence[str], columns: int) -> list[str]:
    """One value per ``--key``, or one comma-separated ``--key`` for several columns."""
    if len(texts) == 1 and columns > 1:
        return texts[0].split(",")
    return list(texts)


def locate_key(
    path: str,
    texts: Sequence[str],
    operator: str | None = None,
    partitions: int | None = None,
    checkpoint_id: int | None = None,
    step: Callable[[str], None] = lambda _: None,
) -> KeyLocation:
    """Find the key group, partition and state rows of one key.

    Parameters
    ----------
    path : str
        The snapshot path.
    texts : sequence of str
        The key column values as text, one per key column (or one, comma-separated).
    operator : str, optional
        The keyed operator (default: the only one on the path).
    partitions : int, optional
        ``spark.sql.shuffle.partitions``: also tell which partition owns the key.
    checkpoint_id : int, optional
        Read the state at this completed checkpoint (default: the latest).
    step : callable, optional
        Called with a description before each read.

    Raises
    ------
    barriered.errors.KeyGroupError
        A key column type whose hash is not computed outside Spark, or a value that
        does not parse as its column's type.
    barriered.errors.ConfigError
        No such operator, or several and none chosen.
    barriered.errors.SnapshotStoreError, barriered.errors.CheckpointError
        Not a snapshot path, or no such completed checkpoint.
    """
    step(f"reading the checkpoint history of {path}")
    layout, rows = open_history(path)
    spec = _operator(path, layout, operator)
    types = key_types(str(spec["key_schema"]))
    values = parse_key(_split(texts, len(types)), types)
    max_parallelism = int(spec["max_parallelism"])
    type_names = [t for _, t in types]
    group = key_group_for_key(values, type_names, max_parallelism)
    retained = retained_ids(layout, rows)
    state: list[dict[str, Any]] = []
    cid: int | None = None
    if retained or checkpoint_id is not None:
        row = select_checkpoint(rows, checkpoint_id, retained)
        cid = int(row["checkpoint_id"])
        version = int(row["state_table_version"])
        step(f"reading key group {group} of {spec['operator']} at state version {version}")
        table = open_table(layout.state_table, version, layout.storage_options)
        if table is not None:
            where = (pc.field("operator") == spec["operator"]) & (pc.field("key_group") == group)
            for (name, _), value in zip(types, values, strict=True):
                where = where & (pc.field(name) == value)
            columns = ["key_group", *columns_schema(spec).names, "checkpoint_id"]
            state = read_table(table, columns, where).to_pylist()
    log.debug("key %s of %s: key group %d", values, spec["operator"], group)
    return KeyLocation(
        operator=str(spec["operator"]),
        key={name: text for (name, _), text in zip(types, _split(texts, len(types)), strict=True)},
        hash=spark_hash(values, type_names),
        key_group=group,
        max_parallelism=max_parallelism,
        partitions=partitions,
        partition=None if partitions is None else shuffle_partition(group, partitions),
        checkpoint_id=cid,
        state_rows=state,
    )


def format_location(loc: KeyLocation) -> str:
    """Render :class:`KeyLocation` as the text of ``barriered inspect --key``."""
    key = ", ".join(f"{c}={v}" for c, v in loc.key.items())
    lines = [
        f"key {key} of operator {loc.operator}: key group {loc.key_group} of "
        f"{loc.max_parallelism} (hash {loc.hash})"
    ]
    if loc.partition is not None:
        lines.append(
            f"shuffle partition {loc.partition} of {loc.partitions} "
            f"(spark.sql.shuffle.partitions={loc.partitions})"
        )
    if loc.checkpoint_id is None:
        lines.append("no completed checkpoint yet: no state to show")
    elif not loc.state_rows:
        lines.append(f"checkpoint {loc.checkpoint_id}: no state for this key")
    else:
        lines.append(f"checkpoint {loc.checkpoint_id}: {len(loc.state_rows)} state row(s)")
        lines += [
            "  " + json.dumps(r, sort_keys=True, default=str)
            for r in sorted(loc.state_rows, key=lambda r: json.dumps(r, default=str))
        ]
    return "\n".join(lines)

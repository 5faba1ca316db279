"""Where one key lives (``barriered inspect PATH --key VALUE``).

For a keyed operator: the key group of the key (``pmod(hash(key cols),
maxParallelism)``, computed from the key column types the operator recorded on the
snapshot path), with ``--partitions N`` the Spark shuffle partition that owns that key
group (``key_group * N div maxParallelism``: each partition owns a contiguous range), and
the key's rows in the ``state`` table at a completed checkpoint (the latest by default).

For a Spark operator's state store captured by the JVM provider (``--operator
<op>-<store>``): the key is its partition key's leaf fields in order (a windowed
aggregation's ``window.start``, ``window.end``, then its grouping columns), its key group
``pmod(hash(partition key), maxParallelism)``, its partition ``pmod(hash(partition key),
N)`` (Spark's hash partitioning of the operator, and what a restore into N partitions
loads), and its rows in the store's table at the checkpoint.
"""

from __future__ import annotations

import datetime
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow.compute as pc

from barriered.errors import ConfigError
from barriered.files.fileio import join, list_names, read_json
from barriered.statestore import operators
from barriered.statestore.delta_tables import open_table, read_table
from barriered.statestore.integrity import committed_checkpoints
from barriered.statestore.key_groups import (
    epoch_micros,
    hash_partition,
    key_group_for_key,
    key_types,
    parse_key,
    shuffle_partition,
    spark_hash,
    store_key_types,
)
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.state_schema import columns_schema
from barriered.tools.history import open_history, pick_checkpoint

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


def _stores(layout: SnapshotLayout) -> dict[str, dict[str, Any]]:
    """The Spark operator stores the JVM provider registered on the path, by name."""
    folder = layout.stores_dir
    found = (read_json(join(folder, n)) for n in list_names(folder) if n.endswith(".json"))
    return {str(s["operator"]): dict(s) for s in found if s}


def _operator(
    path: str, layout: SnapshotLayout, name: str | None, stores: list[str]
) -> dict[str, Any]:
    specs = layout.registrations()
    names = sorted(specs)
    also = f" and the Spark operator stores {stores}" if stores else ""
    if not specs:
        if stores:
            raise ConfigError(
                f"{path!r} has no keyed operator; it has the Spark operator stores {stores}: "
                "choose one with --operator NAME"
            )
        raise ConfigError(f"{path!r} has no keyed operator (no _coordinator/operators/*.json)")
    if name is None and len(specs) > 1:
        raise ConfigError(
            f"{path!r} has the keyed operators {names}{also}: choose one with --operator NAME"
        )
    if name is not None and name not in specs:
        raise ConfigError(f"{path!r} has no keyed operator {name!r}; it has {names}{also}")
    return dict(specs[name if name is not None else names[0]])


def _store_rows(
    layout: SnapshotLayout,
    name: str,
    checkpoint_id: int,
    hash_value: int,
    group: int,
    match: Callable[[dict[str, Any]], bool],
) -> list[dict[str, Any]]:
    """The rows of store ``name``'s table at ``checkpoint_id`` whose key ``match``es."""
    committed = committed_checkpoints(layout).get(checkpoint_id)
    version = operators.stores_of(committed[1] if committed else {}).get(name, {}).get("version")
    table = (
        None
        if version is None
        else open_table(layout.operator_table(name), int(version), layout.storage_options)
    )
    if table is None:
        return []
    where = (pc.field("key_group") == group) & (pc.field("hash") == hash_value)
    columns = ["key_group", "store_partition", "hash", "key", "value"]
    return [r for r in read_table(table, columns, where).to_pylist() if match(r["key"])]


def _leaves(key: dict[str, Any], names: Sequence[str]) -> list[Any]:
    """The values of the dotted leaf fields ``names`` of a key struct (a dict)."""
    out = []
    for name in names:
        value: Any = key
        for part in name.split("."):
            value = None if value is None else value.get(part)
        out.append(value)
    return out


def _locate_in_store(
    layout: SnapshotLayout,
    rows: list[dict[str, Any]],
    store: dict[str, Any],
    texts: Sequence[str],
    partitions: int | None,
    checkpoint_id: int | None,
    step: Callable[[str], None],
) -> KeyLocation:
    name = str(store["operator"])
    key_schema = json.loads(str(store["key_schema"]))
    columns = int(store.get("partition_key_columns") or len(key_schema["fields"]))
    types = store_key_types(key_schema, columns)
    given = _split(texts, len(types))
    values = parse_key(given, types)
    type_names = [t for _, t in types]
    hashed = spark_hash(values, type_names)
    conf = (read_json(layout.config_file, default=None) or {}).get("conf", {})
    max_parallelism = int(conf["max_parallelism"])
    group = hashed % max_parallelism
    partition = None if partitions is None else hash_partition(hashed, partitions)
    row = pick_checkpoint(layout, rows, checkpoint_id, required=False)
    state: list[dict[str, Any]] = []
    cid: int | None = None
    if row is not None:
        cid = int(row["checkpoint_id"])
        step(f"reading key group {group} of store {name} at checkpoint {cid}")
        wanted = [_comparable(v) for v in values]
        names = [n for n, _ in types]
        state = _store_rows(
            layout,
            name,
            cid,
            hashed,
            group,
            lambda key: [_comparable(v) for v in _leaves(key, names)] == wanted,
        )
    log.debug("key %s of store %s: hash %d, key group %d", values, name, hashed, group)
    return KeyLocation(name, dict(zip([n for n, _ in types], given, strict=True)), hashed,
                       group, max_parallelism, partitions, partition, cid, state)  # fmt: skip


def _comparable(value: Any) -> Any:
    """Timestamps as microseconds since the epoch (a naive one read as UTC)."""
    return epoch_micros(value) if isinstance(value, datetime.datetime) else value


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
        The keyed operator (default: the only one on the path), or a Spark operator's
        state store captured by the JVM provider (``<op>-<store>``, e.g. ``0-default``;
        default on a path without keyed operators: its only store).
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
    stores = _stores(layout)
    if operator is None and len(stores) == 1 and not layout.registrations():
        operator = next(iter(stores))  # the path's only state: one Spark operator store
    if operator is not None and operator in stores and operator not in layout.registrations():
        return _locate_in_store(
            layout, rows, stores[operator], texts, partitions, checkpoint_id, step
        )
    spec = _operator(path, layout, operator, sorted(stores))
    types = key_types(str(spec["key_schema"]))
    values = parse_key(_split(texts, len(types)), types)
    max_parallelism = int(spec["max_parallelism"])
    type_names = [t for _, t in types]
    group = key_group_for_key(values, type_names, max_parallelism)
    row = pick_checkpoint(layout, rows, checkpoint_id, required=False)
    state: list[dict[str, Any]] = []
    cid: int | None = None
    if row is not None:
        cid = int(row["checkpoint_id"])
        version = int(row["state_table_version"])
        step(f"reading key group {group} of {spec['operator']} at state version {version}")
        table = open_table(layout.state_table, version, layout.storage_options)
        if table is not None:
            where = (pc.field("operator") == spec["operator"]) & (pc.field("key_group") == group)
            for (name, _), value in zip(types, values, strict=True):
                where = where & (pc.field(name) == value)
            columns = ["key_group", *columns_schema(spec).names, "checkpoint_id"]
            predicate = f"operator = '{spec['operator']}' AND key_group = {group}"
            state = read_table(table, columns, where, predicate).to_pylist()
    log.debug("key %s of %s: key group %d", values, spec["operator"], group)
    return KeyLocation(
        operator=str(spec["operator"]),
        key={name: text for (name, _), text in zip(types, _split(texts, len(types)), strict=True)},
        hash=spark_hash(values, type_names),
        key_group=group,
        max_parallelism=max_parallelism,
        partitions=partitions,
        partition=None
        if partitions is None
        else shuffle_partition(group, partitions, max_parallelism),
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

"""A keyed operator's state on restore: its files in the ``state`` table.

With ``restoreFrom`` the source puts the restored checkpoint (snapshot path, id, state
table version) in the metadata of the ``_barrier`` column. ``barriered.keyed(...)
.process(...)`` then checks that the processor matches the operator that wrote the
snapshot (key columns and types; state fields may evolve:
:mod:`barriered.statestore.evolution`), and lists the operator's files at that version
with the key groups each may hold and its deletion vector (the Delta log only; no data
is read on the driver). The operator carries that list to the executors, where each
partition reads the keys it needs from the files of its key groups, in whichever Spark
partition owns them now, so the number of partitions is free. Files of the earlier
layout (one file per key group, the key group a partition column) restore the same way.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, cast

from pyspark.sql.types import StructType, _parse_datatype_string

from barriered.errors import RestoreError
from barriered.files.fileio import exists, join, read_json
from barriered.statestore.evolution import check_defaults, compare
from barriered.statestore.keyed import OperatorSpec, Restored
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.live_manifest import RestoredFile
from barriered.statestore.state_files import KEY_GROUP
from barriered.statestore.state_log import LiveFile, StateFiles
from barriered.statestore.state_schema import struct_schema

log = logging.getLogger(__name__)


def _schema(ddl: str) -> StructType:
    return cast(StructType, _parse_datatype_string(ddl))


def check_operator(
    spec: OperatorSpec,
    registered: Mapping[str, Any] | None,
    where: str,
    defaults: Mapping[str, Any] | None = None,
    same_path: bool = False,
) -> None:
    """Refuse a processor whose keys differ from the snapshot's operator, or whose state
    fields changed in a way a restore cannot convert (:mod:`barriered.statestore.evolution`).

    Parameters
    ----------
    spec : OperatorSpec
        The restoring operator.
    registered : mapping or None
        The snapshot's registration of the operator (None: it had none, nothing to check).
    where : str
        The restored checkpoint, for messages.
    defaults : mapping, optional
        The processor's ``state_defaults`` (values of added fields).
    same_path : bool, default False
        Whether the restore is into the snapshot's own path (no type widening there).

    Raises
    ------
    RestoreError
        Naming the operator, what differs (both values) and what to do.
    ConfigError
        When ``defaults`` name an unknown field or a value of the wrong type.
    """
    new_state = struct_schema(spec.to_dict()["state_type"])
    check_defaults(defaults or {}, new_state, spec.operator)
    if registered is None:
        return
    problems = []
    if list(registered["key_columns"]) != list(spec.key_columns):
        problems.append(
            f"key columns were {list(registered['key_columns'])}, now {list(spec.key_columns)}"
        )
    elif _schema(str(registered["key_schema"])) != _schema(spec.key_schema):
        problems.append(f"key types were '{registered['key_schema']}', now '{spec.key_schema}'")
    evolution = compare(struct_schema(registered["state_type"]), new_state)
    problems.extend(evolution.refused)
    if same_path:
        problems.extend(
            f"field {name!r} was {old}, now {new}: widening a type needs a restore into a new "
            "snapshotPath (this path's state table keeps the old type)"
            for name, old, new in evolution.widened
        )
    if problems:
        raise RestoreError(
            f"cannot restore operator {spec.operator!r} from {where}: "
            + "; ".join(problems)
            + f" (the state schema was '{registered['state_schema']}', the processor "
            f"declares '{spec.state_schema}'). Nothing was written. Keyed state "
            "restores into the same key columns and types; state fields may be added "
            "(state_defaults on the processor), removed or widened. Change the processor "
            "back, transform the state offline (barriered savepoint transform), or give the "
            "operator another name (process(..., name=...)) to start it empty"
        )
    if evolution.changed:
        log.info(
            "restore: operator %s evolves its state from %s: added %s, removed %s, widened %s",
            spec.operator,
            where,
            list(evolution.added),
            list(evolution.removed),
            [w[0] for w in evolution.widened],
        )


def _claimable(restored: Mapping[str, LiveFile], current: Mapping[str, LiveFile]) -> bool:
    """Whether the table's current version holds an operator's files exactly as the
    restored version did (the same files, the same rows deleted): nothing was committed
    for it since, so the restored files are its state in this table too."""
    if restored.keys() != current.keys():
        return False
    return all(f.dv == current[p].dv for p, f in restored.items())


def _run_vector(f: LiveFile, table: str) -> dict[str, Any] | None:
    """The deletion vector a restored run carries: inline, or its file by its absolute
    path (read on any executor, cached there; a few hundred bytes in the manifest
    however many rows it deletes). The partition reports the file at every cut while
    the run reads it, so retention keeps it (:mod:`barriered.statestore.dv_files`)."""
    return None if f.dv is None else f.dv.absolute(table).to_json()


def restored_files(
    restore: Mapping[str, Any],
    spec: OperatorSpec,
    defaults: Mapping[str, Any] | None = None,
    same_path: bool = False,
) -> Restored:
    """Return the operator's files at the restored checkpoint.

    Parameters
    ----------
    restore : mapping
        ``{"root", "checkpoint_id", "state_version"}`` from the source's metadata.
    spec : OperatorSpec
        The operator being restored.
    defaults : mapping, optional
        Values of state fields the snapshot's operator lacks (``state_defaults``).
    same_path : bool, default False
        Whether the restore is into the snapshot's own path.

    Raises
    ------
    RestoreError
        When the processor does not match the snapshot's operator.
    """
    origin = SnapshotLayout.configured(str(restore["root"]))
    cid, version = int(restore["checkpoint_id"]), int(restore["state_version"])
    where = f"checkpoint {cid} of {origin.root!r}"
    registered = read_json(origin.operator_file(spec.operator), default=None)
    check_operator(spec, registered, where, defaults, same_path)
    files = []
    claim = same_path  # no state table: nothing to restore, nothing to replace
    if exists(join(origin.state_table, "_delta_log")):

        def operator_files(version: int | None) -> dict[str, LiveFile]:
            files = StateFiles(origin.state_table, version).files.values()
            return {f.path: f for f in files if f.partition_values.get("operator") == spec.operator}

        restored = operator_files(version)
        claim = same_path and _claimable(restored, operator_files(None))
        claim &= all(KEY_GROUP not in f.partition_values for f in restored.values())
        for f in restored.values():
            old = f.partition_values.get(KEY_GROUP)  # the earlier layout
            stats = json.loads(f.stats) if f.stats else {}
            lo = stats.get("minValues", {}).get(KEY_GROUP, 0 if old is None else old)
            hi = stats.get("maxValues", {}).get(KEY_GROUP, spec.max_parallelism - 1)
            files.append(
                RestoredFile(
                    join(origin.state_table, f.path),
                    int(lo) if old is None else int(old),
                    int(hi) if old is None else int(old),
                    None if old is None else int(old),
                    _run_vector(f, origin.state_table),
                    f.path if claim else None,
                )
            )
    log.info(
        "restore: operator %s reads %d file(s) of %s (state version %d) on the executors%s",
        spec.operator,
        len(files),
        where,
        version,
        "; they stay its table files (claimed)"
        if claim
        else "; its first checkpoint writes the whole state",
    )
    return Restored(cid, tuple(files), claim, dict(defaults or {}))

"""A keyed operator's state on restore: its files in the ``state`` table, per key group.

With ``restoreFrom`` the source puts the restored checkpoint (snapshot path, id, state
table version) in the metadata of the ``_barrier`` column. ``barriered.keyed(...)
.process(...)`` then checks that the processor matches the operator that wrote the
snapshot (key columns, key types, state schema) and that the snapshot is typed, and
lists the operator's files at that version per key group (Delta metadata only; no data
is read on the driver). The operator carries that list to the executors, where each key
group reads its own Parquet file on its first call, in whichever Spark partition owns it
now, so the number of partitions is free.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, cast

from pyspark.sql.types import StructType, _parse_datatype_string

from barriered.errors import RestoreError
from barriered.statestore.delta_tables import current_files, open_table
from barriered.statestore.fileio import join, read_json
from barriered.statestore.keyed import OperatorSpec, RestoredFiles
from barriered.statestore.layout import SnapshotLayout

log = logging.getLogger(__name__)


def _schema(ddl: str) -> StructType:
    return cast(StructType, _parse_datatype_string(ddl))


def check_operator(spec: OperatorSpec, registered: Mapping[str, Any] | None, where: str) -> None:
    """Refuse a processor whose keys or state schema differ from the snapshot's operator.

    Raises
    ------
    RestoreError
        Naming the operator, what differs (both values) and what to do.
    """
    if registered is None:
        return
    problems = []
    if list(registered["key_columns"]) != list(spec.key_columns):
        problems.append(
            f"key columns were {list(registered['key_columns'])}, now {list(spec.key_columns)}"
        )
    elif _schema(str(registered["key_schema"])) != _schema(spec.key_schema):
        problems.append(f"key types were '{registered['key_schema']}', now '{spec.key_schema}'")
    if _schema(str(registered["state_schema"])) != _schema(spec.state_schema):
        problems.append(
            f"the state schema was '{registered['state_schema']}', the processor declares "
            f"'{spec.state_schema}'"
        )
    if problems:
        raise RestoreError(
            f"cannot restore operator {spec.operator!r} from {where}: "
            + "; ".join(problems)
            + ". Keyed state can only be restored into the same keys and state schema: "
            "change the processor back, or give it another name (process(..., name=...)) "
            "to start it empty"
        )


def restored_files(restore: Mapping[str, Any], spec: OperatorSpec) -> RestoredFiles:
    """Return the operator's snapshot files per key group at the restored checkpoint.

    Parameters
    ----------
    restore : mapping
        ``{"root", "checkpoint_id", "state_version"}`` from the source's metadata.
    spec : OperatorSpec
        The operator being restored.

    Raises
    ------
    RestoreError
        When the processor does not match the snapshot's operator.
    """
    origin = SnapshotLayout.configured(str(restore["root"]))
    cid, version = int(restore["checkpoint_id"]), int(restore["state_version"])
    where = f"checkpoint {cid} of {origin.root!r}"
    check_operator(spec, read_json(origin.operator_file(spec.operator), default=None), where)
    table = open_table(origin.state_table, version, origin.storage_options)
    by_group: dict[int, list[str]] = {}
    for f in current_files(table) if table is not None else []:
        pv = f["partition_values"]
        if pv.get("operator") == spec.operator:
            by_group.setdefault(int(pv["key_group"]), []).append(
                join(origin.state_table, f["path"])
            )
    log.info(
        "restore: operator %s loads %d key group(s) of %s (state version %d) on the executors",
        spec.operator,
        len(by_group),
        where,
        version,
    )
    return RestoredFiles(cid, {k: tuple(v) for k, v in by_group.items()})

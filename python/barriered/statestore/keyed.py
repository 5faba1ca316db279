"""The keyed operator: a user processor run per key group, snapshotting at markers.

``barriered.keyed(df, *keys).process(processor)`` groups the stream by ``_key_group``
and runs :class:`KeyedStatefulProcessor` through ``transformWithStateInPandas``. One
call of ``handleInputRows`` sees every row of one key group in one micro-batch: the data
rows go to the user's processor key by key (in ``(_channel, _seq)`` order), then each
marker row of the batch makes the key group write its snapshot and acknowledge it.

Live state sits in Spark's state store: a map state (user key -> user state) per key
group, plus a small value state that counts changes, so that a key group unchanged since
the base checkpoint (the latest completed one) acknowledges without writing a file.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol, cast

import pandas as pd
import pyarrow as pa
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from barriered.datasource.columns import BARRIER, BARRIER_META, CHANNEL, KEY_GROUP, SEQ
from barriered.statestore.acks import (
    Ack,
    DataFile,
    state_participant,
    write_ack,
    write_data_file,
)
from barriered.statestore.layout import SnapshotLayout
from barriered.testing import faults

log = logging.getLogger(__name__)

_META = (CHANNEL, SEQ, BARRIER, BARRIER_META, KEY_GROUP)

#: Schema of the files of the ``state`` table (partition columns are in the path).
STATE_FILE_SCHEMA = pa.schema(
    [("key", pa.string()), ("value", pa.string()), ("checkpoint_id", pa.int64())]
)


class Processor(Protocol):
    """What a user's keyed processor provides.

    Attributes
    ----------
    state_schema : str
        DDL of the per-key state, e.g. ``"total long, count long"``.
    output_schema : str
        DDL of the rows :meth:`process` returns.
    """

    state_schema: str
    output_schema: str

    def process(self, key: tuple[Any, ...], rows: pd.DataFrame, state: KeyState) -> Any:
        """Handle the new rows of one key; return a DataFrame of output rows or None."""
        ...


def _plain(value: Any) -> Any:
    """Turn numpy/pandas scalars into JSON-able Python values."""
    if value is None:
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value != value:  # NaN
        return None
    if isinstance(value, (pd.Timestamp,)):
        return value.isoformat()
    return value


class KeyState:
    """The state of one key, as handed to :meth:`Processor.process`.

    ``get()`` returns a dict (field name -> value) or None, ``update(dict)`` replaces it,
    ``clear()`` removes it.
    """

    def __init__(self, store: Any, key: tuple[Any, ...], fields: list[str]) -> None:
        self._store = store
        self._key = key
        self._fields = fields
        self.changed = False

    def get(self) -> dict[str, Any] | None:
        """Return this key's state, or None when it has none."""
        value = self._store.getValue(self._key)
        return None if value is None else dict(zip(self._fields, value, strict=True))

    def update(self, value: dict[str, Any]) -> None:
        """Replace this key's state with ``value`` (every state field must be present)."""
        self._store.updateValue(self._key, tuple(_plain(value[f]) for f in self._fields))
        self.changed = True

    def clear(self) -> None:
        """Remove this key's state."""
        self._store.removeKey(self._key)
        self.changed = True


@dataclass(frozen=True)
class OperatorSpec:
    """What identifies a keyed operator on a snapshot path."""

    operator: str
    key_columns: tuple[str, ...]
    key_schema: str  # DDL of the key columns
    state_schema: str
    output_schema: str
    max_parallelism: int
    input_columns: tuple[str, ...] = ()

    def state_fields(self) -> list[str]:
        """Names of the state fields, in DDL order."""
        from pyspark.sql.types import StructType, _parse_datatype_string

        schema = cast(StructType, _parse_datatype_string(self.state_schema))
        return [f.name for f in schema.fields]

    def to_dict(self) -> dict[str, Any]:
        """JSON form, as registered under ``_coordinator/operators``."""
        return {
            "operator": self.operator,
            "key_columns": list(self.key_columns),
            "key_schema": self.key_schema,
            "state_schema": self.state_schema,
            "output_schema": self.output_schema,
            "max_parallelism": self.max_parallelism,
        }


class KeyedStatefulProcessor(StatefulProcessor):
    """Runs a user :class:`Processor` for one key group and snapshots it at markers."""

    def __init__(self, spec: OperatorSpec, processor: Processor) -> None:
        self.spec = spec
        self.processor = processor
        self._fields = spec.state_fields()

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.values = handle.getMapState("values", self.spec.key_schema, self.spec.state_schema)
        self.meta = handle.getValueState("meta", "mod_count long, snapshots string")

    # -- bookkeeping of changes --------------------------------------------------------

    def _load_meta(self) -> tuple[int, dict[str, int]]:
        raw = self.meta.get()
        if raw is None:
            return 0, {}
        return int(raw[0]), json.loads(raw[1])

    def _save_meta(self, mod_count: int, snapshots: dict[str, int]) -> None:
        self.meta.update((mod_count, json.dumps(snapshots, sort_keys=True)))

    # -- the batch -----------------------------------------------------------------------

    def handleInputRows(  # type: ignore[override]
        self, key: tuple[Any, ...], rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        key_group = int(key[0])
        batch = pd.concat(list(rows), ignore_index=True)
        # PySpark renames columns that start with "_" (namedtuple rules): restore names.
        batch.columns = list(self.spec.input_columns)
        is_marker = batch[BARRIER].notna()
        data = batch[~is_marker]
        mod_count, snapshots = self._load_meta()
        outputs: list[pd.DataFrame] = []
        if len(data):
            changed = False
            data = data.sort_values([CHANNEL, SEQ], kind="stable")
            user_rows = data[[c for c in data.columns if c not in _META]].reset_index(drop=True)
            cols = list(self.spec.key_columns)
            # Positions per key (ascending, so in (_channel, _seq) order), then one row
            # selection per key: iterating a pandas groupby builds and copies every group.
            groups = data.groupby(cols, sort=False, dropna=False).indices
            for user_key, positions in groups.items():
                key_tuple = tuple(
                    _plain(v) for v in (user_key if isinstance(user_key, tuple) else (user_key,))
                )
                state = KeyState(self.values, key_tuple, self._fields)
                out = self.processor.process(
                    key_tuple, user_rows.iloc[positions].reset_index(drop=True), state
                )
                changed = changed or state.changed
                if out is not None and len(out):
                    outputs.append(out)
            if changed:
                mod_count += 1
        markers = batch[is_marker].sort_values(BARRIER)
        for checkpoint_id, meta_json in zip(markers[BARRIER], markers[BARRIER_META], strict=True):
            self._snapshot(
                key_group, int(checkpoint_id), json.loads(meta_json), mod_count, snapshots
            )
        self._save_meta(mod_count, snapshots)
        if outputs:
            # One frame per key group and batch: every yielded frame is a separate Arrow
            # batch to the JVM, which costs far more than this concat.
            yield pd.concat(outputs, ignore_index=True)

    def _snapshot(
        self,
        key_group: int,
        checkpoint_id: int,
        meta: dict[str, Any],
        mod_count: int,
        snapshots: dict[str, int],
    ) -> None:
        layout = SnapshotLayout.at(meta["path"])
        base = meta.get("base")
        participant = state_participant(self.spec.operator, key_group)
        epoch = meta.get("epoch")
        if base is not None and snapshots.get(str(base)) == mod_count:
            ack = Ack(checkpoint_id, participant, changed=False, epoch=epoch)
        else:
            keys: list[str] = []
            values: list[str] = []
            key_names = self.spec.key_columns
            for k, v in self.values.iterator():
                keys.append(json.dumps(dict(zip(key_names, map(_plain, k), strict=True))))
                values.append(json.dumps(dict(zip(self._fields, map(_plain, v), strict=True))))
            files: tuple[DataFile, ...] = ()
            if keys:
                table = pa.table(
                    {"key": keys, "value": values, "checkpoint_id": [checkpoint_id] * len(keys)},
                    schema=STATE_FILE_SCHEMA,
                )
                files = (
                    write_data_file(
                        layout.state_table,
                        {"operator": self.spec.operator, "key_group": str(key_group)},
                        f"ckpt-{checkpoint_id}",
                        table,
                    ),
                )
                detail = {"participant": participant, "files": [f.path for f in files]}
                faults.hit(layout, faults.STATE_SNAPSHOT, checkpoint_id, detail=detail)
            ack = Ack(
                checkpoint_id,
                participant,
                changed=True,
                files=files,
                rows=len(keys),
                bytes=sum(f.size for f in files),
                epoch=epoch,
            )
        write_ack(layout, ack)
        snapshots[str(checkpoint_id)] = mod_count
        for old in [k for k in snapshots if base is not None and int(k) < int(base)]:
            del snapshots[old]
        log.debug(
            "checkpoint %d: key group %d of %s acknowledged (changed=%s, rows=%d)",
            checkpoint_id,
            key_group,
            self.spec.operator,
            ack.changed,
            ack.rows,
        )

    def handleInitialState(  # type: ignore[override]
        self, key: tuple[Any, ...], initialState: pd.DataFrame, timerValues: TimerValues
    ) -> None:
        """Load a key group's state from a restored snapshot (rows: key, value JSON)."""
        for k, v in zip(initialState["key"], initialState["value"], strict=True):
            kd, vd = json.loads(k), json.loads(v)
            self.values.updateValue(
                tuple(kd[c] for c in self.spec.key_columns), tuple(vd[f] for f in self._fields)
            )

    def close(self) -> None:
        pass

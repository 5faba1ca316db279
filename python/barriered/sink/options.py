"""The options of the "barriered-delta" sink, parsed and checked (declared in config.py)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from barriered.config import PREFIX, SINK_OPTIONS, closest
from barriered.datasource.options import SESSION_CONF_OPTION
from barriered.errors import ConfigError
from barriered.statestore.fileio import to_local_or_uri
from barriered.statestore.storage import register

APPEND = "append"
UPDATE = "update"
#: Options Spark itself reads and hands on to every sink (lower case).
SPARK_OPTIONS = frozenset({"checkpointlocation", "queryname"})


def _columns(value: Any) -> tuple[str, ...]:
    return tuple(c.strip() for c in str(value or "").split(",") if c.strip())


@dataclass(frozen=True)
class SinkSettings:
    """The parsed options of one barriered-delta sink.

    Attributes
    ----------
    path : str
        The output Delta table.
    snapshot_path : str
        The snapshot path of the query's barriered source.
    mode : str
        ``"append"`` or ``"update"``.
    key_columns : tuple of str
        Merge keys of mode update.
    partition_by : tuple of str
        Partition columns of the output table.
    sink_id : str
        Name under ``_sink/`` and of the app transaction.
    adopt_table : bool
        Take over an existing table no barriered-delta sink owns (:mod:`barriered.sink.owner`).
    storage_options : Mapping[str, str]
        The session's ``snapshotStorageOptions``, for the stores of ``snapshot_path`` and
        ``path`` (:meth:`register_storage`); in no file, no ``repr``.
    """

    path: str
    snapshot_path: str
    mode: str = APPEND
    key_columns: tuple[str, ...] = ()
    partition_by: tuple[str, ...] = ()
    sink_id: str = ""
    adopt_table: bool = False
    storage_options: Mapping[str, str] = dataclasses.field(
        default_factory=dict, repr=False, compare=False, hash=False
    )

    def register_storage(self) -> None:
        """Register :attr:`storage_options` in this process for the stores of the
        snapshot path and the output table (:func:`barriered.statestore.storage.register`)."""
        if self.storage_options:
            for uri in {self.snapshot_path, self.path}:
                register(uri, self.storage_options)

    @property
    def app_id(self) -> str:
        """The Delta app transaction id of this sink's commits."""
        return f"barriered.sink.{self.sink_id}"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (kept in each staged batch)."""
        return {
            "path": self.path,
            "snapshot_path": self.snapshot_path,
            "mode": self.mode,
            "key_columns": list(self.key_columns),
            "partition_by": list(self.partition_by),
            "sink_id": self.sink_id,
            "adopt_table": self.adopt_table,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SinkSettings:
        """Parse the JSON form."""
        return cls(
            path=str(d["path"]),
            snapshot_path=str(d["snapshot_path"]),
            mode=str(d.get("mode", APPEND)),
            key_columns=tuple(d.get("key_columns", ())),
            partition_by=tuple(d.get("partition_by", ())),
            sink_id=str(d["sink_id"]),
            adopt_table=bool(d.get("adopt_table", False)),
        )

    def check_columns(self, columns: list[str]) -> None:
        """Refuse key or partition columns the output does not have.

        Raises
        ------
        ConfigError
            Naming the option, the missing columns and the output's columns.
        """
        for option, wanted in (
            ("keyColumns", self.key_columns),
            ("partitionBy", self.partition_by),
        ):
            missing = [c for c in wanted if c not in columns]
            if missing:
                raise ConfigError(
                    f"barriered-delta sink option {option!r} names {missing}, which the "
                    f"query's output does not have (its columns: {columns})"
                )
        if len(self.partition_by) >= len(columns):
            raise ConfigError(
                "barriered-delta sink option 'partitionBy' names every output column; "
                "keep at least one column out of the partitioning"
            )


def _did_you_mean(name: str) -> str:
    match = closest(name, SINK_OPTIONS)
    return "" if match is None else f" (did you mean {match!r}?)"


def parse(options: Mapping[str, str]) -> SinkSettings:
    """Parse the sink's options (case-insensitive names, as PySpark passes them).

    Raises
    ------
    ConfigError
        For an unknown option (with a suggestion), a bad value, no ``path`` or snapshot
        path, mode update without ``keyColumns`` or mode append with them.
    """
    by_lower = {name.lower(): key for name, key in SINK_OPTIONS.items()}
    values: dict[str, Any] = {}
    session: dict[str, str] = {}
    problems = []
    for name, raw in options.items():
        if name.lower() == SESSION_CONF_OPTION:
            session = json.loads(raw or "{}")
            continue
        if name.lower() in SPARK_OPTIONS:
            continue
        key = by_lower.get(name.lower())
        if key is None:
            problems.append(f"unknown barriered-delta sink option {name!r}{_did_you_mean(name)}")
            continue
        values[key.field] = key.parse(raw, f"barriered-delta sink option {key.name!r}")
    if problems:
        raise ConfigError(
            "; ".join(problems) + f". Options: {', '.join(SINK_OPTIONS)} (Spark hands the "
            "sink the option names lower-cased, so they are quoted that way)"
        )
    if values.get("snapshot_path") is None and session.get(PREFIX + "snapshotPath"):
        values["snapshot_path"] = session[PREFIX + "snapshotPath"]
    for field, what in (("path", "path (or start(path))"), ("snapshot_path", "snapshotPath")):
        if not values.get(field):
            raise ConfigError(
                f"the barriered-delta sink needs the option {what}"
                + (
                    ": the snapshot path of the query's barriered source (or the session "
                    f"key {PREFIX}snapshotPath, with barriered.install(spark))"
                    if field == "snapshot_path"
                    else ": the output Delta table"
                )
            )
    path = to_local_or_uri(str(values["path"]))
    mode = str(values.get("mode") or APPEND)
    keys = _columns(values.get("key_columns"))
    if mode == UPDATE and not keys:
        raise ConfigError(
            "barriered-delta sink mode 'update' merges by key: set the option keyColumns "
            "(e.g. .option('keyColumns', 'user_id'))"
        )
    if mode == APPEND and keys:
        raise ConfigError(
            "barriered-delta sink option keyColumns is only for mode 'update' (a merge by "
            "key); drop it, or set .option('mode', 'update')"
        )
    sink_id = str(values.get("sink_id") or path.rstrip("/").rsplit("/", 1)[-1])
    if not sink_id.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise ConfigError(
            f"barriered-delta sink id {sink_id!r} (option sinkId, default the output "
            "folder's name) may hold only letters, digits, '-', '_' and '.'; set sinkId"
        )
    settings = SinkSettings(
        path=path,
        snapshot_path=to_local_or_uri(str(values["snapshot_path"])),
        mode=mode,
        key_columns=keys,
        partition_by=_columns(values.get("partition_by")),
        sink_id=sink_id,
        adopt_table=bool(values.get("adopt_table", False)),
        storage_options=json.loads(session.get(PREFIX + "snapshotStorageOptions") or "{}"),
    )
    settings.register_storage()
    return settings

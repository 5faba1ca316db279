"""The options of the "barriered-delta" sink, parsed and checked (declared in
:mod:`barriered.config.sink_options`)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from barriered.config import SNAPSHOT_PATH, SNAPSHOT_STORAGE_OPTIONS
from barriered.config.sink_options import (
    ADOPT_TABLE,
    APPEND,
    KEY_COLUMNS,
    MODE,
    PARTITION_BY,
    PATH,
    SINK_ID,
    SINK_OPTIONS,
    SNAPSHOT_PATH_OPTION,
    SPARK_OPTIONS,
    UPDATE,
)
from barriered.config.source_options import SESSION_CONF_OPTION
from barriered.errors import ConfigError
from barriered.files.fileio import to_local_or_uri
from barriered.files.storage import register
from barriered.files.storage_options import check_option_names
from barriered.spelling import closest


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
        """Register :attr:`storage_options` in this process for the output table, and for
        the snapshot path when there are some (without, the snapshot path keeps what its
        source registered) (:func:`barriered.files.storage.register`). The table
        gets exactly these, none when there are none: never those another query
        registered for its bucket."""
        register(self.path, self.storage_options)
        if self.storage_options and self.snapshot_path != self.path:
            register(self.snapshot_path, self.storage_options)

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
            (KEY_COLUMNS.name, self.key_columns),
            (PARTITION_BY.name, self.partition_by),
        ):
            missing = [c for c in wanted if c not in columns]
            if missing:
                raise ConfigError(
                    f"barriered-delta sink option {option!r} names {missing}, which the "
                    f"query's output does not have (its columns: {columns})"
                )
        if len(self.partition_by) >= len(columns):
            raise ConfigError(
                f"{PARTITION_BY.where} names every output column; "
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
        values[key.field] = key.parse(raw)
    if problems:
        raise ConfigError(
            "; ".join(problems) + f". Options: {', '.join(SINK_OPTIONS)} (Spark hands the "
            "sink the option names lower-cased, so they are quoted that way)"
        )
    if values.get(SNAPSHOT_PATH.field) is None and session.get(SNAPSHOT_PATH.key):
        values[SNAPSHOT_PATH.field] = session[SNAPSHOT_PATH.key]
    for option, what in (
        (PATH, f"{PATH.name} (or start(path)): the output Delta table"),
        (
            SNAPSHOT_PATH_OPTION,
            f"{SNAPSHOT_PATH.name}: the snapshot path of the query's barriered source (or "
            f"the session key {SNAPSHOT_PATH.key}, with barriered.install(spark))",
        ),
    ):
        if not values.get(option.field):
            raise ConfigError(f"the barriered-delta sink needs the option {what}")
    path = to_local_or_uri(str(values[PATH.field]))
    mode = str(values.get(MODE.field) or APPEND)
    keys = _columns(values.get(KEY_COLUMNS.field))
    if mode == UPDATE and not keys:
        raise ConfigError(
            f"barriered-delta sink mode {UPDATE!r} merges by key: set the option "
            f"{KEY_COLUMNS.name} (e.g. .option({KEY_COLUMNS.name!r}, 'user_id'))"
        )
    if mode == APPEND and keys:
        raise ConfigError(
            f"barriered-delta sink option {KEY_COLUMNS.name} is only for mode {UPDATE!r} (a "
            f"merge by key); drop it, or set .option({MODE.name!r}, {UPDATE!r})"
        )
    sink_id = str(values.get(SINK_ID.field) or path.rstrip("/").rsplit("/", 1)[-1])
    if not sink_id.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise ConfigError(
            f"barriered-delta sink id {sink_id!r} (option {SINK_ID.name}, default the output "
            f"folder's name) may hold only letters, digits, '-', '_' and '.'; set {SINK_ID.name}"
        )
    settings = SinkSettings(
        path=path,
        snapshot_path=to_local_or_uri(str(values[SNAPSHOT_PATH.field])),
        mode=mode,
        key_columns=keys,
        partition_by=_columns(values.get(PARTITION_BY.field)),
        sink_id=sink_id,
        adopt_table=bool(values.get(ADOPT_TABLE.field, False)),
        storage_options=json.loads(session.get(SNAPSHOT_STORAGE_OPTIONS.key) or "{}"),
    )
    check_option_names(settings.storage_options, SNAPSHOT_STORAGE_OPTIONS.key)
    settings.register_storage()
    return settings

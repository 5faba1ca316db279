"""Where things live under one snapshot path (see statestore/README.md).

::

    <snapshotPath>/
      _checkpoints/            Delta: one row per finished checkpoint (coordinator)
      state/                   Delta: keyed state, partitioned by operator, key_group
      inflight/                Delta: in-flight records, partitioned by checkpoint_id
      _coordinator/config.json the resolved configuration the source started with
      _coordinator/control.json  what the coordinator tells the source (requests, schedule, ...)
      _coordinator/operators/<op>.json  keyed operators registered on this path
      _coordinator/stores/<op>-<store>.json  Spark state stores the JVM provider captures
      _coordinator/restore/<id>.e<epoch>.json  store files a restored run's provider loads
      operators/<op>-<store>/  Delta: a Spark operator's store, per key_group, store_partition
      _coordinator/tombstones.json  removed files, deleted once no retained checkpoint reads them
      _coordinator/leases/<epoch>-<party>.json  lease of the run with that epoch
      _owners/                 Delta: one row per run that took the path (version = epoch)
      _acks/<id>/<participant>.e<epoch>.json   acknowledgements of checkpoint <id>
      _source/                 the upstream's own manifest (positions of files)
      _sink/<sink>/e<epoch>/<batch>.json  output of a batch staged by the barriered-delta sink
      _savepoint.json          only in a savepoint: which checkpoint it holds
      _rescales/               Delta: one row per rescale of a managed query (barriered.managed)
      _coordinator/managed.json  the managed handle's sign of life (barriered rescale PATH)
      _coordinator/rescale/request.json, <request id>.json  a CLI's rescale request, its answer

The JVM provider writes ``operators/``, ``_coordinator/stores/`` and its ``_acks`` with the
names ``jvm-shim/.../SnapshotPaths.java`` gives them; ``tests/unit/test_snapshot_paths.py``
fails when those differ from the ones here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from barriered.errors import SnapshotStoreError
from barriered.files.fileio import (
    exists,
    folder_problem,
    join,
    list_names,
    read_json,
    to_local_or_uri,
)
from barriered.files.storage import register, registered


@dataclass(frozen=True)
class SnapshotLayout:
    """Paths of the tables and handshake files under one snapshot path."""

    root: str
    #: delta-rs storage options of the Delta tables (``snapshotStorageOptions``).
    storage_options: Mapping[str, str] = field(
        default_factory=dict, compare=False, hash=False, repr=False
    )

    @classmethod
    def at(cls, root: str, storage_options: Mapping[str, str] | None = None) -> SnapshotLayout:
        """Return the layout rooted at ``root`` (made absolute when local), with
        ``storage_options`` registered for its store in this process over those
        registered before (:func:`barriered.files.storage.register`)."""
        root = to_local_or_uri(root)
        return cls(root, register(root, storage_options).delta_options())

    def __reduce__(self) -> tuple[Any, ...]:
        """Unpickled in another process (a Python worker, with the source's reader or a
        sink's writer), a layout registers its store's settings there too: the settings
        travel with Spark's tasks, never in a file."""
        return (SnapshotLayout.at, (self.root, dict(self.storage_options)))

    @classmethod
    def configured(cls, root: str) -> SnapshotLayout:
        """Return the layout with the settings registered in this process for ``root``
        (the query that names it gave them), else the storage options the source
        recorded at start (without their secrets, which come from the environment).

        Raises
        ------
        SnapshotStoreError
            When ``root`` is a file or under a file.
        """
        layout = cls.at(root)
        problem = folder_problem(layout.root)
        if problem is not None:
            raise SnapshotStoreError(
                f"{root!r} {problem}, not a snapshot path: give the folder set as snapshotPath"
            )
        if registered(layout.root) is not None:
            return layout
        stored = read_json(layout.config_file, default=None) or {}
        raw = stored.get("conf", {}).get("snapshot_storage_options") or "{}"
        return cls.at(root, json.loads(raw))

    @classmethod
    def existing(cls, root: str) -> SnapshotLayout:
        """Return the configured layout of an existing snapshot path or savepoint folder.

        Raises
        ------
        SnapshotStoreError
            When ``root`` does not exist, is a file (or under one), or is not a snapshot
            path (no ``_checkpoints`` table and no ``_coordinator/config.json``: an empty
            folder, a Delta table).
        """
        layout = cls.configured(root)
        if not exists(layout.root):
            raise SnapshotStoreError(f"{root!r} does not exist")
        if not layout.is_snapshot_path():
            raise SnapshotStoreError(
                f"{root!r} is not a snapshot path: it has no _checkpoints table and no "
                "_coordinator/config.json (give the folder set as snapshotPath)"
            )
        return layout

    def is_snapshot_path(self) -> bool:
        """Whether a query (or a savepoint) wrote here: a ``_checkpoints`` table or the
        configuration file."""
        return exists(self.checkpoints_table) or exists(self.config_file)

    @property
    def checkpoints_table(self) -> str:
        """The ``_checkpoints`` Delta table."""
        return join(self.root, "_checkpoints")

    @property
    def state_table(self) -> str:
        """The ``state`` Delta table."""
        return join(self.root, "state")

    @property
    def live_dir(self) -> str:
        """Private files of the keyed operators' live state: changes spilled between two
        cuts (``_live/<operator>/``), merged into the next checkpoint's state file."""
        return join(self.root, "_live")

    @property
    def inflight_table(self) -> str:
        """The ``inflight`` Delta table."""
        return join(self.root, "inflight")

    @property
    def owners_table(self) -> str:
        """The ``_owners`` Delta table: one commit per run that took the path."""
        return join(self.root, "_owners")

    def lease_file(self, epoch: int, party: str) -> str:
        """The lease of the run with ``epoch``, renewed by ``party`` (source or query)."""
        return join(self.root, "_coordinator", "leases", f"{epoch}-{party}.json")

    def mirror_file(self, epoch: int, instance: str) -> str:
        """What one instance of a source read more than once in one query writes
        (``plan``: the leading instance's decisions; ``follower-<pid>``: a mirror)."""
        return join(self.root, "_coordinator", "mirror", f"{epoch}-{instance}.json")

    @property
    def config_file(self) -> str:
        """The configuration the source resolved at query start."""
        return join(self.root, "_coordinator", "config.json")

    @property
    def control_file(self) -> str:
        """What the coordinator tells the source: requests, cancels, completions, its
        heartbeat, the schedule and a fatal error (:mod:`barriered.control.record`)."""
        return join(self.root, "_coordinator", "control.json")

    @property
    def legacy_control_files(self) -> tuple[str, str]:
        """The trigger log and the schedule a previous version wrote instead of
        :attr:`control_file` (read while it is absent)."""
        return (
            join(self.root, "_coordinator", "triggers.json"),
            join(self.root, "_coordinator", "schedule.json"),
        )

    @property
    def tombstones_file(self) -> str:
        """Files removed from a table and the version from which on they are unread."""
        return join(self.root, "_coordinator", "tombstones.json")

    def operator_file(self, operator: str) -> str:
        """Registration of keyed operator ``operator``."""
        return join(self.root, "_coordinator", "operators", f"{operator}.json")

    @property
    def stores_dir(self) -> str:
        """Registrations of the Spark state stores the JVM provider captures."""
        return join(self.root, "_coordinator", "stores")

    def operator_table(self, name: str) -> str:
        """The Delta table of one Spark operator's state store (``<op>-<store>``)."""
        return join(self.root, "operators", name)

    def restore_manifest_file(self, checkpoint_id: int, epoch: int | None) -> str:
        """What the JVM provider of a run restored from ``checkpoint_id`` loads."""
        return join(self.root, "_coordinator", "restore", f"{checkpoint_id}.e{epoch}.json")

    @property
    def operators_dir(self) -> str:
        """Folder of operator registrations."""
        return join(self.root, "_coordinator", "operators")

    def registrations(self) -> dict[str, dict[str, Any]]:
        """The keyed operators registered on this path, by name."""
        folder = self.operators_dir
        found = (read_json(join(folder, n)) for n in list_names(folder) if n.endswith(".json"))
        return {str(r["operator"]): r for r in found if r}

    def acks_dir(self, checkpoint_id: int) -> str:
        """Folder of the acknowledgements of one checkpoint."""
        return join(self.root, "_acks", str(checkpoint_id))

    def ack_file(self, checkpoint_id: int, participant: str, epoch: int | None = None) -> str:
        """The acknowledgement of ``participant`` for one checkpoint, written by the run
        with ``epoch`` (runs never overwrite each other's acknowledgements)."""
        suffix = "" if epoch is None else f".e{epoch}"
        return join(self.acks_dir(checkpoint_id), participant.replace("/", "~") + suffix + ".json")

    def sink_dir(self, sink_id: str | None = None) -> str:
        """Folder of the staged batches of every sink (or of ``sink_id``)."""
        base = join(self.root, "_sink")
        return base if sink_id is None else join(base, sink_id)

    def staged_file(self, sink_id: str, epoch: int, batch_id: int) -> str:
        """The record of batch ``batch_id`` staged by ``sink_id`` in the run of ``epoch``."""
        return join(self.sink_dir(sink_id), f"e{epoch}", f"{batch_id:012d}.json")

    @property
    def rescales_table(self) -> str:
        """The ``_rescales`` Delta table: the rescales of a managed query."""
        return join(self.root, "_rescales")

    @property
    def managed_file(self) -> str:
        """The managed handle's sign of life (:mod:`barriered.control.rescale_mailbox`)."""
        return join(self.root, "_coordinator", "managed.json")

    @property
    def rescale_request_file(self) -> str:
        """The pending rescale request of ``barriered rescale``."""
        return join(self.root, "_coordinator", "rescale", "request.json")

    def rescale_answer_file(self, request_id: str) -> str:
        """The managed handle's answer to rescale request ``request_id``."""
        return join(self.root, "_coordinator", "rescale", f"{request_id}.json")

    @property
    def savepoint_file(self) -> str:
        """Present only in a savepoint folder: the checkpoint it holds."""
        return join(self.root, "_savepoint.json")

    @property
    def source_dir(self) -> str:
        """Folder where the upstream keeps its manifest."""
        return join(self.root, "_source")

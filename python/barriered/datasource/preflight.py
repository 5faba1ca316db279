"""The load-time checks of the "barriered" source, runnable in the driver.

A Python data source's ``schema()`` runs in a Python worker; an error raised there
reaches the user wrapped in a long ``PYTHON_DATA_SOURCE_ERROR`` traceback. The checks
that need nothing but the options and the snapshot path (option names and values, the
restore point and its files, the input folder of the ``files`` upstream) are here, in
one function the source itself calls too, so that :func:`barriered.install`'s reader
hook can run them in the driver first and the user gets the project's own error (a
:class:`~barriered.errors.ConfigError` or :class:`~barriered.errors.RestoreError`) with
its message. None of them writes anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from barriered.config import check_restore_compatible
from barriered.config.upstream_options import ARCHIVE_TO, PATH
from barriered.datasource.options import SourceSettings, parse_source_options
from barriered.datasource.upstreams.options import input_path
from barriered.errors import RestoreError
from barriered.files.fileio import read_json
from barriered.files.storage import register, store_of
from barriered.provider import EXTENSION_CLASS
from barriered.sink import rewind
from barriered.statestore import operators
from barriered.statestore.integrity import committed_checkpoints
from barriered.statestore.layout import SnapshotLayout
from barriered.statestore.restore_point import RestorePoint, resolve


def checked(
    options: Mapping[str, str], pinned: Mapping[str, Any] | None = None
) -> tuple[SourceSettings, SnapshotLayout, RestorePoint | None]:
    """Validate the source's options and its restore point; return what they name.

    Parameters
    ----------
    options : Mapping[str, str]
        The options given to ``spark.readStream.format("barriered")`` (with the hidden
        session-configuration option, if any).
    pinned : Mapping or None
        The restore point an earlier call resolved (``root``, ``checkpoint_id``): a run
        still writing the path may have completed a later one since, and the state that
        ``barriered.keyed`` loads is the pinned one's.

    Returns
    -------
    tuple of (SourceSettings, SnapshotLayout, RestorePoint or None)
        The parsed options, the snapshot path and, with ``restoreFrom``, the checked
        restore point.

    Raises
    ------
    ConfigError
        An unknown option (with a suggestion), a bad value or no snapshot path, a
        ``files`` upstream's input folder that does not exist, or a key
        fixed for the life of the snapshot path (``maxParallelism``) that differs from
        the value its previous run recorded.
    RestoreError
        ``restoreFrom`` names no restorable checkpoint, or one whose configuration or
        files do not fit, or one with a watermark on a session without the provider's
        extension, or (:class:`~barriered.errors.SinkRewindError`) a sink's table that
        someone else wrote after it.
    """
    settings = parse_source_options(options)
    register_folders(settings)
    if settings.upstream == "files":
        input_path(settings.upstream_options)
    layout = SnapshotLayout.at(settings.conf.require_snapshot_path(), settings.conf.storage_options)
    previous = read_json(layout.config_file, default=None)
    if previous is not None:  # a restart: refused here, before keyed() registers anything
        check_restore_compatible(previous.get("conf", {}), settings.conf)
    point = None
    if settings.restore_from is not None:
        spec = settings.restore_from
        if pinned is not None and pinned.get("root") == layout.root:
            spec = str(pinned["checkpoint_id"])
        point = resolve(layout, spec)
        point.check_config(settings.conf)
        point.check_files()
        _check_extension(point, settings)
        if point.origin.root == layout.root:  # the sinks' tables can go back to its output
            committed = committed_checkpoints(layout)
            rewind.check(layout, point.checkpoint_id, committed, settings.conf.storage_options)
    return settings, layout, point


def _check_extension(point: RestorePoint, settings: SourceSettings) -> None:
    """Refuse to restore a checkpoint with a watermark without the session extension that
    starts the restored query's operators there (at watermark 0 they would accept records
    the checkpoint's watermark made late, and emit evicted windows again)."""
    watermark = operators.cut_watermark_ms(point.metadata)
    if watermark is None or EXTENSION_CLASS in settings.extensions:
        return
    raise RestoreError(
        f"cannot restore {point.describe()}: its watermark was {watermark} ms, and a restored "
        f"query starts at watermark 0 unless spark.sql.extensions includes {EXTENSION_CLASS} "
        "(it would accept records the checkpoint's watermark made late and emit evicted "
        "windows again). barriered.with_state_store(builder) sets it; on a cluster, add it "
        "to the Spark config next to the state store provider class (jvm-shim/README.md)"
    )


def register_folders(settings: SourceSettings) -> None:
    """Give the upstream's folders (``path``, ``archiveTo``) in the snapshot path's store
    the query's storage settings in this process (:func:`barriered.files.storage.register`):
    the query names them, so they are its paths (its input folder is checked, and read,
    with them)."""
    root = settings.conf.require_snapshot_path()
    for option in (PATH, ARCHIVE_TO):
        folder = option.read_str(settings.upstream_options)
        if folder and store_of(folder) is not None and store_of(folder) == store_of(root):
            register(folder, settings.conf.storage_options)

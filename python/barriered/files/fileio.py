"""Files under the snapshot path: small JSON files written atomically, listing, copying.

The trigger/ack handshake between the coordinator (driver), the source planner (a
Python worker on the driver) and the keyed operator (executors) uses small JSON files:
each is written whole to a temporary name and renamed into place, so a reader sees the
old file or the new one, never half of one, and a crash of any party leaves nothing
half-written behind. Paths may be local folders, mounted volumes (``/Volumes/...``) or
URIs that :mod:`pyarrow.fs` understands, opened with the storage settings of their store
(:mod:`barriered.files.storage`).
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from typing import Any

import pyarrow.fs as pafs

from barriered.errors import SnapshotStoreError
from barriered.files.storage import settings_for

log = logging.getLogger(__name__)

#: Reads of a JSON file on an object store that came back cut off before one is an error:
#: pyarrow's S3 reader asks for the object's size, then GETs that many bytes, so an
#: object replaced in between (a file rewritten in place: the control record)
#: reads as the new object cut at the old length, which is never valid JSON (compact
#: JSON's last byte closes it). Read again, it is whole.
TORN_READ_ATTEMPTS = 10


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """Return the pyarrow filesystem and the path inside it for ``uri``: a local one, or
    the one of the object store with the settings registered for it in this process
    (:mod:`barriered.files.storage`)."""
    if "://" not in uri:
        return pafs.LocalFileSystem(), os.path.abspath(uri)
    return settings_for(uri).filesystem(uri)


def make_parent(fs: pafs.FileSystem, path: str) -> None:
    """Create the folder of file ``path`` (and its parents) on a local file system; on an
    object store nothing: a key needs no folder, and pyarrow's ``create_dir`` would put
    an empty marker object for each level (half the requests of an S3 checkpoint)."""
    if isinstance(fs, pafs.LocalFileSystem):
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)


def join(base: str, *parts: str) -> str:
    """Join path parts with '/', for local paths and URIs alike."""
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])


def write_atomic(uri: str, data: bytes, what: str = "") -> None:
    """Write ``data`` to ``uri`` whole or not at all.

    A local file is written to a temporary name in its folder, flushed to disk (fsync)
    and renamed into place, so a reader or a crash sees the old file or the new one. On
    an object store a single PUT is already all-or-nothing.

    Parameters
    ----------
    uri : str
        A local path or a URI.
    data : bytes
        The whole content.
    what : str, optional
        What the file is, for the error message (default: a file under the snapshot
        path).

    Raises
    ------
    SnapshotStoreError
        When it cannot be written (the message names the file).
    """
    fs, path = filesystem(uri)
    parent, name = path.rsplit("/", 1)
    tmp = f"{parent}/.{name}.{uuid.uuid4().hex}.tmp"
    try:
        make_parent(fs, path)
        if isinstance(fs, pafs.LocalFileSystem):
            with open(tmp, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
        else:
            with fs.open_output_stream(path) as out:
                out.write(data)
    except OSError as exc:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise SnapshotStoreError(
            f"cannot write {what or 'file'} {uri!r}: {exc}. Check that the folder exists "
            "and is writable by the driver and the executors"
        ) from exc


def create_if_absent(uri: str, data: bytes, what: str = "") -> bool:
    """Write ``data`` to ``uri`` only when nothing is there yet; True when it was written.

    The one primitive a log entry needs (a Delta commit is the file of the next version,
    and two writers must never both succeed): a local file is written to a temporary
    name and hard-linked into place (``link`` fails when the name exists), an S3 object
    is PUT with ``If-None-Match: *`` (the server refuses it when the key exists). Other
    stores have no such request in the clients used here: the file is written after an
    existence test and read back, so a writer that lost a race finds another's bytes
    and reports False (a narrow window where both write remains; one run owns a
    snapshot path, :mod:`barriered.statestore.ownership`).

    Raises
    ------
    SnapshotStoreError
        When it cannot be written (the message names the file).
    """
    fs, path = filesystem(uri)
    try:
        if isinstance(fs, pafs.LocalFileSystem):
            make_parent(fs, path)
            parent, name = path.rsplit("/", 1)
            tmp = f"{parent}/.{name}.{uuid.uuid4().hex}.tmp"
            with open(tmp, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
            finally:
                os.remove(tmp)
            return True
        s3 = settings_for(uri).s3_client(uri)
        if s3 is not None:
            bucket, _, key = path.partition("/")
            return bool(s3.put_if_absent(bucket, key, data))
        if fs.get_file_info(path).type != pafs.FileType.NotFound:
            return False
        with fs.open_output_stream(path) as out:
            out.write(data)
        with fs.open_input_stream(path) as f:
            return bool(f.read() == data)
    except OSError as exc:
        raise SnapshotStoreError(f"cannot write {what or 'file'} {uri!r}: {exc}") from exc


def write_json(uri: str, payload: Any) -> None:
    """Write ``payload`` as compact JSON to ``uri`` atomically (:func:`write_atomic`)."""
    write_atomic(uri, json.dumps(payload, sort_keys=True, separators=(",", ":")).encode("utf-8"))


def read_bytes(uri: str, what: str = "") -> bytes | None:
    """The whole content of the file at ``uri``; None when it does not exist.

    Raises
    ------
    SnapshotStoreError
        When it exists but cannot be read (the message names it, and ``what`` it is).
    """
    fs, path = filesystem(uri)
    try:
        with fs.open_input_stream(path, compression=None) as f:
            data: bytes = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        if "not found" in str(exc).lower() or "no such file" in str(exc).lower():
            return None
        raise SnapshotStoreError(f"cannot read {what + ' ' if what else ''}{uri!r}: {exc}") from exc
    return data


def read_json(uri: str, default: Any = None) -> Any:
    """Read a JSON file; return ``default`` when it does not exist.

    On an object store a read that is not valid JSON is made again
    (:data:`TORN_READ_ATTEMPTS` in all): the file was being replaced.

    Raises
    ------
    SnapshotStoreError
        When the file exists but is not valid JSON (the message names the file).
    """
    attempts = TORN_READ_ATTEMPTS if "://" in uri else 1
    for attempt in range(1, attempts + 1):
        raw = read_bytes(uri)
        if raw is None:
            return default
        try:
            return json.loads(raw)
        except ValueError as exc:
            if attempt == attempts:
                raise SnapshotStoreError(
                    f"{uri!r} is corrupt (not valid JSON: {exc}); it was not changed. "
                    "Restore it from a backup or remove the snapshot path's damaged checkpoint"
                ) from exc
            log.info("%s was read while it was replaced (attempt %d): read again", uri, attempt)
            time.sleep(0.01 * attempt)
    raise AssertionError("unreachable")


def list_names(uri: str, folders: bool = False) -> list[str]:
    """Return the names of the (non-temporary) files (or, with ``folders``, the
    sub-folders) directly under folder ``uri``."""
    fs, path = filesystem(uri)
    wanted = pafs.FileType.Directory if folders else pafs.FileType.File
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    except OSError as exc:
        raise SnapshotStoreError(f"cannot list {uri!r}: {exc}") from exc
    return sorted(
        i.base_name for i in infos if i.type == wanted and not i.base_name.startswith(".")
    )


def ensure_dir(uri: str, fix: str = "") -> None:
    """Create folder ``uri`` (and parents); fail clearly when that is impossible, the
    message ending with ``fix`` (what to do, in the caller's terms)."""
    fs, path = filesystem(uri)
    try:
        fs.create_dir(path, recursive=True)
    except OSError as exc:
        raise SnapshotStoreError(
            f"folder {uri!r} cannot be created or written: {exc}" + (f". {fix}" if fix else "")
        ) from exc


def folder_problem(uri: str) -> str | None:
    """Why ``uri`` cannot be a folder: ``"is a file"`` or ``"is under the file '...'"``
    (None: it is a folder, or it does not exist and can be created). Only local paths
    are looked at; an object store has no files in the way of a folder."""
    if "://" in uri and not uri.startswith("file://"):
        return None
    target = path = os.path.abspath(uri.removeprefix("file://"))
    while not os.path.isdir(path):
        if os.path.lexists(path):
            return "is a file" if path == target else f"is under the file {path!r}"
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent
    return None


def to_local_or_uri(uri: str) -> str:
    """Return ``uri`` unchanged for URIs, or an absolute path for local paths."""
    return uri if "://" in uri else os.path.abspath(uri)


def delete_file(uri: str) -> None:
    """Delete one file; a file that is already gone is fine."""
    fs, path = filesystem(uri)
    try:
        fs.delete_file(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        if "not found" not in str(exc).lower() and "no such file" not in str(exc).lower():
            raise SnapshotStoreError(f"cannot delete {uri!r}: {exc}") from exc


def exists(uri: str) -> bool:
    """Return True when a file or folder exists at ``uri``."""
    fs, path = filesystem(uri)
    return bool(fs.get_file_info(path).type != pafs.FileType.NotFound)


def copy_file(source: str, target: str) -> None:
    """Copy one file (between any two file systems), creating the target's folder."""
    src_fs, src = filesystem(source)
    dst_fs, dst = filesystem(target)
    try:
        make_parent(dst_fs, dst)
        pafs.copy_files(src, dst, source_filesystem=src_fs, destination_filesystem=dst_fs)
    except OSError as exc:
        raise SnapshotStoreError(f"cannot copy {source!r} to {target!r}: {exc}") from exc


def copy_tree(source: str, target: str) -> None:
    """Copy the files of folder ``source`` (recursively) into folder ``target``."""
    src_fs, src = filesystem(source)
    if src_fs.get_file_info(src).type == pafs.FileType.NotFound:
        return
    for info in src_fs.get_file_info(pafs.FileSelector(src, recursive=True)):
        if info.type == pafs.FileType.File and not info.base_name.startswith("."):
            copy_file(join(source, info.path[len(src) :]), join(target, info.path[len(src) :]))


def delete_tree(uri: str) -> None:
    """Delete a folder and everything in it; a folder that is already gone is fine."""
    fs, path = filesystem(uri)
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        return
    try:
        fs.delete_dir(path)
    except OSError as exc:
        raise SnapshotStoreError(f"cannot delete {uri!r}: {exc}") from exc

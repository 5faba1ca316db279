"""The ``files`` upstream's input folder on any store: listing, a file's state, reading.

Every operation goes through :func:`barriered.files.fileio.filesystem` (pyarrow's
local filesystem, or an object store's with the settings registered for it), so the
input folder, its archive folder and the manifest may be local paths or URIs
(``s3://bucket/events``). What tells a file that changed after it was recorded apart
depends on what the store offers (:class:`FileState`):

=================  ==================================================================
store              fields compared
=================  ==================================================================
local / mounted    size and modification time in ns (``stat``)
S3 (and others)    size and ``LastModified`` (whole seconds: what S3 returns), at every
                   listing; the ``ETag`` (a hash of the content), recorded at discovery,
                   instead of the time at every read of the file in its place and at a
                   listing that sees only the time change
=================  ==================================================================

A manifest's own :func:`file_signature` (whether the driver's copy is current) is the
inode, time and size of a local file, the ETag, time and size of an object.
"""

from __future__ import annotations

import datetime
import os
import posixpath
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

from barriered.files.fileio import filesystem, make_parent, to_local_or_uri
from barriered.files.storage import store_of

_SECOND = 1_000_000_000


def ignored(name: str) -> bool:
    """Whether a file or folder name is not data: hidden, ``_``-prefixed or ``.tmp``."""
    return name.startswith((".", "_")) or name.endswith(".tmp")


def is_local(uri: str) -> bool:
    """Whether ``uri`` is a local (or mounted) path rather than an object store's."""
    return store_of(uri) is None


def normalize(raw: str) -> str:
    """A folder option as kept: an absolute local path (``~`` expanded), or the URI
    without a trailing ``/``."""
    if raw.startswith("file://"):
        return to_local_or_uri(unquote(urlsplit(raw).path))
    return to_local_or_uri(posixpath.expanduser(raw)) if is_local(raw) else raw.rstrip("/")


def relative_to(child: str, parent: str) -> str | None:
    """``child`` as a path relative to folder ``parent`` (``"."`` for the folder itself),
    or None when it lies elsewhere (another folder, bucket or store)."""
    if store_of(child) != store_of(parent):
        return None
    inside = posixpath.relpath(child, parent)
    return None if inside == ".." or inside.startswith("../") else inside


@dataclass(frozen=True)
class FileState:
    """What the store says of one file now.

    Parameters
    ----------
    size : int
        Bytes.
    mtime_ns : int
        Modification time in ns (whole seconds on an object store).
    etag : str or None
        The object store's ``ETag`` when the file was opened (None: local, or a listing).
    """

    size: int
    mtime_ns: int
    etag: str | None = None


def _state(info: pafs.FileInfo, local: bool, etag: str | None = None) -> FileState:
    mtime = int(info.mtime_ns or 0)
    return FileState(int(info.size or 0), mtime if local else mtime // _SECOND * _SECOND, etag)


def listing(root: str) -> tuple[list[str], dict[str, FileState]]:
    """The visible sub-folders of ``root`` and the visible files in ``root`` and in those
    sub-folders (relative posix paths, with their state), both sorted by name.

    Raises
    ------
    FileNotFoundError
        When ``root`` does not exist.
    """
    fs, base = filesystem(root)
    local = is_local(root)
    top = fs.get_file_info(pafs.FileSelector(base))
    folders: list[str] = []
    files: dict[str, FileState] = {}
    for info in top:
        if ignored(info.base_name):
            continue
        if info.type == pafs.FileType.Directory:
            folders.append(info.base_name)
            inner = pafs.FileSelector(info.path, allow_not_found=True)
            for sub in fs.get_file_info(inner):
                if not ignored(sub.base_name) and sub.type == pafs.FileType.File:
                    files[f"{info.base_name}/{sub.base_name}"] = _state(sub, local)
        elif info.type == pafs.FileType.File:
            files[info.base_name] = _state(info, local)
    return sorted(folders), dict(sorted(files.items()))


def kind(uri: str) -> pafs.FileType:
    """What is at ``uri``: a file, a folder (on an object store: a prefix holding
    objects) or nothing."""
    fs, path = filesystem(uri)
    file_type: pafs.FileType = fs.get_file_info(path).type
    return file_type


def state(location: str) -> FileState | None:
    """The state of the file at ``location`` (None: missing), with its ``ETag`` on an
    object store (one ``HEAD``)."""
    fs, path = filesystem(location)
    try:
        if is_local(location):
            info = fs.get_file_info(path)
            return None if info.type != pafs.FileType.File else _state(info, True)
        with fs.open_input_file(path) as f:
            meta = {k.lower(): v.decode("utf-8", "replace") for k, v in f.metadata().items()}
            size = f.size()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if "not found" in str(exc).lower() or "no such file" in str(exc).lower():
            return None
        raise
    stamp = meta.get("last-modified")
    if stamp is None:
        info = fs.get_file_info(path)
        return _state(info, False, _etag(meta))
    moment = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return FileState(int(size), int(moment.timestamp()) * _SECOND, _etag(meta))


def _etag(meta: dict[str, str]) -> str | None:
    etag = meta.get("etag")
    return None if etag is None else etag.strip('"')


#: What tells a rewritten manifest apart: (inode, mtime_ns, size) of a local file,
#: (ETag, mtime_ns, size) of an object.
Signature = tuple[int | str | None, int, int]


def file_signature(path: str) -> Signature | None:
    """Return the :data:`Signature` of ``path`` (None if missing): detects rewrites."""
    if not is_local(path):
        found = state(path)
        return None if found is None else (found.etag, found.mtime_ns, found.size)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def read_bytes(location: str) -> pa.Buffer:
    """The whole content of a file, decompressed when its extension names a codec."""
    fs, path = filesystem(location)
    with fs.open_input_stream(path) as f:
        data: pa.Buffer = f.read_buffer()
    return data


def open_random(location: str) -> pa.NativeFile:
    """The file at ``location`` opened for random access (Parquet); the caller closes it."""
    fs, path = filesystem(location)
    opened: pa.NativeFile = fs.open_input_file(path)
    return opened


def move(source: str, target: str) -> None:
    """Move a file, creating the target's folder: a rename where the store has one, else
    a copy and a delete (across file systems, or on an object store)."""
    src_fs, src = filesystem(source)
    dst_fs, dst = filesystem(target)
    make_parent(dst_fs, dst)
    if store_of(source) == store_of(target):
        try:
            src_fs.move(src, dst)
            return
        except OSError:
            if not is_local(source):
                raise
    pafs.copy_files(src, dst, source_filesystem=src_fs, destination_filesystem=dst_fs)
    src_fs.delete_file(src)


__all__ = [
    "FileState",
    "Signature",
    "file_signature",
    "ignored",
    "is_local",
    "kind",
    "listing",
    "move",
    "normalize",
    "open_random",
    "read_bytes",
    "relative_to",
    "state",
]

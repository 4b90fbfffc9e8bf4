"""Where a reconciliation state lives: a local path, or a URI the Spark executors and the
auditor's processes all reach (RECONCILE_STATE_DIR / --state-dir).

    var/reconcile-state                 a local path (local[*], or a mount every node shares)
    file:///mnt/shared/reconcile-state  the same, as a URI
    s3a://bucket/reconcile-state        an object store (also s3://, gs://, abfss://, hdfs://)

Spark reads and writes the Parquet datasets through its own Hadoop filesystems (the URI as
given; credentials and the connector jar are Spark's configuration). The small files the
driver handles itself (state.json, the listing and removal of old runs) and the auditor's
reads of the key index (stuck verdicts, key pages) go through pyarrow's filesystems, which
name object stores by their own schemes (s3a:// and s3n:// are read as s3://) and take
credentials from the environment (AWS_*, GOOGLE_APPLICATION_CREDENTIALS, ...).

state.json is replaced atomically: on a local filesystem by a rename, on an object store
by writing the one object (a PUT is all or nothing). HDFS is written the same way as an
object store, which HDFS does not make atomic: prefer a shared mount there.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path
from typing import Any

# URI scheme → pyarrow's name for the same store; "file" and a plain path are local.
ARROW_SCHEMES = {"s3": "s3", "s3a": "s3", "s3n": "s3", "gs": "gs", "gcs": "gs", "hdfs": "hdfs", "abfs": "abfs",
                 "abfss": "abfss"}  # fmt: skip
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
# One filesystem per store and bucket (opening an S3 one looks its region up).
_FILESYSTEMS: dict[tuple[str, str], Any] = {}


class StateLocationError(ValueError):
    """The state location is malformed, unsupported or unreachable."""


class StateLocation:
    """A folder of the state: `join` goes down, `spark` names a path for Spark, the other
    methods read and write through pyarrow."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        text = os.fspath(root)
        if not text.strip():
            raise StateLocationError("the reconciliation state location is empty (RECONCILE_STATE_DIR / --state-dir)")
        match = _SCHEME.match(text)
        self.scheme = match.group(1).lower() if match else ""
        if self.scheme in ("", "file"):
            path = text[len(match.group(0)) :] if match else text
            if match and not path.startswith("/"):
                raise StateLocationError(f"state location {text!r}: a file:// URI needs an absolute path (file:///…)")
            self._local: Path | None = Path(path).absolute()
            self._remote = ""
        elif self.scheme in ARROW_SCHEMES:
            self._local, self._remote = None, text.rstrip("/")
        else:
            raise StateLocationError(
                f"state location {text!r}: unsupported scheme {self.scheme!r} "
                f"(a path, file://, or one of {', '.join(sorted(ARROW_SCHEMES))})"
            )

    @property
    def uri(self) -> str:
        """The location as given: a path, a file:// URI, or a store's URI."""
        if self._local is None:
            return self._remote
        return f"file://{self._local}" if self.scheme == "file" else str(self._local)

    def __str__(self) -> str:
        return self.uri

    def __repr__(self) -> str:
        return f"StateLocation({self.uri!r})"

    @property
    def local_path(self) -> Path | None:
        """The folder on this machine, None for a store."""
        return self._local

    @property
    def is_local(self) -> bool:
        return self._local is not None

    def join(self, *parts: str) -> StateLocation:
        """The location of `parts` below this one (relative names, '/'-separated)."""
        child = StateLocation.__new__(StateLocation)
        relative = "/".join(p.strip("/") for p in parts if p.strip("/"))
        child.scheme, child._local, child._remote = self.scheme, self._local, self._remote
        if relative:
            if self._local is not None:
                child._local = self._local / relative
            else:
                child._remote = f"{self._remote}/{relative}"
        return child

    def spark(self, relative: str = "") -> str:
        """The path Spark reads or writes (`relative` below this location)."""
        return self.join(relative).uri if relative else self.uri

    # --- through pyarrow -------------------------------------------------------------------
    def filesystem(self) -> tuple[Any, str]:
        """(pyarrow filesystem, path in it) of this location, for pyarrow.dataset."""
        import pyarrow.fs as pafs  # deferred: the web pages import this module without reading state

        if self._local is not None:
            return pafs.LocalFileSystem(), str(self._local)
        arrow_scheme = ARROW_SCHEMES[self.scheme]
        rest = self.uri.split("://", 1)[1]
        authority, _, key = rest.partition("/")
        cache_key = (arrow_scheme, authority)
        fs = _FILESYSTEMS.get(cache_key)
        if fs is None:
            try:
                fs, _ = pafs.FileSystem.from_uri(f"{arrow_scheme}://{rest}")
            except (OSError, ValueError) as exc:
                raise StateLocationError(
                    f"state location {self.uri}: cannot open its filesystem: {_short(exc)}"
                ) from exc
            _FILESYSTEMS[cache_key] = fs
        # Object stores name a file bucket/key; HDFS by its path on the named cluster.
        return fs, (f"/{key}" if arrow_scheme == "hdfs" else rest)

    def exists(self) -> bool:
        import pyarrow.fs as pafs

        fs, path = self.filesystem()
        return bool(fs.get_file_info(path).type != pafs.FileType.NotFound)

    def read_text(self) -> str:
        fs, path = self.filesystem()
        with fs.open_input_stream(path) as stream:
            return bytes(stream.read()).decode("utf-8")

    def write_text_atomic(self, text: str) -> None:
        """Replace this file with `text` so a reader sees the old or the new one, never half."""
        data = text.encode("utf-8")
        if self._local is not None:
            self._local.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._local.with_name(f"{self._local.name}.{uuid.uuid4().hex[:8]}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, self._local)
            return
        fs, path = self.filesystem()
        with fs.open_output_stream(path) as stream:  # one object: written whole or not at all
            stream.write(data)

    def child_folders(self) -> list[str]:
        """The names of the folders directly below this location (none when it is absent)."""
        import pyarrow.fs as pafs

        fs, path = self.filesystem()
        infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        return sorted(Path(i.path).name for i in infos if i.type == pafs.FileType.Directory)

    def size(self) -> int:
        """Bytes in the files below this location (0 when it is absent)."""
        import pyarrow.fs as pafs

        fs, path = self.filesystem()
        infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
        return sum(i.size or 0 for i in infos if i.type == pafs.FileType.File)

    def remove_tree(self) -> None:
        """Delete this folder and everything below it; absent is fine."""
        fs, path = self.filesystem()
        try:
            fs.delete_dir(path)
        except FileNotFoundError:
            pass


def _short(exc: BaseException) -> str:
    """pyarrow's messages can list dozens of places it looked; the first line says what failed."""
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__

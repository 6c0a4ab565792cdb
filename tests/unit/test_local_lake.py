"""Which lake errors are permanent local faults (issue 42.10): not a directory, no permission,
a read-only file system end the run naming the path; object-store trouble keeps its retry.

The tests run as root, for whom a directory without permission is still writable: the
permission and read-only cases are shown here by the errors the libraries raise for them; a
real `run` against a lake_root that is a file is tests/integration/test_local_lake_faults.py."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import obstore
import pytest

from cdc_platform.errors import LakeAccessError, SinkError
from cdc_platform.sink import local_lake
from cdc_platform.sink.lake_files import LakeFile
from cdc_platform.sink.local_lake import check_local_lake, permanent_local_error
from cdc_platform.sink.storage_errors import Redactor, StorageGuard

pytestmark = pytest.mark.unit

_RUST_TEXT = "Generic LocalFileSystem error: Unable to open file /lake/d/x.json: {} (os error {})"


@pytest.mark.parametrize(
    ("exc", "words"),
    [
        (NotADirectoryError(errno.ENOTDIR, "Not a directory", "/lake/d"), "not a directory"),
        (PermissionError(errno.EACCES, "Permission denied", "/lake/d"), "permission denied"),
        (OSError(errno.EROFS, "Read-only file system", "/lake/d"), "read-only file system"),
        (OSError(_RUST_TEXT.format("Permission denied", 13)), "permission denied"),
        (OSError(_RUST_TEXT.format("Read-only file system", 30)), "read-only file system"),
        (OSError(_RUST_TEXT.format("Not a directory", 20)), "not a directory"),
    ],
)
def test_permanent_local_faults_are_not_transient_and_name_the_path(
    exc: OSError, words: str
) -> None:
    refusal = permanent_local_error("/lake", exc, "committing batch 3")
    assert isinstance(refusal, LakeAccessError)
    assert not refusal.transient
    assert str(refusal).startswith("lake /lake: committing batch 3 failed, " + words)
    assert "/lake/d" in str(refusal)


@pytest.mark.parametrize(
    "exc",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        OSError(errno.EIO, "Input/output error"),
        OSError("error sending request for url (http://127.0.0.1:9/b/k): tcp connect error"),
        RuntimeError("Generic S3 error: 503 Slow Down"),
    ],
)
def test_other_errors_are_left_to_the_caller(exc: BaseException) -> None:
    assert permanent_local_error("/lake", exc) is None


def test_a_delta_call_on_a_local_table_refuses_for_good_but_not_on_object_storage() -> None:
    exc = OSError(_RUST_TEXT.format("Read-only file system", 30))
    local = StorageGuard("d", Redactor("/lake/d/changes", None)).error("committing", exc)
    assert isinstance(local, LakeAccessError)
    assert not local.transient
    assert "d: committing failed, read-only file system" in str(local)
    remote = StorageGuard("d", Redactor("s3://b/lake/d/changes", {})).error("committing", exc)
    assert type(remote) is SinkError
    assert remote.transient


def test_a_side_file_on_a_local_lake_refuses_for_good(tmp_path: Path) -> None:
    """Through the object-store client's own error type, as LakeFile sees it."""
    side = LakeFile(str(tmp_path / "d" / "_reread_tables.json"))
    error = side._error("reading", obstore.exceptions.GenericError(_RUST_TEXT.format("x", 13)))
    assert isinstance(error, LakeAccessError)
    assert not error.transient
    transient = side._error("reading", obstore.exceptions.GenericError("connection reset"))
    assert transient.transient


def test_the_start_check_refuses_a_lake_it_may_not_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory without permission (as a non-root user sees it) and a full disk."""
    lake = tmp_path / "lake"
    check_local_lake(str(lake))  # made, written, the probe removed
    assert lake.is_dir()
    assert not list(lake.iterdir())

    def refuse(path: str, *_: object, **__: object) -> object:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)

    monkeypatch.setattr(local_lake, "open", refuse, raising=False)
    with pytest.raises(LakeAccessError, match=r"permission denied: .*\.cdc-write-probe") as exc:
        check_local_lake(str(lake))
    assert not exc.value.transient

    def full(path: str, *_: object, **__: object) -> object:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    monkeypatch.setattr(local_lake, "open", full, raising=False)
    with pytest.raises(LakeAccessError, match="No space left on device") as exc:
        check_local_lake(str(lake))
    assert exc.value.transient


def test_the_start_check_refuses_a_lake_root_that_is_a_file(tmp_path: Path) -> None:
    regular = tmp_path / "lake"
    regular.write_text("x")
    for root in (regular, regular / "below"):
        with pytest.raises(LakeAccessError, match="not a directory") as exc:
            check_local_lake(str(root))
        assert not exc.value.transient
        assert str(root) in str(exc.value)
    assert regular.read_text() == "x"

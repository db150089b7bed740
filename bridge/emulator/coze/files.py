"""Files of the Coze emulator: ``POST /v1/files/upload`` and what a message may reference.

Coze keeps uploaded files per account, not per conversation: a message of any conversation may
reference a file id (an ``object_string`` item ``{"type": "file"|"image", "file_id"}``). The
content is not kept, only its name, size and digest (`FileRecord`).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from pathlib import Path
from typing import Any

from starlette.datastructures import UploadFile
from starlette.requests import Request

from bridge.emulator.coze import wire
from bridge.emulator.coze.chats import ReplyError
from bridge.emulator.state import FileRecord

__all__ = ["MAX_UPLOAD_BYTES", "file_object", "read_upload"]

MAX_UPLOAD_BYTES = 512 * 1024 * 1024
"""The documented upload limit."""


async def read_upload(request: Request) -> FileRecord:
    """The file of a multipart upload (its part must be called ``file``).

    Raises:
        ReplyError: not multipart, no ``file`` part, or an unreadable body (code 4000).
    """
    if "multipart/form-data" not in request.headers.get("content-type", ""):
        raise ReplyError(
            wire.CODE_BAD_REQUEST,
            "the upload must be multipart/form-data with the file in a part called 'file'",
        )
    try:
        form = await request.form(max_part_size=MAX_UPLOAD_BYTES)
    except Exception as exc:  # the multipart parser has no public error base class
        raise ReplyError(wire.CODE_BAD_REQUEST, f"cannot read the multipart body: {exc}") from None
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise ReplyError(
            wire.CODE_BAD_REQUEST,
            "the multipart body has no file part called 'file' (with a filename)",
        )
    data = await upload.read()
    name = Path(upload.filename).name if upload.filename else None
    request.state.form = {"file": {"filename": name, "size": len(data)}}
    file_id = str(7_400_000_000_000_000_000 + secrets.randbelow(10**17))
    return FileRecord(file_id, name, None, len(data), hashlib.sha256(data).hexdigest())


def file_object(record: FileRecord) -> dict[str, Any]:
    """The File object the platform answers with."""
    return {
        "id": record.file_id,
        "bytes": record.size,
        "created_at": int(time.time()),
        "file_name": record.filename,
    }

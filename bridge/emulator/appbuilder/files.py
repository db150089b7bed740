"""The AppBuilder emulator's file uploads: the multipart (or urlencoded) form read, and the
uploaded file or URL recorded."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path
from typing import Any

from starlette.datastructures import UploadFile
from starlette.requests import Request

from bridge.emulator.appbuilder.replies import ReplyError
from bridge.emulator.state import FileRecord

__all__ = ["MAX_UPLOAD_BYTES", "file_record", "read_form"]

MAX_UPLOAD_BYTES = 50 * 1024 * 1024


_FORM_TYPES = ("multipart/form-data", "application/x-www-form-urlencoded")


async def read_form(request: Request) -> dict[str, Any]:
    """The upload's form fields (file parts as `UploadFile`), or a 400."""
    # The SDK's async client builds its form with aiohttp, which sends a form without a file
    # part (a file_url upload) urlencoded, and the platform accepts it.
    if not any(kind in request.headers.get("content-type", "") for kind in _FORM_TYPES):
        raise ReplyError(
            400,
            "the upload must be multipart/form-data (or application/x-www-form-urlencoded for "
            "a file_url) with app_id, conversation_id and file or file_url",
        )
    try:
        form = await request.form(max_part_size=MAX_UPLOAD_BYTES)
    except Exception as exc:  # the multipart parser has no public error base class
        raise ReplyError(400, f"cannot read the multipart body: {exc}") from None
    fields: dict[str, Any] = {}
    summary: dict[str, Any] = {}
    for key, value in form.multi_items():
        fields[key] = value
        if isinstance(value, UploadFile):
            summary[key] = {"filename": value.filename, "size": value.size}
        else:
            summary[key] = value
    request.state.form = summary
    return fields


async def file_record(upload: Any, url: Any) -> FileRecord:
    """The record of an uploaded file part or a ``file_url``; 400 for anything else."""
    file_id = str(uuid.uuid4())
    if isinstance(upload, UploadFile):
        data = await upload.read()
        name = Path(upload.filename).name if upload.filename else None
        return FileRecord(file_id, name, None, len(data), hashlib.sha256(data).hexdigest())
    if isinstance(upload, str):
        raise ReplyError(400, "the multipart field 'file' must be a file part (with a filename)")
    text = str(url).strip()
    if not text.startswith(("http://", "https://")):
        raise ReplyError(400, f"file_url must be an http(s) URL, got {text[:100]!r}")
    return FileRecord(file_id, None, text, 0, None)

"""The exception tree and secret redaction."""

from __future__ import annotations

import pytest

from bridge import errors
from bridge.errors import (
    AuthenticationError,
    BadRequestError,
    BridgeError,
    ConfigurationError,
    ConflictError,
    NotFoundError,
    PlatformError,
    PlatformStatusError,
    PreconditionError,
    RateLimitError,
    RunError,
    ServerError,
    UsageError,
    redact,
    register_secret,
    status_error_class,
)


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (400, BadRequestError),
        (401, AuthenticationError),
        (403, AuthenticationError),
        (404, NotFoundError),
        (409, ConflictError),
        (412, PreconditionError),
        (422, BadRequestError),
        (428, PreconditionError),
        (429, RateLimitError),
        (500, ServerError),
        (503, ServerError),
        (418, PlatformStatusError),
    ],
)
def test_status_classes(status: int, cls: type[Exception]) -> None:
    assert status_error_class(status) is cls


def test_the_tree() -> None:
    assert issubclass(UsageError, RuntimeError) and issubclass(UsageError, BridgeError)
    assert issubclass(ConfigurationError, UsageError)
    assert issubclass(ServerError, PlatformError) and issubclass(RunError, BridgeError)
    documented = errors.__doc__ or ""
    for name in errors.__all__:
        if name[0].isupper():
            assert name in documented, f"{name} missing from the tree drawn in bridge/errors.py"


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("Authorization: Bearer bce-v3/ALTAK-abc/def123", "ALTAK-abc"),
        ("key bce-v3/ALTAK-xyz/0011 leaked", "ALTAK-xyz"),
        ('{"api_key": "sk-1234567890abcdef"}', "sk-1234567890abcdef"),
        ("token=abcdefgh12345&x=1", "abcdefgh12345"),
    ],
)
def test_redact_masks_secret_shapes(text: str, secret: str) -> None:
    masked = redact(text)
    assert secret not in masked
    assert "[secure]" in masked


def test_redact_leaves_words_alone() -> None:
    for text in ("no token: set APPBUILDER_TOKEN", "password: missing", "wrong.toml"):
        assert redact(text) == text


def test_redact_shows_environment_references_but_not_what_follows_them() -> None:
    text = 'write headers: {X-API-Key: "${X_API_KEY}"} or query: {token: ${TOKEN}}'
    assert redact(text) == text
    assert "realsecret" not in redact("token: ${X}realsecret99")


def test_registered_secrets_are_masked_anywhere() -> None:
    register_secret("Bearer s3cr3t-registered-value")
    assert "s3cr3t-registered-value" not in redact("saw s3cr3t-registered-value in a body")
    register_secret("short")  # too short to mask safely: words would vanish
    assert redact("a short note") == "a short note"


def test_error_messages_and_reprs_are_redacted() -> None:
    exc = PlatformError("failed with Bearer bce-v3/ALTAK-q/w", request_id="r-1", status_code=500)
    assert "ALTAK-q" not in str(exc) and "ALTAK-q" not in repr(exc)
    assert "request_id=r-1" in str(exc) and "status=500" in str(exc)


def test_the_token_shape_in_hints_is_not_masked() -> None:
    # "it looks like bce-v3/ALTAK-…/…" says what a token looks like; it is none.
    for hint in ("it looks like bce-v3/ALTAK-…/…)", "such as bce-v3/ALTAK-...", "bce-v3/ALTAK-…"):
        assert redact(hint) == hint
    assert redact("bce-v3/ALTAK-…real/123") == "[secure]"

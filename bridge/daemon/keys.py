"""The daemon's API keys: named, kept only as SHA-256 digests, compared in constant time.

    --api-key KEY          one key, named "default"
    --api-key-file PATH    one ``name: key`` per line; ``#`` comments and blank lines allowed

    # toolbridge keys: one person or bot per line
    alice: 3f9c...                  names: letters, digits, _ . - (1 to 64)
    chatops-bot: 8a1e...            keys: at least 16 characters, no whitespace

The name of the key a request came with is who sent a message and who decided an approval.
`ApiKeys.reload` reads the file again (the daemon calls it on SIGHUP); a broken file then keeps
the keys in use and logs what is wrong, with line numbers, never a key.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
from dataclasses import dataclass
from pathlib import Path

from bridge.access.callers import DEFAULT_CALLER, KEY_NAME_PATTERN, CallerFileError
from bridge.access.callers import parse_key_file as _parse_key_file
from bridge.daemon.settings import DaemonSettings, SettingsError

__all__ = ["DEFAULT_KEY_NAME", "KEY_NAME_PATTERN", "ApiKeys", "KeyFileError", "parse_key_file"]

logger = logging.getLogger(__name__)

DEFAULT_KEY_NAME = DEFAULT_CALLER
"""The name of the key given with ``--api-key``."""


class KeyFileError(SettingsError):
    """The key file cannot be read or has bad lines (each named by its number)."""


@dataclass(frozen=True)
class _Key:
    name: str
    digest: bytes


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


def parse_key_file(text: str, *, source: str = "the key file") -> dict[str, bytes]:
    """The names and key digests of a key file's text (`bridge.access.callers.parse_key_file`).

    Raises:
        KeyFileError: naming every bad line (its number and what is wrong; never the key).
    """
    try:
        return _parse_key_file(text, source=source)
    except CallerFileError as exc:
        raise KeyFileError(exc.message) from None


class ApiKeys:
    """The keys the daemon accepts, by name.

    Args:
        default: the ``--api-key`` key (named "default"), if any.
        path: the ``--api-key-file``, if any.

    Raises:
        KeyFileError: the file cannot be read, has bad lines, or names a key "default" while
            ``--api-key`` is given too.
    """

    def __init__(self, default: str | None = None, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._default = _Key(DEFAULT_KEY_NAME, _digest(default)) if default is not None else None
        self._lock = threading.Lock()
        self._keys: tuple[_Key, ...] = self._load()

    @classmethod
    def from_settings(cls, settings: DaemonSettings) -> ApiKeys | None:
        """The keys `settings` configure; None when requests need no key."""
        if settings.api_key is None and settings.api_key_file is None:
            return None
        default = settings.api_key.get_secret_value() if settings.api_key is not None else None
        return cls(default, settings.api_key_file)

    def __repr__(self) -> str:
        return f"ApiKeys(names={self.names()})"

    def names(self) -> list[str]:
        """The names of the keys in use (never the keys)."""
        return [key.name for key in self._keys]

    def digests(self) -> dict[str, bytes]:
        """Each key's name and SHA-256 digest (for the daemon's door)."""
        return {key.name: key.digest for key in self._keys}

    def _load(self) -> tuple[_Key, ...]:
        keys = [self._default] if self._default is not None else []
        if self.path is not None:
            try:
                text = self.path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                raise KeyFileError(f"{self.path}: cannot read the key file: {reason}") from None
            named = parse_key_file(text, source=str(self.path))
            if self._default is not None:
                if DEFAULT_KEY_NAME in named:
                    raise KeyFileError(
                        f"{self.path}: the name {DEFAULT_KEY_NAME!r} is the --api-key's; "
                        "rename that line or drop --api-key"
                    )
                if self._default.digest in named.values():
                    raise KeyFileError(f"{self.path}: a key of the file is the --api-key too")
            keys += [_Key(name, digest) for name, digest in named.items()]
        return tuple(keys)

    def identify(self, given: str) -> str | None:
        """The name of the key `given` is, or None.

        Every key is compared, each in constant time, so the time taken tells nothing about
        which key (or how much of one) matched.
        """
        digest = _digest(given)
        found: str | None = None
        for key in self._keys:
            if hmac.compare_digest(digest, key.digest):
                found = key.name
        return found

    def reload(self) -> bool:
        """Read the key file again; on any error keep the keys in use (logged). True if
        reloaded."""
        if self.path is None:
            return False
        with self._lock:
            try:
                keys = self._load()
            except KeyFileError as exc:
                logger.error("the API keys were not reloaded, the previous ones stay: %s", exc)
                return False
            self._keys = keys
        logger.info("API keys reloaded from %s: %s", self.path, ", ".join(self.names()))
        return True

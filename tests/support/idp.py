"""A loopback OpenID Connect identity provider for tests: a real HTTP server on 127.0.0.1.

It serves ``/.well-known/openid-configuration`` and its JWKS, holds RSA signing keys (one
current, more after `rotate`) and one EC key, counts the fetches of each document, and mints
tokens, good ones and hostile ones (unsigned, HMAC-signed with the public key, signed by a key it
never published).

    with IdentityProvider() as idp:
        token = idp.token(sub="alice", roles=["operator"])
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

__all__ = ["IdentityProvider", "SigningKey", "b64url"]

AUDIENCE = "toolbridge"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _json_segment(value: Mapping[str, Any]) -> str:
    return b64url(json.dumps(value, separators=(",", ":")).encode())


@dataclass(frozen=True)
class SigningKey:
    """A private key, its kid and the algorithm it signs with."""

    kid: str
    alg: str
    private: Any

    @property
    def public_pem(self) -> bytes:
        return bytes(
            self.private.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    def jwk(self) -> dict[str, Any]:
        algorithm = ECAlgorithm if self.alg.startswith("ES") else RSAAlgorithm
        jwk: dict[str, Any] = json.loads(algorithm.to_jwk(self.private.public_key()))
        jwk.update(kid=self.kid, use="sig")
        return jwk


def _rsa(kid: str) -> SigningKey:
    return SigningKey(kid, "RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048))


class IdentityProvider:
    """The identity provider; `start` (or ``with``) serves it, `stop` takes it down.

    Attributes:
        issuer: Its issuer URL (``http://127.0.0.1:PORT``, known once started).
        audience: The audience tokens carry unless told otherwise.
        discovery_issuer: The issuer its discovery document states (None: `issuer`).
        jwks_fetches / discovery_fetches: How many times each document was served.
    """

    def __init__(self, audience: str = AUDIENCE) -> None:
        self.audience = audience
        self.discovery_issuer: str | None = None
        self.jwks_fetches = 0
        self.discovery_fetches = 0
        self._generation = 1
        self.current = _rsa("rsa-1")
        self.ec = SigningKey("ec-1", "ES256", ec.generate_private_key(ec.SECP256R1()))
        self.published: list[SigningKey] = [self.current, self.ec]
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._count_lock = threading.Lock()
        self.issuer = ""

    # -- the server --------------------------------------------------------------------------

    def start(self) -> IdentityProvider:
        idp = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/.well-known/openid-configuration":
                    with idp._count_lock:
                        idp.discovery_fetches += 1
                    body: dict[str, Any] = {
                        "issuer": idp.discovery_issuer or idp.issuer,
                        "jwks_uri": idp.issuer + "/jwks",
                        "id_token_signing_alg_values_supported": ["RS256", "ES256"],
                    }
                elif self.path == "/jwks":
                    with idp._count_lock:
                        idp.jwks_fetches += 1
                    body = {"keys": [key.jwk() for key in list(idp.published)]}
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.issuer = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Take the server down (the port then refuses connections)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> IdentityProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- keys --------------------------------------------------------------------------------

    def rotate(self) -> SigningKey:
        """Publish a new RSA key, sign with it from now on, and retire (unpublish) the old one."""
        self._generation += 1
        new = _rsa(f"rsa-{self._generation}")
        old = self.current
        self.published = [key for key in self.published if key is not old] + [new]
        self.current = new
        return new

    @staticmethod
    def stranger() -> SigningKey:
        """A key the identity provider never published."""
        return _rsa("stranger")

    # -- tokens ------------------------------------------------------------------------------

    def claims(
        self,
        *,
        sub: str | None = "alice",
        roles: Any = None,
        aud: Any = None,
        iss: str | None = None,
        exp: float | None = 300,
        nbf: float | None = None,
        iat: float | None = 0,
        **extra: Any,
    ) -> dict[str, Any]:
        """A token's claims; times are offsets in seconds from now (None leaves one out)."""
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": iss if iss is not None else self.issuer,
            "aud": aud if aud is not None else self.audience,
        }
        if sub is not None:
            claims["sub"] = sub
        if roles is not None:
            claims["roles"] = roles
        for name, offset in (("exp", exp), ("nbf", nbf), ("iat", iat)):
            if offset is not None:
                claims[name] = now + int(offset)
        claims.update(extra)
        return claims

    def token(
        self,
        *,
        key: SigningKey | None = None,
        alg: str | None = None,
        kid: str | None = None,
        headers: Mapping[str, Any] | None = None,
        **claims: Any,
    ) -> str:
        """A token signed with `key` (the current RSA key by default); `alg` and `kid` override
        the header's (`kid=""` leaves it out), `headers` adds to it, the rest are `claims`."""
        return self.sign(self.claims(**claims), key=key, alg=alg, kid=kid, headers=headers)

    def sign(
        self,
        claims: Mapping[str, Any],
        *,
        key: SigningKey | None = None,
        alg: str | None = None,
        kid: str | None = None,
        headers: Mapping[str, Any] | None = None,
    ) -> str:
        """`claims` exactly as given, signed as `token` signs."""
        key = key or self.current
        header: dict[str, Any] = {"kid": key.kid if kid is None else kid}
        if not header["kid"]:
            del header["kid"]
        header.update(headers or {})
        return jwt.encode(dict(claims), key.private, algorithm=alg or key.alg, headers=header)

    def ec_token(self, **claims: Any) -> str:
        return self.token(key=self.ec, **claims)

    def unsigned(self, **claims: Any) -> str:
        """``alg: none``, no signature."""
        header = {"alg": "none", "typ": "JWT", "kid": self.current.kid}
        return f"{_json_segment(header)}.{_json_segment(self.claims(**claims))}."

    def hmac_with_public_key(self, alg: str = "HS256", **claims: Any) -> str:
        """The algorithm-confusion attack: HMAC-signed with the public key's PEM as the secret."""
        header = {"alg": alg, "typ": "JWT", "kid": self.current.kid}
        signing_input = f"{_json_segment(header)}.{_json_segment(self.claims(**claims))}"
        digest = {"HS256": hashlib.sha256, "HS384": hashlib.sha384, "HS512": hashlib.sha512}[alg]
        signature = hmac.new(self.current.public_pem, signing_input.encode(), digest).digest()
        return f"{signing_input}.{b64url(signature)}"

    def signed_by_stranger(self, *, kid: str | None = None, **claims: Any) -> str:
        """Signed by a key never published; `kid` names a published one to impersonate it."""
        return self.token(key=self.stranger(), kid=kid, **claims)


def running() -> Iterator[IdentityProvider]:
    """For fixtures: ``yield from running()``."""
    with IdentityProvider() as idp:
        yield idp

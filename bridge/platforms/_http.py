"""The `requests.Session` every platform adapter uses when the caller gives none."""

from __future__ import annotations

import os

import requests
import requests.utils

__all__ = ["new_session"]


def new_session(base_url: str) -> requests.Session:
    """A session that reads the environment once, not on every request.

    With `trust_env` on, requests scans `os.environ` for proxies, looks for a netrc file and
    re-parses NO_PROXY on each request: more CPU than the rest of a small request. The same
    settings are resolved here once for `base_url` (HTTP(S)_PROXY, NO_PROXY and
    REQUESTS_CA_BUNDLE/CURL_CA_BUNDLE are honoured as before); netrc is not, since every
    adapter sends its own Authorization header.
    """
    session = requests.Session()
    session.trust_env = False
    session.proxies.update(requests.utils.get_environ_proxies(base_url))
    bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
    if bundle:
        session.verify = bundle
    return session

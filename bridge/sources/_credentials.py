"""Which request parameters carry credentials, so the model never fills them in.

The agent is steered by text anyone can inject (a web page it read, a ticket it summarised), so
a header, query or cookie parameter that holds a key, token or password must come from the
operator's environment (a `${ENV}` reference), never from the model's arguments. One rule,
`looks_like_credential`, serves the OpenAPI importer (which moves such parameters to `headers:`
/ `query:` entries) and the HTTP manifest loader (which refuses them as parameters).

The rule leans safe: a false positive costs the operator one environment variable (or a
rename), a false negative hands a credential to the model.
"""

from __future__ import annotations

import re
from typing import Literal

__all__ = [
    "CredentialPlace",
    "env_name",
    "looks_like_credential",
    "manifest_entry",
]

CredentialPlace = Literal["header", "query", "cookie"]
"""Where a request can carry a credential outside its body."""

_WORD_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_EXACT = frozenset(("key", "xkey", "sid", "auth", "jwt", "bearer", "session", "pwd", "pass"))
"""Whole names (lower case, separators removed) that are credentials on their own."""
_STEMS = (
    "authorization",  # Authorization, Proxy-Authorization, X-Authorization
    "authenticat",  # X-Authentication, authentication_key
    "oauth",  # oauth_consumer_key, oauth_signature
    "apikey",  # X-API-Key, api_key, apiKey, x-apikey
    "accesskey",  # access_key, AccessKeyId
    "privatekey",
    "secret",  # client_secret, X-Secret
    "passw",  # password, passwd, Passwort
    "passphrase",
    "cookie",  # Cookie, Set-Cookie
    "credential",  # X-Amz-Credential, credentials
    "sessionid",  # sessionid, session_id, JSESSIONID, ASP.NET_SessionId
    "sessid",  # PHPSESSID
    "sessionkey",
    "subscriptionkey",  # Ocp-Apim-Subscription-Key (Azure API Management), subscription-key
    "functionskey",  # x-functions-key (Azure Functions)
    "consumerkey",  # oauth_consumer_key, X-Consumer-Key
    "signature",  # X-Amz-Signature, SharedAccessSignature: a signed request's proof
)
"""Pieces that make a name a credential wherever they appear in it (separators removed)."""
_WORDS = frozenset(("auth", "session", "sid", "jwt", "bearer", "pass", "pw", "sig"))
"""Words that make a name a credential when they stand alone in it: `X-Auth-User`,
`session_token`, `connect.sid`, `X-Api-Pass`, a SAS URL's `sig`, but not `author`,
`sessions_count` or `passport`."""
_CURSOR = re.compile(
    r"(?:(?:next|prev|previous)(?:page)?|page|continuation|pagination|cursor|sync)token"
)
"""Pagination cursors that are named like tokens: `page_token`, `nextPageToken`, `NextToken`,
`continuation_token`, `syncToken`. Matched against the whole name only, so `page_token_secret`
or `next_page_access_token` are still credentials."""

_SHELL_VARIABLES = frozenset(("PWD", "OLDPWD", "PATH", "HOME", "USER", "SHELL", "LOGNAME"))
"""Set in every shell: a credential named `pwd` must not be sent the working directory."""


def _words(name: str) -> list[str]:
    """`X-API-Key` -> x, api, key; `nextPageToken` -> next, page, token."""
    return [w.lower() for w in re.split(r"[^A-Za-z0-9]+", _WORD_BOUNDARY.sub("_", name)) if w]


def looks_like_credential(name: str) -> bool:
    """True when a header, query or cookie parameter named `name` likely carries a credential.

    Matches (case and separators ignored): authorization and proxy-authorization, anything
    with an API key (`X-API-Key`, `api_key`, `apikey`), a token (`access_token`, `X-CSRF-Token`,
    `authToken`), a secret, a password (`passwd`, `pwd`), a cookie, a credential, `X-Auth-*`
    and any name with the word `auth`, session ids (`session`, `session_id`, `PHPSESSID`,
    `sid`), `jwt`, `bearer`, a bare `key`, access or private keys, subscription, function and
    consumer keys (`Ocp-Apim-Subscription-Key`), request signatures (`X-Amz-Signature`, `sig`),
    and `pass` or `pw` as words (`X-Api-Pass`).

    Not matched: pagination cursors named like tokens (`page_token`, `next_page_token`,
    `nextPageToken`, `NextToken`, `continuation_token`, `sync_token`: the whole name must be
    one of these shapes); counts of language-model tokens (`max_tokens`: the word is plural);
    and words that merely contain a stem (`author`, `authority`, `keyword`, `monkey`).

    Args:
        name: The parameter's name on the wire (header name, query key, cookie name).
    """
    words = _words(name)
    compact = "".join(words)
    if not compact:
        return False
    if compact in _EXACT:
        return True
    if _CURSOR.fullmatch(compact):
        return False
    if any(stem in compact for stem in _STEMS) or compact.startswith("xauth"):
        return True
    if any(word in _WORDS for word in words):
        return True
    # `token`, `access_token`, `accessToken`, `xsrftoken`; but `tokens`, `max_tokens`.
    return any(word.endswith("token") for word in words)


def env_name(name: str) -> str:
    """An environment variable name for a parameter or scheme: `X-API-Key` -> `X_API_KEY`.

    `APIKeyHeader` -> `API_KEY_HEADER`; a name that would start with a digit gets `API_`.
    """
    snake = _WORD_BOUNDARY.sub("_", name)
    result = re.sub(r"[^A-Za-z0-9]+", "_", snake).strip("_").upper()
    if not result or result[0].isdigit() or result in _SHELL_VARIABLES:
        return f"API_{result}"
    return result


def manifest_entry(place: CredentialPlace, wire: str) -> str:
    """The manifest lines that send credential `wire` from the environment, for messages."""
    env = env_name(wire)
    if place == "query":
        return f'query: {{{wire}: "${{{env}}}"}}'
    if place == "cookie":
        return f'headers: {{Cookie: "{wire}=${{{env}}}"}}'
    return f'headers: {{{wire}: "${{{env}}}"}}'

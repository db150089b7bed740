"""`redact`'s shortcuts: `redact_data` remembers short strings it found clean (a secret
registered later still masks them, also a string remembered by a thread that read the secrets
just before), and texts without a word the patterns need skip them, with the same result."""

from __future__ import annotations

import uuid

from hypothesis import example, given, settings
from hypothesis import strategies as st

from bridge import errors
from bridge.errors import redact_data, register_secret


def test_a_string_found_clean_is_masked_once_it_holds_a_new_secret() -> None:
    secret = f"s{uuid.uuid4().hex[:12]}"
    text = f"id {secret}"
    assert redact_data(text) == text  # found clean, remembered
    assert redact_data(text) == text
    register_secret(secret)
    assert redact_data(text) == "id [secure]"


def test_an_entry_remembered_under_the_secrets_before_a_registration_does_not_count() -> None:
    secret = f"t{uuid.uuid4().hex[:12]}"
    text = f"key {secret}"
    # A thread that read the generation before the registration and remembers the string
    # after it: its entry carries the old generation.
    old = errors._generation
    register_secret(secret)
    errors._clean[text] = old
    assert redact_data(text) == "key [secure]"


def _masked_by_every_pattern(text: str) -> str:
    """`redact` without its shortcut: the registered secrets, then every pattern, always."""
    for secret in errors._longest_first():
        text = text.replace(secret, "[secure]")
    for pattern in errors._SECRET_PATTERNS:
        if pattern.groups:
            text = pattern.sub(lambda m: m.group(1) + "[secure]", text)
        else:
            text = pattern.sub("[secure]", text)
    return text


_WORDS = st.sampled_from([
    "token", "TOKEN", "ToKeN", "to\u212aen", "\u017fecret", "Secret", "bearer", "BEARER",
    "api_key", "API-KEY", "apikey", "ap\u0131_key", "password", "PASSWORD", "authorization",
    "bce-v3/", "BCE-V3/", "tokens", "keys",
])  # fmt: skip
_BETWEEN = st.sampled_from(["=", ": ", '"=', "' : '", " ", "\t", "", "\n"])
_VALUES = st.sampled_from(["abcdefghijkl", "abcdefghijkl", "abc", "${HOME}", "<token>", "é" * 9])
_TEXTS = st.lists(
    st.tuples(st.text(max_size=4), _WORDS, _BETWEEN, _VALUES).map("".join) | st.text(max_size=8),
    max_size=5,
).map("".join)


@settings(max_examples=500, deadline=None)
@given(_TEXTS)
@example("\u017fecret=abcdefghijkl")  # the long s folds to s
@example("to\u212aen: abcdefghijkl")  # the Kelvin sign folds to k
@example("ap\u0131_key=abcdefghijkl")  # the dotless i folds to i
@example("say Bearer abcdefghijkl")
def test_the_shortcut_never_changes_what_is_masked(text: str) -> None:
    """Whether a text may hold a secret is found without the case-insensitive expression for
    ASCII texts; whatever the text (case variants, letters that fold to ASCII ones), the
    result is what running every pattern gives."""
    assert errors.redact(text) == _masked_by_every_pattern(text)

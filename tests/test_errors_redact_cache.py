"""`redact_data` remembers short strings it found clean; a secret registered later still
masks them, also a string remembered by a thread that read the secrets just before."""

from __future__ import annotations

import uuid

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

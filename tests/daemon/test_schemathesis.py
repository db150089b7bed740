"""Property-based API testing with schemathesis: no request the schema allows (or breaks) is a 5xx.

Every operation of /openapi.json gets generated valid and invalid requests (a bounded number
each), sent to the real daemon process on loopback. Message operations target a real
conversation so that generated queries go all the way through the loop and the emulator.
"""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from tests.daemon.conftest import DaemonProcess

EXAMPLES = 8


def test_no_generated_request_gets_a_5xx(daemon: DaemonProcess) -> None:
    assert daemon.url.startswith("http://127.0.0.1:"), "schemathesis only ever targets loopback"
    schema = schemathesis.openapi.from_url(daemon.url + "/openapi.json")
    cid = daemon.new_conversation()
    checked = []
    sent: list[int] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.path == "/v1/events":
            continue  # a stream that never ends by design; tests/daemon/test_events.py has it
        params = {"conversation_id": cid} if "messages" in operation.path else None
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            strategy = operation.as_strategy(generation_mode=mode, path_parameters=params)

            @given(case=strategy)
            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            def check(case: schemathesis.Case) -> None:
                sent.append(1)
                case.call_and_validate(
                    base_url=daemon.url,
                    headers=daemon.headers(),
                    checks=[not_a_server_error],
                    timeout=60,
                )

            try:
                check()
            except Unsatisfiable:
                # No parameters and no body: there is nothing a negative request could break.
                assert mode is GenerationMode.NEGATIVE, operation.label
        checked.append(operation.label)
    assert len(checked) >= 10, checked
    assert len(sent) >= 8 * len(checked), "every operation got its examples"
    assert "POST /v1/conversations/{conversation_id}/messages" in checked

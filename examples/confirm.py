"""A tool that needs a person's approval before each call (`confirm=True`).

The loop asks the `approve` hook; a rejected call is not run and the agent is told
"rejected by the user". `toolbridge run`/`chat` ask y/n on the terminal.
"""

from __future__ import annotations

import sys

from bridge import Bridge, Platform, Result, ToolCall, manifest, open_platform

SCENARIO = {
    "rules": [
        {
            "match": r"restart (?P<service>[\w-]+)",
            "steps": [{"tool": "restart_service", "arguments": {"service": "{service}"}}],
            "answer": "restart_service said: {outputs.restart_service}",
        }
    ]
}

RESTARTED: list[str] = []


@manifest(description="Restart a production service.", confirm=True)
def restart_service(service: str) -> str:
    """Restart a service (pretend).

    Args:
        service: The service name, e.g. billing-api.
    """
    RESTARTED.append(service)
    return f"{service} restarted"


def only_staging(call: ToolCall) -> bool:
    """An approval policy: allow restarts of staging services only."""
    service = call.arguments_dict().get("service", "")
    return isinstance(service, str) and service.endswith("-staging")


def main(platform: Platform) -> list[Result]:
    """One approved call, one rejected call."""
    with Bridge(platform, [restart_service], approve=only_staging) as bridge:
        return [bridge.ask("restart billing-staging"), bridge.ask("restart billing-prod")]


if __name__ == "__main__":
    # --emulator: offline, on the embedded emulator scripted by SCENARIO; without it, your app
    # (APPBUILDER_TOKEN and APPBUILDER_APP_ID).
    with open_platform(emulator="--emulator" in sys.argv[1:], scenario=SCENARIO) as platform:
        for result in main(platform):
            print(result.answer)

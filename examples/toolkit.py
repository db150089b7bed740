"""A toolkit: one class, several tools (`helpdesk_open_ticket`, `helpdesk_list_tickets`...).

Methods decorated with `@manifest` become tools named `<toolkit>_<method>`; the instance keeps
state (here an in-memory ticket store) shared by its tools.
"""

from __future__ import annotations

import sys
from typing import Literal

from bridge import Bridge, Platform, Result, manifest, open_platform

SCENARIO = {
    "rules": [
        {
            "match": r"(?:open|file) a ticket: (?P<title>.+)",
            "steps": [
                {
                    "tool": "helpdesk_open_ticket",
                    "arguments": {"title": "{title}", "priority": "high"},
                },
                {"tool": "helpdesk_list_tickets", "arguments": {}},
            ],
            "answer": "Opened {outputs.helpdesk_open_ticket.id}. Open tickets: "
            "{outputs.helpdesk_list_tickets}",
        }
    ]
}


class HelpDesk:
    """A tiny ticket system."""

    toolkit_name = "helpdesk"

    def __init__(self) -> None:
        self.tickets: dict[str, dict[str, str]] = {}

    @manifest(description="Open a helpdesk ticket and return its id.")
    def open_ticket(self, title: str, priority: Literal["low", "high"] = "low") -> dict[str, str]:
        """Open a ticket.

        Args:
            title: One line saying what is wrong.
            priority: How urgent it is.
        """
        ticket_id = f"T-{len(self.tickets) + 1}"
        self.tickets[ticket_id] = {"id": ticket_id, "title": title, "priority": priority}
        return self.tickets[ticket_id]

    @manifest(description="List the ids of open tickets.")
    def list_tickets(self) -> list[str]:
        """Every open ticket id."""
        return sorted(self.tickets)


def main(platform: Platform) -> Result:
    """Register the toolkit instance and let the agent use two of its tools in a row."""
    desk = HelpDesk()
    with Bridge(platform, [desk]) as bridge:
        return bridge.ask("Please open a ticket: the printer on 3F is jammed")


if __name__ == "__main__":
    # --emulator: offline, on the embedded emulator scripted by SCENARIO; without it, your app
    # (APPBUILDER_TOKEN and APPBUILDER_APP_ID).
    with open_platform(emulator="--emulator" in sys.argv[1:], scenario=SCENARIO) as platform:
        print(main(platform).answer)

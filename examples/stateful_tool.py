"""A stateful tool: one SQLite connection per conversation, from a bounded pool.

`ctx.resource(factory)` gives each conversation its own resource (created on first use, the
same one for every later call of that conversation) and closes it when the conversation ends.
At most `pool_size` conversations hold one at a time.
"""

from __future__ import annotations

import sqlite3
import sys

from bridge import Bridge, Platform, Result, ToolContext, manifest, open_platform

SCENARIO = {
    "rules": [
        {
            "match": r"remember (?P<item>.+)",
            "steps": [{"tool": "note_add", "arguments": {"text": "{item}"}}],
            "answer": "Noted ({outputs.note_add}).",
        },
        {
            "match": r"what did I ask you to remember",
            "steps": [{"tool": "note_list", "arguments": {}}],
            "answer": "You asked me to remember: {outputs.note_list}",
        },
    ]
}


def open_notes() -> sqlite3.Connection:
    """A private scratch database for one conversation."""
    connection = sqlite3.connect(":memory:", check_same_thread=False)
    connection.execute("CREATE TABLE notes (text TEXT NOT NULL)")
    return connection


@manifest(description="Remember a short note for the rest of this conversation.")
def note_add(ctx: ToolContext, text: str) -> str:
    """Store a note.

    Args:
        text: What to remember.
    """
    db = ctx.resource(open_notes, pool_size=4)
    with db:
        db.execute("INSERT INTO notes (text) VALUES (?)", (text,))
    count = db.execute("SELECT COUNT(*) FROM notes").fetchone()[0]
    return f"{count} note(s) in conversation {ctx.conversation_id}"


@manifest(description="List the notes of this conversation.")
def note_list(ctx: ToolContext) -> list[str]:
    """Every note so far, oldest first."""
    db = ctx.resource(open_notes, pool_size=4)
    return [row[0] for row in db.execute("SELECT text FROM notes ORDER BY rowid")]


def main(platform: Platform) -> list[Result]:
    """Two conversations never see each other's notes."""
    results = []
    with Bridge(platform, [note_add, note_list]) as bridge:
        with bridge.conversation() as first:
            first.ask("remember milk")
            first.ask("remember eggs")
            results.append(first.ask("what did I ask you to remember?"))
        with bridge.conversation() as second:
            second.ask("remember tea")
            results.append(second.ask("what did I ask you to remember?"))
    return results


if __name__ == "__main__":
    # --emulator: offline, on the embedded emulator scripted by SCENARIO; without it, your app
    # (APPBUILDER_TOKEN and APPBUILDER_APP_ID).
    with open_platform(emulator="--emulator" in sys.argv[1:], scenario=SCENARIO) as platform:
        for result in main(platform):
            print(result.answer)

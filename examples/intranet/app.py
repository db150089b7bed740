"""A small intranet API: an employee directory and a ticket system, kept in memory.

It stands in for the internal services toolbridge is meant to wrap: FastAPI serves its OpenAPI
document at ``/openapi.json``, so ``toolbridge import-openapi`` can turn it into tools.

Run it: ``python -m examples.intranet.app --port 8300`` (writes need the header
``X-API-Key: $INTRANET_KEY``, default ``dev-key``).
"""

# No `from __future__ import annotations`: FastAPI reads the annotations of the route
# functions at runtime, and they refer to a dependency defined inside create_app.
import argparse
import os
import secrets
import threading
from enum import Enum
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Query, Security
from fastapi.security import APIKeyHeader
from pydantic import BaseModel, Field

__all__ = ["Employee", "Ticket", "create_app"]


class Employee(BaseModel):
    """One person in the directory."""

    id: int
    name: str
    department: str
    email: str
    phone: str
    office: str


class Priority(str, Enum):
    low = "low"
    normal = "normal"
    high = "high"


class Status(str, Enum):
    open = "open"
    in_progress = "in_progress"
    closed = "closed"


class NewTicket(BaseModel):
    """What it takes to open a ticket."""

    title: str = Field(
        min_length=3, max_length=120, description="One line that says what is wrong."
    )
    description: str = Field(default="", description="Details, steps to reproduce.")
    priority: Priority = Priority.normal
    assignee_id: int | None = Field(default=None, description="Employee id of the assignee.")


class TicketUpdate(BaseModel):
    """Fields of a ticket that can change."""

    status: Status | None = None
    assignee_id: int | None = None


class Ticket(NewTicket):
    """A ticket of the help desk."""

    id: int
    status: Status = Status.open
    reporter: str


EMPLOYEES = [
    Employee(id=1, name="Alice Martin", department="IT", email="alice@corp.example",
             phone="+33 1 00 00 00 01", office="Paris"),
    Employee(id=2, name="Bob Chen", department="Finance", email="bob@corp.example",
             phone="+86 10 0000 0002", office="Beijing"),
    Employee(id=3, name="Chloé Dubois", department="IT", email="chloe@corp.example",
             phone="+33 1 00 00 00 03", office="Lyon"),
    Employee(id=4, name="Dmitri Ivanov", department="Sales", email="dmitri@corp.example",
             phone="+49 30 0000 0004", office="Berlin"),
]  # fmt: skip


def create_app(api_key: str | None = None) -> FastAPI:
    """A fresh app with its own in-memory data; writes need `api_key` in ``X-API-Key``.

    Args:
        api_key: The key writes must present; default: ``$INTRANET_KEY`` or ``dev-key``.
    """
    expected = api_key or os.environ.get("INTRANET_KEY") or "dev-key"
    app = FastAPI(
        title="Intranet",
        version="1.0.0",
        description="Employee directory and help-desk tickets.",
    )
    tickets: dict[int, Ticket] = {}
    lock = threading.Lock()
    key_header = APIKeyHeader(name="X-API-Key", scheme_name="IntranetKey", auto_error=False)

    def writer(key: Annotated[str | None, Security(key_header)]) -> str:
        if key is None or not secrets.compare_digest(key, expected):
            raise HTTPException(status_code=401, detail="missing or wrong X-API-Key")
        return "api-client"

    def employee(employee_id: int) -> Employee:
        for person in EMPLOYEES:
            if person.id == employee_id:
                return person
        raise HTTPException(status_code=404, detail=f"no employee with id {employee_id}")

    @app.get("/employees", operation_id="search_employees", tags=["directory"])
    def search_employees(
        q: Annotated[str | None, Query(description="Part of a name, case-insensitive.")] = None,
        department: Annotated[str | None, Query(description="Exact department.")] = None,
    ) -> list[Employee]:
        """Search the employee directory by name and department."""
        found = EMPLOYEES
        if q:
            found = [e for e in found if q.casefold() in e.name.casefold()]
        if department:
            found = [e for e in found if e.department == department]
        return found

    @app.get("/employees/{employee_id}", operation_id="get_employee", tags=["directory"])
    def get_employee(employee_id: int) -> Employee:
        """One employee of the directory, by id."""
        return employee(employee_id)

    @app.get("/tickets", operation_id="list_tickets", tags=["tickets"])
    def list_tickets(status: Status | None = None, assignee_id: int | None = None) -> list[Ticket]:
        """Tickets of the help desk, filtered by status and assignee."""
        with lock:
            found = list(tickets.values())
        if status is not None:
            found = [t for t in found if t.status == status]
        if assignee_id is not None:
            found = [t for t in found if t.assignee_id == assignee_id]
        return found

    @app.post("/tickets", operation_id="create_ticket", tags=["tickets"], status_code=201)
    def create_ticket(ticket: NewTicket, reporter: Annotated[str, Depends(writer)]) -> Ticket:
        """Open a help-desk ticket, optionally assigned to an employee."""
        if ticket.assignee_id is not None:
            employee(ticket.assignee_id)
        with lock:
            created = Ticket(id=len(tickets) + 1, reporter=reporter, **ticket.model_dump())
            tickets[created.id] = created
        return created

    @app.get("/tickets/{ticket_id}", operation_id="get_ticket", tags=["tickets"])
    def get_ticket(ticket_id: int) -> Ticket:
        """One ticket, by id."""
        with lock:
            found = tickets.get(ticket_id)
        if found is None:
            raise HTTPException(status_code=404, detail=f"no ticket with id {ticket_id}")
        return found

    @app.patch("/tickets/{ticket_id}", operation_id="update_ticket", tags=["tickets"])
    def update_ticket(
        ticket_id: int, change: TicketUpdate, _: Annotated[str, Depends(writer)]
    ) -> Ticket:
        """Change the status or the assignee of a ticket."""
        current = get_ticket(ticket_id)
        if change.assignee_id is not None:
            employee(change.assignee_id)
        updated = current.model_copy(update=change.model_dump(exclude_none=True))
        with lock:
            tickets[ticket_id] = updated
        return updated

    return app


def main() -> None:
    """Serve the app with uvicorn."""
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8300)
    args = parser.parse_args()
    uvicorn.run(create_app(), host=args.host, port=args.port)


if __name__ == "__main__":
    main()

"""Serve a toolbox as an MCP server, so MCP hosts use the same tools (`toolbridge mcp-serve`).

    server = mcp_server(toolbox)               # the official SDK's low-level Server
    await serve_stdio(toolbox)                 # a desktop host starts us as a subprocess
    app = mcp_http_app(toolbox)                # streamable HTTP: an ASGI app, path /mcp

Every call goes through a `Dispatcher`, exactly as calls from a cloud agent do: arguments are
validated, sync tools run in threads, timeouts apply, and a failure becomes an `isError`
result whose text says what went wrong.

A `confirm=True` tool runs only after the host's user approved that call through MCP
elicitation (`bridge.tools.approval` is the rule, `_mcp_confirm` carries the question); a host
that cannot ask gets a refusal the model can read, unless the server was made with `yes=True`.
Tools are listed with annotations: `destructiveHint` for confirm tools, `readOnlyHint` and
`idempotentHint` where the tool says so. A tool with a typed return (`ToolSpec.output_schema`)
is listed with an `outputSchema` and its results carry `structuredContent`.

Behind the door (`mcp_http_app(door=...)`), every HTTP request names its caller with a bearer
credential (`bridge.sources._mcp_door`: the SDK's bearer auth answered by the door, and the
OAuth protected resource metadata naming the identity provider). Each caller lists and calls only
its own tools; a policy (`Decides`) decides each call on its arguments before it runs (refuse:
an `isError` result naming the policy; approval: the host's user is asked as for a confirm tool),
and the audit record (`Records`) keeps each decision and outcome. Over stdio the caller is the
person who started the server (`LOCAL`).
"""

from __future__ import annotations

import functools
import json
import logging
import uuid
from typing import TYPE_CHECKING, Any

from bridge.access import (
    ALLOW,
    ANONYMOUS,
    LOCAL,
    AuditEvent,
    CallFacts,
    Permission,
    PolicyDecision,
    Principal,
    RateLimitedError,
    ToolPatterns,
    decide_or_refuse,
)
from bridge.errors import redact_data
from bridge.sources._mcp_confirm import HostApproval
from bridge.sources.mcp import _sdk
from bridge.tools.approval import needs_approval
from bridge.tools.dispatch import Dispatcher
from bridge.tools.returns import mcp_output_schema, structured_content
from bridge.tools.schema import to_dialect
from bridge.types import ToolCall

if TYPE_CHECKING:
    from collections.abc import Iterable

    from mcp import types
    from mcp.server import Server
    from starlette.applications import Starlette

    from bridge.access import Authenticates, Decides, Records
    from bridge.tools.spec import ToolSpec
    from bridge.tools.toolbox import Toolbox
    from bridge.types import ToolRun

__all__ = ["mcp_http_app", "mcp_server", "serve_stdio"]

logger = logging.getLogger(__name__)


def mcp_server(
    toolbox: Toolbox,
    *,
    dispatcher: Dispatcher | None = None,
    name: str = "toolbridge",
    yes: bool = False,
    answer_timeout: float = 600.0,
    caller: Principal = LOCAL,
    policy: Decides | None = None,
    audit: Records | None = None,
    limiter: Any = None,
) -> Server[Any]:
    """An MCP server (the SDK's low-level `Server`) listing and running the toolbox's tools.

    Args:
        toolbox: The tools; its enabled tools are listed at each `tools/list`.
        dispatcher: Runs the calls; default: a `Dispatcher(toolbox)` with its defaults.
        name: The server name reported to clients.
        yes: Run `confirm=True` tools without asking anyone (the operator decided for all).
        answer_timeout: Seconds the host's user has to answer an approval question.
        caller: Who calls when the request names nobody (stdio: the person who started the
            server, `LOCAL`; HTTP without a door: `ANONYMOUS`). Over HTTP behind a door each
            request's own caller is used (`bridge.sources._mcp_door.caller_of`).
        policy: Decides each `tools/call` on its arguments (refuse, ask a person, run).
        audit: Where policy decisions, approvals, outcomes and refusals are written.
        limiter: The door, if it limits callers' rates: its ``limit(principal, "tool_calls")``
            raising `RateLimitedError` refuses a call.
    """
    _sdk()
    from importlib.metadata import version

    from mcp import types
    from mcp.server import Server

    from bridge.sources._mcp_door import caller_of, record

    runner = dispatcher if dispatcher is not None else Dispatcher(toolbox)
    approvals = HostApproval(answer_timeout=answer_timeout)

    def who(ctx: Any) -> Principal:
        named = caller_of(ctx)
        return named if named is not None else caller

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        principal = who(ctx)
        tools = []
        for spec in toolbox:
            if not _sees(principal, spec):
                continue
            described = to_dialect(spec, "mcp")
            tools.append(
                types.Tool(
                    name=described["name"],
                    title=spec.title,
                    description=described["description"] or None,
                    input_schema=described["inputSchema"],
                    output_schema=described.get("outputSchema"),
                    annotations=_annotations(spec),
                )
            )
        if _sees_all(principal):
            return types.ListToolsResult(tools=tools)
        # Another caller sees another list: no cache may hand this one to it.
        return types.ListToolsResult(tools=tools, cache_scope="private")

    async def call_tool(
        ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        try:
            return await decide_and_run(ctx, params)
        except _UnrecordedError:
            logger.exception("%s not run: the audit record could not be written", params.name)
            return _result("not run: the audit record could not be written", is_error=True)

    async def decide_and_run(
        ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        async def note(entry: AuditEvent) -> None:
            # Before the call runs: no record, no run.
            try:
                await record(audit, entry)
            except Exception as exc:
                raise _UnrecordedError from exc

        principal = who(ctx)
        arguments = dict(params.arguments or {})
        # A call answering its approval question (in a later request) keeps the question's id:
        # its policy entry, approval and outcome are one call's in the audit record.
        answering = approvals.call_id_of(params)
        call_id = answering or f"mcp-{uuid.uuid4().hex[:12]}"
        spec = toolbox.get(params.name)
        event = functools.partial(
            AuditEvent,
            caller=principal.name,
            via=principal.via,
            conversation_id=_session_id(ctx),
            tool=params.name,
            arguments=arguments,
        )
        if spec is None or not _sees(principal, spec):
            # Exactly what an unknown tool gets, listing only the tools this caller sees.
            call = ToolCall(call_id=call_id, name=params.name, arguments=arguments)
            if spec is not None:
                logger.info("%s is not among the tools of %s", params.name, principal.name)
                try:  # nothing runs either way; the answer must not tell it from an unknown tool
                    await record(
                        audit, event(kind="identity", outcome="forbidden", call_id=call_id)
                    )
                except Exception:
                    logger.exception("a refused call of %s was not recorded", params.name)
            return _result(await _unknown(runner, toolbox, principal, call), is_error=True)
        # The request that asked counted against the caller's rate; its answer is that call.
        limited = None if answering else _rate_limited(limiter, principal)
        if limited is not None:
            await note(
                event(
                    kind="identity",
                    outcome="rate_limited",
                    call_id=call_id,
                    detail={"retry_after": limited.retry_after, "reason": str(limited)},
                ),
            )
            # The door's refusal names the limit and when to retry.
            return _result(f"not run: {limited}", is_error=True)
        decision = ALLOW
        if policy is not None:
            decision = _decide(policy, principal, spec, arguments, _session_id(ctx))
            await note(
                event(
                    kind="policy",
                    outcome=decision.effect,
                    call_id=call_id,
                    detail={"policies": list(decision.policies), "reason": decision.reason},
                ),
            )
        if decision.refused:
            await note(event(kind="tool", outcome="refused", call_id=call_id))
            return _result(decision.refusal(), is_error=True)
        # A policy's approval is a person's, whatever --yes says of confirm tools.
        if decision.needs_approval or (needs_approval(spec) and not yes):
            asked = await approvals.ask(ctx, params.name, arguments, params, call_id)
            if isinstance(asked, types.InputRequiredResult):
                return asked  # the client asks its user and calls again with the answer
            call_id, verdict = asked
            await note(
                event(
                    kind="approval",
                    outcome="approved" if verdict.run else "rejected",
                    call_id=call_id,
                    detail={"reason": verdict.reason} if verdict.reason else {},
                ),
            )
            if not verdict.run:
                call = ToolCall(call_id=call_id, name=params.name, arguments=arguments)
                logger.info("%s (call %s) not run: %s", params.name, call_id, verdict.reason)
                await note(event(kind="tool", outcome="refused", call_id=call_id))
                return _result(runner.reject(call, verdict.reason).output, is_error=True)
        call = ToolCall(call_id=call_id, name=params.name, arguments=arguments)
        [run] = await runner.arun([call])
        outcome = "ok" if run.error is None else "error"
        try:
            await record(audit, event(kind="tool", outcome=outcome, call_id=call_id))
        except Exception:
            # The call ran: its result goes back (a client told it failed might run it again).
            logger.exception("the outcome of %s (call %s) was not recorded", spec.name, call_id)
        if run.error is None and spec.output_schema:
            return _structured(spec.name, spec.output_schema, run)
        return _result(run.output, is_error=run.error is not None)

    return Server(
        name,
        version=version("toolbridge"),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


_NOBODY = Principal(name="unauthenticated", tools=ToolPatterns(()), via="anonymous")


class _UnrecordedError(Exception):
    """The audit record could not be written before a call ran (so it does not run)."""


def _sees(principal: Principal, spec: ToolSpec) -> bool:
    """Whether `principal` may see and call `spec`: a tool of its list, and calling tools at
    all (``call_tools``: an MCP host calls tools directly)."""
    return principal.can(Permission.CALL_TOOLS) and principal.may_run(spec.name, spec.source)


def _sees_all(principal: Principal) -> bool:
    return principal.can(Permission.CALL_TOOLS) and principal.tools.everything


def _session_id(ctx: Any) -> str:
    """The MCP session of a request over HTTP ("" on stdio, or without sessions)."""
    headers = getattr(getattr(ctx, "request", None), "headers", None)
    return str(headers.get("mcp-session-id") or "") if headers is not None else ""


def _decide(
    policy: Decides,
    principal: Principal,
    spec: ToolSpec,
    arguments: dict[str, Any],
    session: str,
) -> PolicyDecision:
    facts = CallFacts.of(
        spec.name,
        spec,
        arguments,
        platform="mcp",
        conversation=session,
        end_user=principal.name,
    )
    return decide_or_refuse(policy, principal, facts)


def _rate_limited(limiter: Any, principal: Principal) -> RateLimitedError | None:
    limit = getattr(limiter, "limit", None)
    if not callable(limit):
        return None
    try:
        limit(principal, "tool_calls")
    except RateLimitedError as exc:
        return exc
    return None


async def _unknown(
    runner: Dispatcher, toolbox: Toolbox, principal: Principal, call: ToolCall
) -> str:
    """The dispatcher's output for an unknown tool, as seen by `principal` (the tools it is
    told of are its own)."""
    from bridge.tools.toolbox import Toolbox

    if _sees_all(principal):
        [run] = await runner.arun([call])
        return run.output
    own = Toolbox()
    for spec in toolbox:
        if _sees(principal, spec):
            own.add_spec(spec)
    with Dispatcher(
        own,
        default_timeout=runner.default_timeout,
        errors=runner.errors,
        max_output_chars=runner.max_output_chars,
    ) as lookup:
        [run] = await lookup.arun([call])
    return run.output


async def serve_stdio(
    toolbox: Toolbox,
    *,
    dispatcher: Dispatcher | None = None,
    yes: bool = False,
    policy: Decides | None = None,
    audit: Records | None = None,
) -> None:
    """Serve over this process's stdin/stdout until the client closes stdin.

    The caller is the person who started the server (`LOCAL`); `policy` and `audit` apply to
    its calls as over HTTP. `yes` runs confirm tools without asking (see `mcp_server`).
    """
    _sdk()
    from mcp.server.stdio import stdio_server

    server = mcp_server(toolbox, dispatcher=dispatcher, yes=yes, policy=policy, audit=audit)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def mcp_http_app(
    toolbox: Toolbox,
    *,
    dispatcher: Dispatcher | None = None,
    path: str = "/mcp",
    host: str = "127.0.0.1",
    server_names: Iterable[str] = (),
    yes: bool = False,
    door: Authenticates | None = None,
    policy: Decides | None = None,
    audit: Records | None = None,
    issuer: str | None = None,
    resource_url: str | None = None,
) -> Starlette:
    """A streamable HTTP MCP endpoint at `path`, as an ASGI app (serve it with uvicorn).

    `host` is where it listens. Every request passes the daemon's Host/Origin gate
    (`bridge._hosts`) for that address, whatever its spelling: a Host other than the bound
    address, loopback names and `server_names` gets 421, a page of another origin 403 (DNS
    rebinding, cross-site requests). `yes` runs confirm tools without asking (see `mcp_server`).

    With a `door`, every request to the endpoint needs ``Authorization: Bearer <credential>``
    naming a caller (the MCP SDK's bearer middleware with `DoorTokenVerifier`); without one, or
    with one the door refuses, the answer is 401 with ``WWW-Authenticate: Bearer``. Each caller
    lists and calls only its own tools. With an `issuer` (the identity provider that issues
    tokens for this endpoint) the OAuth protected resource metadata (RFC 9728) of
    `resource_url` (the endpoint's URL as clients reach it) is served at
    ``/.well-known/oauth-protected-resource<path of resource_url>`` and the 401's
    ``WWW-Authenticate`` names it (``resource_metadata="..."``), so MCP clients find where to
    sign in. Without a door every request is `ANONYMOUS` (every tool).

    Raises:
        ValueError: a server name is not ``host`` or ``host:port``; an `issuer` without a
            `door` or a `resource_url`.
    """
    _sdk()
    from mcp.server.transport_security import (
        DEFAULT_MAX_REQUEST_BODY_SIZE,
        TransportSecuritySettings,
    )

    from bridge._hosts import HostGate
    from bridge.sources._http_gate import HostGateMiddleware

    gate = HostGate.for_server(host, server_names, server="MCP endpoint")
    if issuer is not None and (door is None or resource_url is None):
        raise ValueError("an identity provider (issuer) needs a door and the resource URL")
    server = mcp_server(
        toolbox,
        dispatcher=dispatcher,
        yes=yes,
        # Behind a door every request names its caller; one that somehow did not gets nothing.
        caller=ANONYMOUS if door is None else _NOBODY,
        policy=policy,
        audit=audit,
        limiter=door,
    )
    # The SDK's check is replaced, not doubled: it has other rules and turns itself on only
    # for three spellings of loopback.
    off = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    if door is None:
        app = server.streamable_http_app(
            streamable_http_path=path, host=host, transport_security=off
        )
    else:
        app = _behind_door(server, door, audit, path, host, off, issuer, resource_url)
    app.add_middleware(HostGateMiddleware, gate=gate, max_body_bytes=DEFAULT_MAX_REQUEST_BODY_SIZE)
    return app


def _behind_door(
    server: Server[Any],
    door: Authenticates,
    audit: Records | None,
    path: str,
    host: str,
    off: Any,
    issuer: str | None,
    resource_url: str | None,
) -> Starlette:
    """The SDK's streamable HTTP app with its bearer auth answered by the door.

    With an identity provider the SDK wires everything from `AuthSettings` (bearer middleware,
    401 naming the metadata, the RFC 9728 route). Keys alone name no authorization server, and
    the SDK's metadata requires one (so does the MCP spec): the same middleware is added by
    hand, and the 401 has no ``resource_metadata``.
    """
    from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
    from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend
    from mcp.server.auth.settings import AuthSettings
    from starlette.middleware.authentication import AuthenticationMiddleware

    from bridge.sources._mcp_door import DoorTokenVerifier

    verifier = DoorTokenVerifier(door, audit)
    if issuer is not None and resource_url is not None:
        settings = AuthSettings.model_validate(
            {
                "issuer_url": issuer,
                "resource_server_url": resource_url,
                # The door checks a token's audience itself (--oidc-audience).
                "validate_token_resource": False,
            }
        )
        return server.streamable_http_app(
            streamable_http_path=path,
            host=host,
            transport_security=off,
            auth=settings,
            token_verifier=verifier,
        )
    # Without `auth` the SDK still guards the endpoint with the token verifier, but leaves the
    # authentication middleware out: the two it would add, innermost first.
    app = server.streamable_http_app(
        streamable_http_path=path, host=host, transport_security=off, token_verifier=verifier
    )
    app.add_middleware(AuthContextMiddleware)
    app.add_middleware(AuthenticationMiddleware, backend=BearerAuthBackend(verifier))
    return app


def _result(text: str, *, is_error: bool) -> types.CallToolResult:
    from mcp import types

    # Registered secrets (HTTP tools' `${ENV}` credentials) never reach the client, which is
    # a model's host: one step, `redact_data`, as on the daemon's ways out.
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=redact_data(text))], is_error=is_error
    )


def _structured(name: str, schema: dict[str, Any], run: ToolRun) -> types.CallToolResult:
    """A typed tool's result: the text, and the raw value as `structuredContent`.

    The MCP spec binds a server to its `outputSchema`, and the official client refuses content
    that does not match: a tool that returned something else gets an error result saying so.
    """
    from jsonschema import Draft202012Validator
    from mcp import types

    # `value` is the raw return; a run that did not record it (set) has only its text.
    value = run.value if "value" in run.model_fields_set else _parsed(run.output)
    content = structured_content(schema, value)
    wanted = mcp_output_schema(schema)
    problem = next(iter(Draft202012Validator(wanted).iter_errors(content)), None)
    if problem is not None:
        logger.warning("%s returned a value that does not match its return type", name)
        return _result(
            f"The tool returned a value that does not match its declared return type "
            f"({problem.message}); its output was: {run.output}",
            is_error=True,
        )
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=redact_data(run.output))],
        structured_content=redact_data(content),
        is_error=False,
    )


def _parsed(output: str) -> Any:
    try:
        return json.loads(output)
    except ValueError:
        return output


def _annotations(spec: ToolSpec) -> types.ToolAnnotations | None:
    """Only what the tool is known to be: a hint left out is the protocol's cautious default."""
    from mcp import types

    hints: dict[str, Any] = {}
    if spec.title:
        hints["title"] = spec.title
    if spec.options.confirm:
        hints["destructive_hint"] = True
    elif spec.options.read_only:
        hints["read_only_hint"] = True
    if spec.options.idempotent:
        hints["idempotent_hint"] = True
    return types.ToolAnnotations(**hints) if hints else None

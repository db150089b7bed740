"""The emulated agent's brain: decide, round after round, to call tools or to answer.

Two sources of decisions, both deterministic:

1. a scenario (`bridge.emulator.scenario`): the first rule whose regex matches the query (and
   whose tools were sent) scripts the rounds and the answer;
2. the default planner, for any manifests and no scenario (or no matching rule):

   - it calls the tool that best matches the query, with arguments read from it; a list in
     the query ("Paris and Tokyo", "北京和上海") makes a parallel batch, one call per item
     (the rules, in full: `bridge.emulator.matching`);
   - when that tool wants a person's id (``assignee_id``) and the query names the person
     (``for Chloé``), another tool sent with the run that finds people by name is called
     first, and the first record's ``id`` fills the parameter (`plan_lookup`);
   - when a call's output says ``did you mean X?`` and names a value the call was given, that
     call is made again once, with X in place of that value (as a model reads an error and
     retries: ``Tokyo`` -> ``Asia/Tokyo``);
   - then it answers with the output: the one output as it is, or one ``ITEM: output`` line
     per call (the item, or the tool's name when the calls were not made for a list).

   A query that matches no tool gets a plain answer. ``tool_choice`` of type ``function``
   forces the named tool.

Only a scenario can ask the person a question (an ``ask`` step, `AskStep`): the run pauses
until the client resumes it with the reply, which `RunContext.answers` then holds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import PlainSerializer, PlainValidator, SerializationInfo, ValidationInfo

from bridge.emulator.matching import (
    ToolInfo,
    choose_tool,
    coerce,
    fill_calls,
    has_cjk,
    looked_up_id,
    plan_lookup,
)
from bridge.emulator.scenario import Rule, Scenario, Settings
from bridge.emulator.templates import TemplateError, render, render_value

__all__ = [
    "AnswerStep",
    "AskStep",
    "CallStep",
    "CompletedAsk",
    "CompletedCall",
    "FailStep",
    "ForcedTool",
    "PlannedCall",
    "Planner",
    "RuleMatch",
    "RunContext",
    "Step",
]


@dataclass(frozen=True)
class PlannedCall:
    """A call the agent is about to ask for."""

    name: str
    arguments: dict[str, Any]
    output_name: str


@dataclass(frozen=True)
class CallStep:
    """Pause the run and ask the client to run these calls (one interrupt)."""

    calls: tuple[PlannedCall, ...]
    thought: str


@dataclass(frozen=True)
class AskStep:
    """Pause the run and ask the person `question` (a chatflow interrupt)."""

    question: str
    name: str | None
    """The ask step's ``as``: how templates name the reply."""


@dataclass(frozen=True)
class AnswerStep:
    """Finish the run with this answer."""

    text: str
    follow_up: tuple[str, ...] = ()
    """Suggested next questions (a scenario's ``follow_up``); empty for none."""
    dialog_event: dict[str, Any] | None = None
    """The outputs of a chatflow ``multiple_dialog_event`` to send with the answer, if any."""


@dataclass(frozen=True)
class FailStep:
    """Finish the run with an error event (a scenario that cannot be followed)."""

    code: str
    message: str


Step = CallStep | AskStep | AnswerStep | FailStep


@dataclass(frozen=True)
class CompletedCall:
    """A call whose output the client submitted."""

    call_id: str
    name: str
    output_name: str
    arguments: dict[str, Any]
    output: str


@dataclass(frozen=True)
class CompletedAsk:
    """A question the person answered (by resuming its interrupt)."""

    interrupt_id: str
    name: str | None
    question: str
    answer: str


def _rule_position(rule: Rule, info: SerializationInfo) -> int:
    """A rule as a state file keeps it: its position in the scenario (`bridge.emulator.saving`)."""
    rules = info.context["rules"] if isinstance(info.context, dict) else []
    return next(index for index, known in enumerate(rules) if known is rule)


def _rule_at(value: Any, info: ValidationInfo) -> Rule:
    """The rule at a saved position in the scenario the emulator runs now."""
    rules = info.context["rules"] if isinstance(info.context, dict) else []
    if not isinstance(value, int) or not 0 <= value < len(rules):
        raise ValueError(f"the scenario has no rule {value!r} (it changed since)")
    rule: Rule = rules[value]
    return rule


@dataclass(frozen=True)
class RuleMatch:
    """The scenario rule that took a run, and the template values it captured."""

    rule: Annotated[Rule, PlainValidator(_rule_at), PlainSerializer(_rule_position)]
    index: int
    values: dict[str, Any]


@dataclass(frozen=True)
class ForcedTool:
    """``tool_choice`` of type function: the tool and the arguments given with it."""

    name: str
    input: dict[str, Any]


@dataclass
class RunContext:
    """Everything the planner knows about one run (one query and its tool rounds)."""

    query: str
    tools: tuple[ToolInfo, ...]
    forced: ForcedTool | None = None
    match: RuleMatch | None = None
    rounds: list[list[CompletedCall]] = field(default_factory=list)
    answers: list[CompletedAsk] = field(default_factory=list)

    @property
    def steps_done(self) -> int:
        """Steps completed so far: every step is one tool round or one answered question."""
        return len(self.rounds) + len(self.answers)

    def tool(self, name: str) -> ToolInfo | None:
        """The tool called `name` among those sent with the run."""
        return next((t for t in self.tools if t.name == name), None)

    def outputs(self) -> dict[str, str]:
        """Outputs by name (a call's `as` or its tool name); later rounds win."""
        return {c.output_name: c.output for round_ in self.rounds for c in round_}

    def answer_values(self) -> dict[str, str]:
        """Replies by their ask step's `as` (unnamed asks left out); later ones win."""
        return {a.name: a.answer for a in self.answers if a.name is not None}


class Planner:
    """Decides the next step of a run from a scenario or, failing that, the manifests."""

    def __init__(self, scenario: Scenario | None = None) -> None:
        self.scenario = scenario
        self.settings = scenario.settings if scenario else Settings()

    def match(self, query: str, tool_names: Iterable[str]) -> RuleMatch | None:
        """The first scenario rule that matches `query` and whose tools were all sent."""
        if self.scenario is None:
            return None
        sent = set(tool_names)
        for index, rule in enumerate(self.scenario.rules):
            found = rule.pattern.search(query)
            if found is None or (rule.require_tools and not rule.tools <= sent):
                continue
            values: dict[str, Any] = {k: v or "" for k, v in found.groupdict().items()}
            values["query"] = query
            return RuleMatch(rule=rule, index=index, values=values)
        return None

    def next_step(self, run: RunContext) -> Step:
        """What the agent does now, given the rounds completed so far."""
        step = self._decide(run)
        return self._with_extras(step, run) if isinstance(step, AnswerStep) else step

    def _decide(self, run: RunContext) -> Step:
        if run.forced is not None:
            return self._forced(run, run.forced)
        if run.match is not None:
            return self._scripted(run, run.match)
        if self.scenario is not None and self.settings.fallback == "plain":
            return self._plain(run.query)
        return self._default(run)

    def _with_extras(self, step: AnswerStep, run: RunContext) -> Step:
        """The answer with the scenario's follow-up questions and dialog event, if it has any."""
        rule = run.match.rule if run.match is not None else None
        templates = rule.follow_up if rule is not None and rule.follow_up is not None else None
        if templates is None and self.scenario is not None:
            templates = self.scenario.app.follow_up_queries
        event = rule.multiple_dialog_event if rule is not None else None
        if not templates and event is None:
            return step
        values = run.match.values if run.match is not None else {"query": run.query}
        outputs, answers = run.outputs(), run.answer_values()
        where = f"scenario rule {run.match.index} ({rule.label})" if run.match and rule else "app"
        try:
            follow_up = tuple(render(t, values, outputs, answers) for t in templates or ())
        except TemplateError as exc:
            return FailStep("ScenarioTemplateError", f"{where}: follow_up: {exc}")
        try:
            dialog = None if event is None else _render_arguments(event, values, outputs, answers)
        except TemplateError as exc:
            return FailStep("ScenarioTemplateError", f"{where}: multiple_dialog_event: {exc}")
        return AnswerStep(step.text, follow_up, dialog)

    # --- default planner ----------------------------------------------------------------

    def _default(self, run: RunContext) -> Step:
        tool = choose_tool(run.query, run.tools)
        if tool is None:
            return self._plain(run.query)
        return self._plan(run, tool, tool.name, {})

    def _forced(self, run: RunContext, forced: ForcedTool) -> Step:
        tool = run.tool(forced.name)
        if tool is None:
            if run.rounds:
                return AnswerStep(_answer_from(run.rounds[-1]))
            call = PlannedCall(forced.name, dict(forced.input), forced.name)
            return CallStep((call,), _thought(run.query, [forced.name]))
        return self._plan(run, tool, forced.name, forced.input)

    def _plan(self, run: RunContext, tool: ToolInfo, name: str, forced: Mapping[str, Any]) -> Step:
        """The default plan, recomputed each round (it is deterministic): an id looked up by
        name if needed, the calls, one retry of what an output corrected, the answer."""
        lookup = plan_lookup(run.query, tool, run.tools)
        if lookup is not None and lookup.param in forced:
            lookup = None
        if lookup is not None:
            if not run.rounds:
                call = PlannedCall(lookup.tool, lookup.arguments, lookup.tool)
                return CallStep((call,), _thought(run.query, [lookup.tool]))
            if len(run.rounds) == 1:
                found = looked_up_id(run.rounds[0][0].output)
                given = {lookup.param: found} if found is not None else {}
                return _calls(run.query, tool, name, forced, given)
        rounds = run.rounds[1:] if lookup is not None else run.rounds
        if not rounds:
            return _calls(run.query, tool, name, forced, {})
        if len(rounds) == 1:
            retries = [r for r in map(_retry, rounds[0]) if r is not None]
            if retries:
                return CallStep(tuple(retries), _retry_thought(run.query, retries))
        latest = {c.output_name: c for round_ in rounds for c in round_}
        return AnswerStep(_answer_from([latest[c.output_name] for c in rounds[0]]))

    def _plain(self, query: str) -> AnswerStep:
        template = self.settings.plain_answer
        if template is not None:
            return AnswerStep(render(template, {"query": query}, {}))
        if has_cjk(query):
            return AnswerStep(f"（模拟回答）没有匹配的工具，直接回答您的问题：{query}")
        return AnswerStep(f"(emulated answer) No tool matched, so a plain reply to: {query}")

    # --- scenario -----------------------------------------------------------------------

    def _scripted(self, run: RunContext, match: RuleMatch) -> Step:
        rule, k = match.rule, run.steps_done
        outputs, answers = run.outputs(), run.answer_values()
        where = f"scenario rule {match.index} ({rule.label})"
        if k < len(rule.steps):
            step = rule.steps[k]
            if step.ask is not None:
                try:
                    question = render(step.ask, match.values, outputs, answers)
                except TemplateError as exc:
                    return FailStep("ScenarioTemplateError", f"{where}: steps[{k}].ask: {exc}")
                return AskStep(question, step.alias)
            calls = []
            for c, call in enumerate(step.calls):
                try:
                    arguments = _render_arguments(call.arguments, match.values, outputs, answers)
                except TemplateError as exc:
                    return FailStep(
                        "ScenarioTemplateError",
                        f"{where}: steps[{k}].calls[{c}].arguments: {exc}",
                    )
                tool = run.tool(call.tool)
                if tool is not None:
                    arguments = {n: coerce(v, tool.param(n)) for n, v in arguments.items()}
                calls.append(PlannedCall(call.tool, arguments, call.output_name))
            thought_template = step.thought or rule.thought
            try:
                thought = (
                    render(thought_template, match.values, outputs, answers)
                    if thought_template
                    else _thought(run.query, [c.name for c in calls])
                )
            except TemplateError as exc:
                return FailStep("ScenarioTemplateError", f"{where}: thought: {exc}")
            return CallStep(tuple(calls), thought)
        if rule.answer is None:
            done = [c for round_ in run.rounds for c in round_]
            return AnswerStep(_answer_from(done) if done else self._plain(run.query).text)
        try:
            return AnswerStep(render(rule.answer, match.values, outputs, answers))
        except TemplateError as exc:
            return FailStep("ScenarioTemplateError", f"{where}: answer: {exc}")


def _render_arguments(
    arguments: Mapping[str, Any],
    values: Mapping[str, Any],
    outputs: Mapping[str, str],
    answers: Mapping[str, str],
) -> dict[str, Any]:
    return {key: _render_any(value, values, outputs, answers) for key, value in arguments.items()}


def _render_any(
    value: Any, values: Mapping[str, Any], outputs: Mapping[str, str], answers: Mapping[str, str]
) -> Any:
    if isinstance(value, str):
        return render_value(value, values, outputs, answers)
    if isinstance(value, dict):
        return {k: _render_any(v, values, outputs, answers) for k, v in value.items()}
    if isinstance(value, list):
        return [_render_any(v, values, outputs, answers) for v in value]
    return value


def _calls(
    query: str,
    tool: ToolInfo,
    name: str,
    forced: Mapping[str, Any],
    given: Mapping[str, Any],
) -> CallStep:
    """The default planner's calls: one, or one per item of a list in the query."""
    filled = fill_calls(query, tool, given)
    calls: list[PlannedCall] = []
    for index, call in enumerate(filled):
        arguments = {**call.arguments, **forced}
        # Distinct names, so the answer can say which output is which.
        label = call.item if call.item is not None and len(filled) > 1 else name
        if any(c.output_name == label for c in calls):
            label = f"{label}#{index + 1}"
        calls.append(PlannedCall(name, arguments, label))
    return CallStep(tuple(calls), _thought(query, [c.name for c in calls]))


_SUGGESTION = re.compile(r"did you mean:?\s*[\"'`]?([^\s,;?\"'`]+)", re.IGNORECASE)


def _retry(call: CompletedCall) -> PlannedCall | None:
    """The call again with the value its output suggested, if it suggested one."""
    found = _SUGGESTION.search(call.output)
    if found is None:
        return None
    fix = found.group(1).rstrip(".")
    for key, value in call.arguments.items():
        if isinstance(value, str) and value and value != fix and value in call.output:
            return PlannedCall(call.name, {**call.arguments, key: fix}, call.output_name)
    return None


def _retry_thought(query: str, calls: Sequence[PlannedCall]) -> str:
    listed = ", ".join(dict.fromkeys(c.name for c in calls))
    if has_cjk(query):
        return f"工具提示了正确的取值，用它再调用一次 {listed}。"
    return f"The tool suggested a correct value; calling {listed} again with it."


def _answer_from(calls: Sequence[CompletedCall]) -> str:
    """The default answer: the one output as is, or one ``name: output`` line per call."""
    if len(calls) == 1:
        return calls[0].output
    return "\n".join(f"{c.output_name}: {c.output}" for c in calls)


def _thought(query: str, names: Sequence[str]) -> str:
    listed = ", ".join(dict.fromkeys(names))
    if has_cjk(query):
        return f"用户的问题需要调用工具 {listed} 才能回答：{query}"
    return f"To answer the question I need to call {listed}: {query}"

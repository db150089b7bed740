"""The emulated agent's brain: decide, round after round, to call tools or to answer.

Two sources of decisions, both deterministic:

1. a scenario (`bridge.emulator.scenario`): the first rule whose regex matches the query (and
   whose tools were sent) scripts the rounds and the answer;
2. the default planner, for any manifests and no scenario (or no matching rule): round 0 calls
   the tool that best matches the query with arguments read from it
   (`bridge.emulator.matching`), round 1 answers with the tool output. A query that matches no
   tool gets a plain answer. ``tool_choice`` of type ``function`` forces the named tool.

Only a scenario can ask the person a question (an ``ask`` step, `AskStep`): the run pauses
until the client resumes it with the reply, which `RunContext.answers` then holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bridge.emulator.matching import ToolInfo, choose_tool, coerce, fill_arguments, has_cjk
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


@dataclass(frozen=True)
class RuleMatch:
    """The scenario rule that took a run, and the template values it captured."""

    rule: Rule
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
        if run.forced is not None:
            return self._forced(run, run.forced)
        if run.match is not None:
            return self._scripted(run, run.match)
        if self.scenario is not None and self.settings.fallback == "plain":
            return self._plain(run.query)
        return self._default(run)

    # --- default planner ----------------------------------------------------------------

    def _default(self, run: RunContext) -> Step:
        if run.rounds:
            return AnswerStep(_answer_from(run.rounds[-1]))
        tool = choose_tool(run.query, run.tools)
        if tool is None:
            return self._plain(run.query)
        call = PlannedCall(tool.name, fill_arguments(run.query, tool), tool.name)
        return CallStep((call,), _thought(run.query, [tool.name]))

    def _forced(self, run: RunContext, forced: ForcedTool) -> Step:
        if run.rounds:
            return AnswerStep(_answer_from(run.rounds[-1]))
        tool = run.tool(forced.name)
        arguments = fill_arguments(run.query, tool) if tool is not None else {}
        arguments.update(forced.input)
        call = PlannedCall(forced.name, arguments, forced.name)
        return CallStep((call,), _thought(run.query, [forced.name]))

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


def _answer_from(calls: Sequence[CompletedCall]) -> str:
    """The default answer: the one output as is, or one ``name: output`` line per call."""
    if len(calls) == 1:
        return calls[0].output
    return "\n".join(f"{c.output_name}: {c.output}" for c in calls)


def _thought(query: str, names: Sequence[str]) -> str:
    listed = ", ".join(names)
    if has_cjk(query):
        return f"用户的问题需要调用工具 {listed} 才能回答：{query}"
    return f"To answer the question I need to call {listed}: {query}"

"""Scenario files: script the emulated agent with rules (YAML or JSON).

A scenario is a list of rules tried in order against each new query. A rule matches when its
regex is found in the query (``re.search``) and, by default, every tool it calls was sent with
the run. It then calls tools in steps (all calls of one step form one interrupt, so they run in
parallel; each further step is another round and can use earlier outputs) and finally answers
from a template. Example (the shipped ``scenarios/weather.yaml`` is a longer one)::

    settings:
      model: ERNIE-4.0-8K        # the usage name on text events
      chunk_chars: 8             # characters per streamed answer delta
      fallback: default          # no rule matched: default planner, or "plain" answer
    rules:
      - name: weather
        match: "(?P<city>北京|上海|Paris)"
        steps:
          - tool: get_weather                    # a step with one call
            arguments: {city: "{city}", unit: celsius}
          - calls:                               # a step with parallel calls
              - {tool: advise, as: advice, arguments: {temp: "{outputs.get_weather.temp}"}}
        answer: "{city}: {outputs.get_weather.temp} degrees. {outputs.advice}"
        faults: "delay=0.01"                     # optional, see bridge.emulator.faults

The optional ``app`` section describes the app as the console endpoints report it
(``POST /v2/app?Action=DescribeApps|DescribeApp``, ``GET /v2/apps``)::

    app:
      name: 天气助手
      description: 查询天气并给出穿衣建议
      type: agent                # or chatflow
      instruction: 你是一个天气助手
      prologue: 你好，我可以帮你查天气
      example_queries: [北京今天天气怎么样？]
      components:                # the app's own components, for tool_choice
        - code: WeatherQuery     # the English name tool_choice gives
          name: 天气查询
          parameters:
            type: object
            properties: {city: {type: string}}
            required: [city]
          answer: "{city}今天晴，25°C"   # the component's result (default: a line naming it)

A run whose ``tool_choice`` names a component (and no tool of the run) calls it on the server
side, as the platform does: its ``input`` gives the arguments, and when it omits the only
required one, the query fills it. The events are the platform's: ``function_call`` (component
code, name, arguments), the component's own ``preparing``, ``text/done`` and ``success``, then
the agent's answer, which is the component's result.

A rule can suggest next questions with its answer (a ``FollowUpQuery`` event, ``content_type``
``json``, ``outputs`` ``{"json": {"follow_up_querys": [...]}}``) and send a chatflow
``multiple_dialog_event`` (its ``outputs`` as given) with it; ``app.follow_up_queries`` are the
follow-ups of every other answer::

      - name: capabilities
        match: "你能做什么"
        answer: 我能查天气
        follow_up: ["北京天气怎么样？", "{query}？"]   # templates, like the answer
        multiple_dialog_event: {dialog: weather}      # values may be templates

A step can also ask the person a question instead of calling tools, the way an AppBuilder
workflow's information-collection node (信息收集节点) does::

      - name: booking
        match: "预订(?P<what>会议室|餐厅)"
        steps:
          - ask: "您要预订哪一天？"                 # the run pauses here
            as: date                              # the reply is {answers.date}
          - tool: book
            arguments: {what: "{what}", date: "{answers.date}"}
        answer: "已为您预订{answers.date}的{what}：{outputs.book}"

Reaching an ``ask`` step ends the response with the question (a ``publish_message`` event) and
a ``chatflow_interrupt`` event carrying a fresh ``interrupt_event_id`` (the wire shape is in
`bridge.emulator.appbuilder.render`). The next request of the conversation must resume it: its
``query`` is the person's reply and its ``action`` is ``{"action_type": "resume", "parameters":
{"interrupt_event": {"id": <interrupt_event_id>, "type": "chat"}}}``; the rule then goes on with
its next step. Like pending tool calls, a pending question must be answered first: tool
outputs or a resume with another id get HTTP 400 naming the expected id. A query without
``action`` is taken as the reply, as the platform does (the official SDK's event handler, in
non-stream mode, never sees the interrupt and sends the reply that way). ``{query}`` stays
the query that matched the rule; replies are only reachable by name, so give ``as`` to an ask
whose reply a later template uses. The question itself is a template too. An ask step takes
no ``thought`` and no ``calls``.

Template syntax: see `bridge.emulator.templates`. Every placeholder is checked when the file is
loaded, and errors name the file and the key (``weather.yaml: rules[0].steps[1]...``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from bridge.emulator.faults import FaultSpec, FaultSpecError, parse_faults
from bridge.emulator.templates import (
    NAMED_ROOTS,
    Placeholder,
    TemplateSyntaxError,
    parse_template,
)
from bridge.emulator.wire import TOOL_NAME_PATTERN, format_validation_error, schema_problems
from bridge.errors import UsageError

__all__ = [
    "App",
    "Call",
    "Component",
    "Rule",
    "Scenario",
    "ScenarioError",
    "Settings",
    "Step",
    "load_scenario",
    "split_section",
    "with_sections",
]


class ScenarioError(UsageError, ValueError):
    """A scenario that cannot be loaded; the message names the file and the key."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Settings(_Model):
    """Scenario-wide settings."""

    model: str = "ERNIE-4.0-8K"
    """The model name reported in `usage` objects."""
    chunk_chars: int = Field(default=8, ge=1, le=10_000)
    """How many characters of the answer each streamed text delta carries."""
    fallback: Literal["default", "plain"] = "default"
    """What to do when no rule matches: the default planner, or a plain answer."""
    plain_answer: str | None = None
    """Template of the plain answer (``{query}`` available); None for the built-in one."""


class Call(_Model):
    """One tool call of a step."""

    tool: str = Field(pattern=TOOL_NAME_PATTERN)
    arguments: dict[str, Any] = Field(default_factory=dict)
    alias: str | None = Field(default=None, alias="as", pattern=TOOL_NAME_PATTERN)
    """Name of this call's output in templates (default: the tool name)."""

    @property
    def output_name(self) -> str:
        """The name templates use for this call's output."""
        return self.alias or self.tool


class Step(_Model):
    """One round: its calls are sent together in one interrupt, or one question is asked."""

    calls: list[Call] = Field(default_factory=list, min_length=1)
    thought: str | None = None
    ask: str | None = Field(default=None, min_length=1)
    """Template of a question for the person; the run pauses until it is answered."""
    alias: str | None = Field(default=None, alias="as", pattern=TOOL_NAME_PATTERN)
    """Name of the reply in templates (``{answers.NAME}``); only for an `ask` step."""

    @model_validator(mode="before")
    @classmethod
    def _single_call(cls, data: Any) -> Any:
        # A step may be written as a bare call: {tool: x, arguments: {...}}.
        if isinstance(data, dict) and "tool" in data:
            if "ask" in data:
                raise ValueError(_ONE_KIND)
            thought = data.get("thought")
            call = {k: v for k, v in data.items() if k != "thought"}
            return {"calls": [call], "thought": thought}
        return data

    @model_validator(mode="after")
    def _one_kind(self) -> Step:
        if self.ask is None:
            if not self.calls:
                raise ValueError(
                    "a step needs 'tool' or 'calls' (to call tools) or 'ask' (to ask the "
                    "person a question)"
                )
            if self.alias is not None:
                raise ValueError(
                    "'as' on a step names the reply to its 'ask'; this step has none (to name "
                    "a tool's output, put 'as' on the call)"
                )
            return self
        if self.calls:
            raise ValueError(_ONE_KIND)
        if self.thought is not None:
            raise ValueError("an 'ask' step takes no 'thought' (thoughts explain tool calls)")
        return self

    @property
    def is_ask(self) -> bool:
        """True for a step that asks the person a question."""
        return self.ask is not None


_ONE_KIND = (
    "a step either calls tools ('tool' or 'calls') or asks a question ('ask'), not both; "
    "split it into two steps"
)


class Rule(_Model):
    """Match a query and script the agent's answer to it."""

    name: str | None = None
    match: str
    """A regular expression searched in the query; named groups become template values."""
    ignore_case: bool = True
    require_tools: bool = True
    """Match only if every tool the rule calls was sent with the run."""
    thought: str | None = None
    steps: list[Step] = Field(default_factory=list)
    answer: str | None = None
    """Template of the final answer; None answers with the tool outputs."""
    follow_up: list[str] | None = None
    """Templates of suggested next questions sent with the answer (a ``FollowUpQuery``
    event); None for the app's ``follow_up_queries``, ``[]`` for none."""
    multiple_dialog_event: dict[str, Any] | None = None
    """Outputs (values may be templates) of a chatflow ``multiple_dialog_event`` sent with
    the answer, as a workflow does when a reply takes the conversation back to another
    dialog; None for no such event."""
    faults: str | None = None

    _pattern: re.Pattern[str] = PrivateAttr()
    _faults: FaultSpec | None = PrivateAttr(default=None)

    @property
    def pattern(self) -> re.Pattern[str]:
        """The compiled `match`."""
        return self._pattern

    @property
    def fault_spec(self) -> FaultSpec | None:
        """The parsed `faults`."""
        return self._faults

    @property
    def tools(self) -> set[str]:
        """Every tool the rule calls."""
        return {call.tool for step in self.steps for call in step.calls}

    @property
    def label(self) -> str:
        """How logs and errors name the rule."""
        return self.name or self.match


class Component(_Model):
    """One of the app's own components (组件), callable through ``tool_choice`` only."""

    code: str = Field(pattern=TOOL_NAME_PATTERN)
    """The English name (唯一标识) that ``tool_choice.function.name`` gives."""
    name: str | None = None
    """The display name (default: `code`)."""
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    """The component's inputs, a JSON Schema object (``required`` ones must be given)."""
    answer: str | None = None
    """Template of the component's result, which becomes the reply (``{query}`` and the
    inputs by name); None for a built-in line naming the component and its inputs."""

    @property
    def display_name(self) -> str:
        """The name events and the console show."""
        return self.name or self.code


class App(_Model):
    """What the console endpoints (``DescribeApps``, ``DescribeApp``, ``GET /v2/apps``) say
    about the emulated app; none of it changes how runs are planned."""

    name: str = "Emulated app"
    description: str = "An AppBuilder app emulated by toolbridge"
    type: Literal["agent", "chatflow"] = "agent"
    """``agent`` (自主规划 Agent) or ``chatflow`` (工作流 Agent), the console's ``appType``."""
    instruction: str = ""
    """The role instruction (角色指令)."""
    prologue: str = ""
    """The opening line (开场白)."""
    example_queries: list[str] = Field(default_factory=list)
    """The recommended questions (推荐问题)."""
    components: list[Component] = Field(default_factory=list)
    """Components a run can force with ``tool_choice`` (not sent as the run's tools)."""
    follow_up_queries: list[str] = Field(default_factory=list)
    """Templates (``{query}``) of suggested next questions sent with every answer of a rule
    without its own ``follow_up`` and of the default planner (追问)."""

    def component(self, code: str) -> Component | None:
        """The component whose `code` is `code`."""
        return next((c for c in self.components if c.code == code), None)


class Scenario(_Model):
    """A whole scenario file."""

    settings: Settings = Field(default_factory=Settings)
    app: App = Field(default_factory=App)
    rules: list[Rule] = Field(default_factory=list)
    source: str = Field(default="<scenario>", exclude=True)


def load_scenario(source: str | Path | Mapping[str, Any] | Scenario) -> Scenario:
    """Load and check a scenario from a file path, a mapping, or return a `Scenario` as is.

    Raises:
        ScenarioError: the file is missing or unreadable, is not YAML/JSON, or breaks the
            format; the message names the file and the key.
    """
    if isinstance(source, Scenario):
        return source
    if isinstance(source, Mapping):
        return _build(dict(source), "<scenario>")
    path = Path(source)
    label = str(path)
    data = _read_file(path)
    if data is None:
        raise ScenarioError(f"{label}: the scenario file is empty; expected a mapping with 'rules'")
    if not isinstance(data, dict):
        raise ScenarioError(
            f"{label}: the top level is a {type(data).__name__}; expected a mapping with 'rules'"
        )
    return _build(data, label)


def with_sections(
    source: str | Path | Mapping[str, Any] | None, sections: Mapping[str, Any]
) -> str | Path | Mapping[str, Any] | None:
    """`source` (a scenario file or mapping, or None) with the protocol `sections` it lacks.

    How the bridge's tools are declared to an emulated agent whose tools are configured
    server-side (``{"coze": {"plugins": [...]}}``, a Coze bot's plugins): a section the
    scenario writes itself wins. Without `sections` the source is returned unchanged, so a
    file's errors keep naming the file.

    Raises:
        ScenarioError: the file is missing, unreadable, not YAML/JSON or not a mapping.
    """
    if not sections:
        return source
    if source is None:
        return dict(sections)
    if isinstance(source, Mapping):
        return {**sections, **source}
    path = Path(source)
    data = _read_file(path)
    if not isinstance(data, dict):
        return source  # loading it says what is wrong, naming the file
    return {**sections, **data}


C = TypeVar("C", bound=BaseModel)


def split_section(
    source: str | Path | Mapping[str, Any],
    section: str,
    config: type[C],
    *,
    whole_without_section: bool = False,
) -> tuple[Scenario | None, C]:
    """A protocol's own `section` of a scenario source (a `config`, its defaults when absent)
    and the shared scenario in the rest (None when nothing else is there).

    A source that is not a mapping is loaded as a whole, so loading it says what is wrong;
    with `whole_without_section`, so is one without the section.

    Raises:
        ScenarioError: the file cannot be read or either part breaks its format; the message
            names the file and the key.
    """
    label = "<scenario>"
    data: Any
    if isinstance(source, Mapping):
        data = dict(source)
    else:
        path = Path(source)
        label = str(path)
        data = _read_file(path)
    if not isinstance(data, dict) or (whole_without_section and section not in data):
        return load_scenario(source), config()
    part = data.pop(section, None)
    try:
        parsed = config.model_validate(part or {})
    except ValidationError as exc:
        raise ScenarioError(f"{label}: {section}: {format_validation_error(exc)}") from None
    if not data:
        return None, parsed
    try:
        return load_scenario(data), parsed
    except ScenarioError as exc:
        # load_scenario names a mapping "<scenario>"; the person wrote a file.
        raise ScenarioError(str(exc).replace("<scenario>", label, 1)) from None


def _read_file(path: Path) -> Any:
    """What a scenario file holds, parsed (None for an empty YAML file).

    Raises:
        ScenarioError: the file is missing or unreadable, or is not YAML/JSON.
    """
    label = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(f"{label}: scenario file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{label}: cannot read the scenario file: {exc}") from None
    return _parse_text(text, label, json_only=path.suffix.lower() == ".json")


def _parse_text(text: str, label: str, *, json_only: bool) -> Any:
    if json_only:
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ScenarioError(
                f"{label}: line {exc.lineno}, column {exc.colno}: not valid JSON: {exc.msg}"
            ) from None
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ScenarioError(f"{label}: {where}not valid YAML: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{label}: not valid YAML: {exc}") from None


def _build(data: dict[str, Any], label: str) -> Scenario:
    try:
        scenario = Scenario.model_validate({**data, "source": label})
    except ValidationError as exc:
        raise ScenarioError(f"{label}: {format_validation_error(exc)}") from None
    _check_settings(scenario, label)
    _check_components(scenario, label)
    for index, rule in enumerate(scenario.rules):
        _check_rule(rule, f"{label}: rules[{index}]")
    return scenario


def _check_settings(scenario: Scenario, label: str) -> None:
    if scenario.settings.plain_answer is not None:
        _check_template(
            scenario.settings.plain_answer, f"{label}: settings.plain_answer", {"query"}, set()
        )


def _check_components(scenario: Scenario, label: str) -> None:
    for i, template in enumerate(scenario.app.follow_up_queries):
        _check_template(template, f"{label}: app.follow_up_queries[{i}]", {"query"}, set())
    seen: set[str] = set()
    for index, component in enumerate(scenario.app.components):
        where = f"{label}: app.components[{index}]"
        if component.code in seen:
            raise ScenarioError(f"{where}.code: {component.code!r} is used by two components")
        seen.add(component.code)
        schema = component.parameters
        problems = schema_problems(schema, f"{where}.parameters")
        if schema.get("type") != "object":
            problems.insert(0, f"{where}.parameters: the inputs must be a schema of type 'object'")
        if problems:
            raise ScenarioError("; ".join(problems))
        if component.answer is not None:
            names = {"query", *schema.get("properties", {})}
            _check_template(component.answer, f"{where}.answer", names, set())


def _check_rule(rule: Rule, where: str) -> None:
    flags = re.IGNORECASE if rule.ignore_case else 0
    try:
        pattern = re.compile(rule.match, flags)
    except re.error as exc:
        raise ScenarioError(f"{where}.match: not a valid regular expression: {exc}") from None
    rule._pattern = pattern
    if rule.faults is not None:
        try:
            rule._faults = parse_faults(rule.faults)
        except FaultSpecError as exc:
            raise ScenarioError(f"{where}.faults: {exc.message}") from None
    reserved = sorted(set(pattern.groupindex) & set(NAMED_ROOTS))
    if reserved:
        raise ScenarioError(
            f"{where}.match: the group name {reserved[0]!r} is reserved for "
            f"{{{reserved[0]}.NAME}} placeholders; rename the group"
        )
    names = {"query", *pattern.groupindex}
    outputs: set[str] = set()
    answers: set[str] = set()
    if rule.thought is not None:
        _check_template(rule.thought, f"{where}.thought", names, outputs, answers)
    for s, step in enumerate(rule.steps):
        step_where = f"{where}.steps[{s}]"
        if step.ask is not None:
            _check_template(step.ask, f"{step_where}.ask", names, outputs, answers)
            if step.alias is not None:
                answers.add(step.alias)
            continue
        if step.thought is not None:
            _check_template(step.thought, f"{step_where}.thought", names, outputs, answers)
        seen: set[str] = set()
        for c, call in enumerate(step.calls):
            call_where = f"{step_where}.calls[{c}]"
            if call.output_name in seen:
                raise ScenarioError(
                    f"{call_where}: two calls of one step are both named {call.output_name!r}; "
                    "give each its own 'as' so their outputs can be told apart"
                )
            seen.add(call.output_name)
            _check_arguments(call.arguments, f"{call_where}.arguments", names, outputs, answers)
        outputs |= seen
    if rule.answer is not None:
        _check_template(rule.answer, f"{where}.answer", names, outputs, answers)
    for i, template in enumerate(rule.follow_up or []):
        _check_template(template, f"{where}.follow_up[{i}]", names, outputs, answers)
    if rule.multiple_dialog_event is not None:
        _check_arguments(
            rule.multiple_dialog_event, f"{where}.multiple_dialog_event", names, outputs, answers
        )


def _check_arguments(
    value: Any, where: str, names: set[str], outputs: set[str], answers: set[str]
) -> None:
    if isinstance(value, str):
        _check_template(value, where, names, outputs, answers)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_arguments(item, f"{where}.{key}", names, outputs, answers)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_arguments(item, f"{where}[{i}]", names, outputs, answers)


def _check_template(
    template: str,
    where: str,
    names: set[str],
    outputs: set[str],
    answers: set[str] | None = None,
) -> None:
    try:
        parts = parse_template(template)
    except TemplateSyntaxError as exc:
        raise ScenarioError(f"{where}: {exc}") from None
    for part in parts:
        if not isinstance(part, Placeholder):
            continue
        if part.root == "outputs":
            if part.alias not in outputs:
                known = ", ".join(sorted(outputs)) or "none: no earlier step calls a tool"
                raise ScenarioError(
                    f"{where}: {{{part.text}}} uses the output {part.alias!r}, which no earlier "
                    f"step produces (available: {known})"
                )
        elif part.root == "answers":
            if part.alias not in (answers or set()):
                known = ", ".join(sorted(answers or ())) or "none: no earlier ask step has 'as'"
                raise ScenarioError(
                    f"{where}: {{{part.text}}} uses the answer {part.alias!r}, which no earlier "
                    f"'ask' step names with 'as: {part.alias}' (available: {known})"
                )
            if part.path:
                raise ScenarioError(
                    f"{where}: {{{part.text}}}: only outputs.NAME can be followed by a path "
                    "(an answer is plain text)"
                )
        elif part.root not in names:
            raise ScenarioError(
                f"{where}: unknown placeholder {{{part.text}}}; known names: "
                f"{', '.join(sorted(names))}, and outputs.TOOL for earlier outputs, "
                "answers.NAME for earlier replies"
            )
        elif part.path:
            raise ScenarioError(
                f"{where}: {{{part.text}}}: only outputs.NAME can be followed by a path"
            )

"""For any caller file, a caller may run exactly the tools some of its roles list: what
`Principal.may_run` says agrees with a plain `fnmatch` reading of the file, and a caller never
gets a tool outside the union of its roles' lists."""

from __future__ import annotations

import fnmatch
import hashlib
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.access import Permission, parse_callers

Role = dict[str, Any]

PIECES = ["a", "b", "_", "*", "?", "[ab]", "[!a]"]
WORDS = st.text(alphabet="ab_", min_size=1, max_size=4)
GLOBS = st.lists(st.sampled_from(PIECES), min_size=1, max_size=4).map("".join)
PATTERNS = st.one_of(WORDS, GLOBS, st.builds(lambda p: "source:" + p, st.one_of(WORDS, GLOBS)))
ROLE = st.fixed_dictionaries(
    {"permissions": st.sets(st.sampled_from([p.value for p in Permission]))},
    optional={"tools": st.lists(PATTERNS, max_size=4)},
)


@st.composite
def caller_files(draw: st.DrawFn) -> tuple[dict[str, Role], dict[str, list[str]]]:
    roles = draw(st.dictionaries(st.sampled_from(["r0", "r1", "r2", "r3"]), ROLE, min_size=1))
    callers = draw(
        st.dictionaries(
            st.sampled_from(["alice", "bob", "carol@example.com"]),
            st.lists(st.sampled_from(sorted(roles)), min_size=1, max_size=3, unique=True),
            min_size=1,
        )
    )
    return roles, callers


def toml(roles: dict[str, Role], callers: dict[str, list[str]]) -> str:
    lines = []
    for name, role in roles.items():
        lines.append(f"[roles.{name}]")
        lines.append(f"permissions = {json.dumps(sorted(role['permissions']))}")
        if "tools" in role:
            lines.append(f"tools = {json.dumps(role['tools'])}")
    for number, (name, its_roles) in enumerate(callers.items()):
        lines.append(f"[callers.{json.dumps(name)}]")
        lines.append(f'key_sha256 = "{hashlib.sha256(str(number).encode()).hexdigest()}"')
        lines.append(f"roles = {json.dumps(its_roles)}")
    return "\n".join(lines) + "\n"


def role_allows(role: Role, name: str, source: str) -> bool:
    """The reference: a role's list as written (absent: everything for admin, else nothing)."""
    tools = role.get("tools")
    admin = "admin" in role["permissions"]
    patterns = (["*"] if admin else []) if tools is None else list(tools)
    for pattern in patterns:
        if pattern.startswith("source:"):
            if source and fnmatch.fnmatchcase(source, pattern[len("source:") :]):
                return True
        elif fnmatch.fnmatchcase(name, pattern):
            return True
    return False


@settings(max_examples=300, deadline=None)
@given(caller_files(), st.lists(st.tuples(WORDS, st.one_of(st.just(""), WORDS)), min_size=1))
def test_a_caller_runs_exactly_what_its_roles_list(
    file: tuple[dict[str, Role], dict[str, list[str]]],
    tools: list[tuple[str, str]],
) -> None:
    roles, callers = file
    parsed = parse_callers(toml(roles, callers))
    assert sorted(parsed) == sorted(callers)
    for caller, its_roles in callers.items():
        principal = parsed[caller]
        assert principal.roles == set(its_roles)
        assert principal.permissions == {
            Permission(p) for role in its_roles for p in roles[role]["permissions"]
        }
        for name, source in tools:
            expected = any(role_allows(roles[role], name, source) for role in its_roles)
            assert principal.may_run(name, source) is expected, (caller, name, source)
        allowed = [
            name
            for name, source in tools
            if any(role_allows(roles[role], name, source) for role in its_roles)
        ]
        assert principal.visible(tools) == allowed, "never a tool outside its roles' lists"

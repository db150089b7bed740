"""The documentation's examples run as written: README.md and every page under docs/.

Their ```python blocks run (```py blocks are illustrations needing a server or credentials), each
alone in a fresh interpreter, offline. Their ```console blocks are transcripts: they run too, and
print what they show (```sh blocks are illustrations). The site's navigation lists every page
and leads to every topic a newcomer looks for, no page speaks of internal plans or issue
numbers, and what the pages point at still exists: relative links and their anchors, paths in
the repository, `bridge.…` names and `from bridge… import` lines."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _blocks(kind: str) -> list[tuple[str, str]]:
    """(page, block) for every ```KIND block of every page."""
    found: list[tuple[str, str]] = []
    for page in PAGES:
        text = page.read_text("utf-8")
        blocks = re.findall(rf"^```{kind}\n(.*?)^```", text, re.M | re.S)
        found += [(_name(page), block) for block in blocks]
    return found


def _ids(blocks: list[tuple[str, str]], kind: str) -> list[str]:
    seen: dict[str, int] = {}
    ids = []
    for page, _ in blocks:
        seen[page] = seen.get(page, -1) + 1
        ids.append(f"{page}:{kind}{seen[page]}")
    return ids


BLOCKS = _blocks("python")


def test_the_docs_have_runnable_examples() -> None:
    assert len(BLOCKS) >= 5
    assert any(page == "README.md" for page, _ in BLOCKS)


@pytest.mark.parametrize(("page", "code"), BLOCKS, ids=_ids(BLOCKS, "python"))
def test_block_runs(page: str, code: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("APPBUILDER_", "GATEWAY_"))}
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    # Where a block shows its output in comments, the output is what it prints.
    for line in re.findall(r"^# ((?:\d \w|unknown argument|limit:).*)$", code, re.M):
        assert line in done.stdout, f"{line!r} not in output:\n{done.stdout}"


# --- console transcripts ---------------------------------------------------------------------
#
# Every ```console block is run as shown, on the embedded emulator, and each command's shown
# output must be what it prints: stderr lines (tool lines, notes) then stdout lines (the answer),
# with durations normalised. Commands: `toolbridge ...` (run as `python -m bridge`), `export`,
# and `python -m examples.intranet.app --port N &` (started in-process on a free port, which
# replaces N in later commands). `toolbridge serve` is left out: a daemon does not end (the
# daemon's tests cover it).

CONSOLE = _blocks("console")


def _steps(block: str) -> list[tuple[str, list[str]]]:
    """(command, shown output lines) for each ``$ `` line of a console block."""
    steps: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:].strip(), []))
        elif not line.strip() or line.startswith("#"):
            if steps and steps[-1][1]:
                steps.append(("", []))  # the output ended; a later line is not part of it
        elif steps and steps[-1][0]:
            steps[-1][1].append(line)
    return [(command, shown) for command, shown in steps if command]


def _normalise(lines: list[str]) -> list[str]:
    return [re.sub(r"\b\d+(?:\.\d+)? (ms|s)\b", r"N \1", line.rstrip()) for line in lines]


def _workdir(tmp_path: Path) -> Path:
    """A working directory like the repository's root, where written files stay in tmp_path."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "manifests").mkdir()
    for path in (ROOT / "manifests").iterdir():
        (tmp_path / "manifests" / path.name).symlink_to(path)
    return tmp_path


def _toolbridge(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    args = shlex.split(command)
    assert args[0] == "toolbridge", (
        f"```console blocks are run by this test, which knows toolbridge, export and the "
        f"intranet example app; show other commands in a ```sh block: {command!r}"
    )
    return subprocess.run(
        [sys.executable, "-m", "bridge", *args[1:]],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _offline_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("APPBUILDER_", "GATEWAY_"))}
    env.pop("INTRANET_KEY", None)
    env["PYTHONPATH"] = str(ROOT)
    return env


def test_the_docs_have_transcripts() -> None:
    commands = [command for _, block in CONSOLE for command, _ in _steps(block)]
    assert any("examples/weather/tools.py" in c for c in commands)
    assert any("manifests/intranet.yaml" in c and c.startswith("toolbridge run") for c in commands)


@pytest.mark.parametrize(("page", "block"), CONSOLE, ids=_ids(CONSOLE, "console"))
def test_console_transcript(page: str, block: str, tmp_path: Path) -> None:
    from bridge._serve import serve_in_thread
    from examples.intranet.app import create_app

    cwd, env = _workdir(tmp_path), _offline_env()
    with contextlib.ExitStack() as stack:
        ports: dict[str, str] = {}
        for command, shown in _steps(block):
            for shown_port, port in ports.items():
                command = command.replace(f"127.0.0.1:{shown_port}", f"127.0.0.1:{port}")
            app = re.fullmatch(r"python -m examples\.intranet\.app --port (\d+) &", command)
            if app:
                handle = stack.enter_context(serve_in_thread(create_app(api_key="dev-key")))
                ports[app.group(1)] = str(handle.port)
                continue
            if command.startswith("export "):
                name, _, value = command.removeprefix("export ").partition("=")
                env[name] = value
                continue
            if command.startswith("toolbridge serve"):
                continue
            done = _toolbridge(command, cwd, env)
            assert done.returncode == 0, f"$ {command}\n{done.stderr}"
            assert "Traceback" not in done.stderr, done.stderr
            if shown:
                printed = [
                    line for line in [*done.stderr.splitlines(), *done.stdout.splitlines()] if line
                ]
                assert _normalise(printed) == _normalise(shown), f"$ {command}"


def test_the_ready_made_manifests_run_as_the_docs_say(tmp_path: Path) -> None:
    """`toolbridge run "what time is it in Tokyo?" --tools manifests/time.py` (and --emulator)."""
    text = "\n".join(page.read_text("utf-8") for page in PAGES)
    commands = re.findall(r"`(toolbridge run [^`]*--tools manifests/[^`]*)`", text)
    assert commands
    cwd = _workdir(tmp_path)
    for command in commands:
        if "--emulator" not in command:
            assert "add `--emulator` to try it offline" in text
            command += " --emulator"
        done = _toolbridge(command, cwd, _offline_env())
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr, done.stderr
        answer = json.loads(done.stdout.strip().splitlines()[-1])
        assert answer["timezone"] == "Asia/Tokyo", done.stdout


# --- the site's structure ------------------------------------------------------------------------


def _nav_pages(node: object) -> list[str]:
    """Every page path named in mkdocs.yml's nav (nested sections included)."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [page for item in node for page in _nav_pages(item)]
    if isinstance(node, dict):
        return [page for value in node.values() for page in _nav_pages(value)]
    return []


def test_the_nav_lists_every_page() -> None:
    import yaml

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text("utf-8"))
    listed = _nav_pages(config["nav"])
    pages = sorted(path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md"))
    assert sorted(set(listed)) == pages, (
        "a page missing from nav (orphan), or a nav entry with no page"
    )
    assert len(listed) == len(set(listed)), "a page is listed twice in the nav"


ISSUE = re.compile(r"\bissues?[\s_-]*#?\d+|\bplan-issue|#\d+\b(?![\w-])", re.I)


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_no_page_speaks_of_issue_numbers(page: Path) -> None:
    """User documentation names no internal plans or issue numbers ("issue 12", "plan-issue-12")."""
    found = [
        f"line {number}: {line.strip()}"
        for number, line in enumerate(page.read_text("utf-8").splitlines(), 1)
        if ISSUE.search(line)
    ]
    assert not found, "\n".join(found)


def test_the_issue_pattern_catches_what_it_names() -> None:
    named = (
        "issue 12",
        "Issue #13",
        "(issues 9)",
        "replicas-issue-13",
        "plan-issue-12.md",
        "see #710",
    )
    for text in named:
        assert ISSUE.search(text), text
    for text in ("no issues found", "issue a request", "`#/c/ID`", "id: 42", "port 8411"):
        assert not ISSUE.search(text), text


def test_the_readme_stays_a_front_door() -> None:
    """The manual lives in docs/; the README is what toolbridge is, the quick start, three
    walkthroughs and a map of the documentation."""
    readme = (ROOT / "README.md").read_text("utf-8")
    assert len(readme.splitlines()) <= 250
    for page in re.findall(r"\]\((docs/[^)#]+\.md)", readme):
        assert (ROOT / page).is_file(), page


def test_the_api_reference_names_only_public_names() -> None:
    """`::: bridge.Name` only: modules move, the names `bridge` exports do not."""
    import bridge

    names = re.findall(r"^::: (\S+)$", (DOCS / "api.md").read_text("utf-8"), re.M)
    assert names
    for name in names:
        package, _, attribute = name.partition(".")
        assert package == "bridge" and "." not in attribute, name
        assert attribute in bridge.__all__, name


# --- links, paths and names stay current ---------------------------------------------------------


def _prose(page: Path) -> str:
    """The page without its fenced code blocks (links and names in prose), lines kept."""
    text = page.read_text("utf-8")
    return re.sub(r"^```.*?^```", lambda m: "\n" * m.group().count("\n"), text, flags=re.M | re.S)


def _anchors(page: Path) -> set[str]:
    """The ids of a page's headings, as the site's `toc` extension makes them."""
    import unicodedata

    ids = set(re.findall(r"\{#([\w-]+)\}", page.read_text("utf-8")))
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*(?:\{#[\w-]+\})?\s*$", _prose(page), re.M):
        text = unicodedata.normalize("NFKD", heading.replace("`", ""))
        text = re.sub(r"[^\w\s-]", "", text.encode("ascii", "ignore").decode()).strip().lower()
        slug = re.sub(r"[-\s]+", "-", text)
        taken, n = slug, 0
        while taken in ids:  # a repeated heading's id gets _1, _2, ...
            n += 1
            taken = f"{slug}_{n}"
        ids.add(taken)
    return ids


def _line(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_relative_link_resolves(page: Path) -> None:
    """`[text](other.md#anchor)`: the file exists and, for a page, so does the heading."""
    text, broken = _prose(page), []
    for match in re.finditer(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", text):
        link = match.group(1)
        if re.match(r"[a-z][a-z+.-]*:", link):
            continue  # http:, https:, mailto:
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"line {_line(text, match.start())}: {link} (no such file)")
        elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
            broken.append(f"line {_line(text, match.start())}: {link} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_anchor_slugs_are_the_sites() -> None:
    """The slugs `_anchors` makes are the ids the site gives headings (`toc`'s slugify)."""
    page = DOCS / "daemon.md"
    assert "approvals-confirmtrue-tools-in-the-daemon" in _anchors(page)
    assert "the-web-console" in _anchors(page)
    assert "platform-settings" in _anchors(DOCS / "platforms.md")
    # "OpenAI-compatible servers (vLLM, Ollama, llama.cpp, gateways)": punctuation dropped
    platforms = _anchors(DOCS / "platforms.md")
    assert "openai-compatible-servers-vllm-ollama-llamacpp-gateways" in platforms
    # a heading repeated on one page: the second one's id ends in _1
    assert {"what-is-promised", "what-is-promised_1"} <= _anchors(DOCS / "reliability.md")


# Dotted names in `code` that are not modules or attributes: logger names.
NOT_MODULES = {"bridge.tool"}


def _resolves(dotted: str) -> bool:
    """`dotted` is an importable module, or an attribute (chain) of the longest one."""
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_dotted_bridge_name_resolves(page: Path) -> None:
    """`bridge.platforms.appbuilder.client` in backticks, and `from bridge.x import a, b` in any
    block, name a module or attribute that exists: modules move, the docs follow."""
    text, prose, stale = page.read_text("utf-8"), _prose(page), []
    for span in re.finditer(r"`([^`\n]+)`", prose):
        for match in re.finditer(r"(?<![\w.])bridge(?:\.[A-Za-z_]\w*)+", span.group(1)):
            name = match.group()
            if name not in NOT_MODULES and not _resolves(name):
                stale.append(f"line {_line(prose, span.start())}: {name}")
    imports = r"^[ \t]*from (bridge[\w.]*) import (?:\(([^)]*)\)|([\w \t,]+))"
    for match in re.finditer(imports, text, re.M):
        names = re.sub(r"\bas \w+", "", match.group(2) or match.group(3))
        for imported in re.split(r"[\s,]+", names.strip()):
            if imported and not _resolves(f"{match.group(1)}.{imported}"):
                stale.append(f"line {_line(text, match.start())}: {match.group(1)}.{imported}")
    assert not stale, (
        "names that no longer import (a moved module? `bridge` the variable rather than the "
        "package? then write `Bridge.ask` or add it to NOT_MODULES):\n" + "\n".join(stale)
    )


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_repository_path_exists(page: Path) -> None:
    """`bridge/daemon/app.py`, `examples/confirm.py`, `tests/...` in backticks (globs too), and
    the test a `tests/x.py::test_name` names."""
    text, missing = _prose(page), []
    for span in re.finditer(r"`([^`\n]+)`", text):
        for match in re.finditer(
            r"(?<![\w./-])(?:bridge|examples|manifests|bench|tests)/[\w./*-]*", span.group(1)
        ):
            path = match.group().rstrip(".")
            if not any(ROOT.glob(path)):
                missing.append(f"line {_line(text, span.start())}: {path}")
        for match in re.finditer(r"(tests/[\w./-]+\.py)::(\w+)", span.group(1)):
            test, name = (ROOT / match.group(1)), match.group(2)
            if test.is_file() and not re.search(
                rf"^\s*(?:async )?(?:def|class) {name}\b", test.read_text("utf-8"), re.M
            ):
                missing.append(f"line {_line(text, span.start())}: {match.group()}")
    assert not missing, "\n".join(missing)


# What a newcomer looks for, and the page (in the nav) and heading where it is found.
TOPICS = {
    "writing tools": ("tools.md", "Writing tools"),
    "intranet sources": ("sources.md", "Declarative HTTP tools"),
    "OpenAPI import": ("sources.md", "OpenAPI import"),
    "MCP": ("sources.md", "MCP"),
    "AppBuilder setup": ("platforms.md", "AppBuilder"),
    "OpenAI-compatible setup": ("platforms.md", "OpenAI-compatible servers"),
    "Coze setup": ("platforms.md", "Coze"),
    "OpenAI Responses setup": ("platforms.md", "OpenAI Responses"),
    "platform settings": ("platforms.md", "Platform settings"),
    "the emulator": ("emulator.md", "The emulator"),
    "scenario files": ("emulator.md", "Scenario files"),
    "the loop": ("loop.md", "The conversation loop"),
    "the daemon's HTTP API": ("daemon.md", "HTTP API"),
    "the web console": ("daemon.md", "The web console"),
    "approvals": ("daemon.md", "Approvals"),
    "API keys": ("daemon.md", "API keys"),
    "replicas": ("daemon.md", "Several replicas"),
    "deployment": ("deploy.md", "Running several replicas"),
    "the command line": ("cli.md", "Command line"),
    "reliability": ("reliability.md", "Reliability"),
    "benchmarks": ("benchmarks.md", "Benchmarks"),
    "traces": ("observability.md", "Traces (OpenTelemetry)"),
    "sending traces to a collector": ("observability.md", "Sending spans to a collector"),
    "troubleshooting AppBuilder": ("troubleshooting.md", "AppBuilder"),
    "troubleshooting Chat Completions": ("troubleshooting.md", "OpenAI-compatible servers"),
    "troubleshooting Coze": ("troubleshooting.md", "Coze"),
    "troubleshooting Responses": ("troubleshooting.md", "OpenAI Responses"),
    "troubleshooting the daemon": ("troubleshooting.md", "The daemon"),
    "troubleshooting tools and sources": ("troubleshooting.md", "Tools and sources"),
    "AppBuilder's wire": ("wire/appbuilder.md", "AppBuilder"),
    "Coze's wire": ("wire/coze.md", "Coze"),
    "Chat Completions' wire": ("wire/openai-chat.md", "OpenAI Chat Completions"),
    "Responses' wire": ("wire/openai-responses.md", "OpenAI Responses"),
    "architecture": ("architecture.md", "Architecture"),
    "adding a platform": ("architecture.md", "Adding a platform"),
    "API reference": ("api.md", "API reference"),
}


@pytest.mark.parametrize("topic", TOPICS)
def test_a_newcomer_finds_the_topic_from_the_nav(topic: str) -> None:
    import yaml

    page, heading = TOPICS[topic]
    listed = _nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text("utf-8"))["nav"])
    assert page in listed, f"{topic}: {page} is not in mkdocs.yml's nav"
    headings = re.findall(r"^#{1,3}\s+(.*)$", _prose(DOCS / page), re.M)
    assert any(h.replace("`", "").startswith(heading) for h in headings), (
        f"{topic}: no heading starting {heading!r} in {page}: {headings}"
    )

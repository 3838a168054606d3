"""README and docs/: the files and names they use exist, links resolve inside the repository,
nothing refers to a file outside it, and the CRD field reference matches the models.

(The runnable code blocks of the same pages are run by ``test_ship_docs_runnable.py``.)
"""

from __future__ import annotations

import re
import shlex
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import yaml
from agent_health.cluster.api import crds, reference
from support import ship_support
from support.ship_support import CHART, ROOT

README = (ROOT / "README.md").read_text()
OPERATOR_DOC = (ROOT / "docs" / "operator.md").read_text()
# What a user follows to install: README's "Run on a cluster" and the step-by-step kind section
# of docs/operator.md it links to.
SECTION = (
    README.split("## Run on a cluster", 1)[1]
    + OPERATOR_DOC.split("## On kind, start to finish", 1)[1].split("\n## ", 1)[0]
)


def test_the_kind_config_is_a_kind_cluster_with_a_registry_mirror_path() -> None:
    config = yaml.safe_load((ROOT / "kind-config.yaml").read_text())
    assert config["kind"] == "Cluster"
    assert config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    assert config["name"] == "agent-health"
    assert [n["role"] for n in config["nodes"]] == ["control-plane", "worker", "worker"]
    assert 'config_path = "/etc/containerd/certs.d"' in config["containerdConfigPatches"][0]
    assert "kind get nodes --name agent-health" in SECTION


def test_every_path_the_section_names_exists() -> None:
    paths = set(re.findall(r"(?<![\w/.-])((?:examples|charts|images)/[\w./-]+[\w])", SECTION))
    paths.add("kind-config.yaml")
    assert len(paths) > 6
    for path in sorted(paths):
        cleaned = path.replace("$image", "operator")
        assert (ROOT / cleaned).exists(), f"README.md 'Run on a cluster' names {path}"


def test_the_commands_use_the_names_the_chart_and_the_example_create() -> None:
    done = ship_support.run(
        [ship_support.helm(), "template", "agent-health", CHART, "-n", "agent-health"]
    )
    services = [
        d["metadata"]["name"]
        for d in yaml.safe_load_all(done.stdout)
        if d and d["kind"] == "Service"
    ]
    assert "agent-health-metrics" in services
    assert "svc/agent-health-metrics 9090" in SECTION
    run = list(yaml.safe_load_all((ROOT / "examples" / "run.yaml").read_text()))
    suite = run[0]["spec"]["suite"]["configMap"]["name"]
    assert f"kubectl create configmap {suite} " in SECTION
    assert f"kubectl describe evaluationrun {run[1]['metadata']['name']}" in SECTION
    kind_values = yaml.safe_load((CHART / "ci" / "kind-values.yaml").read_text())
    secret = kind_values["judge"]["apiKey"]["existingSecret"]
    assert f"-n agent-health create secret generic {secret} " in SECTION
    operator = kind_values["image"]["operator"]
    assert f"kind load docker-image {operator['repository']}:{operator['tag']} " in SECTION
    assert f"podman save {operator['repository']}:{operator['tag']} " in SECTION


KIND_PATH = OPERATOR_DOC.split("## On kind, start to finish", 1)[1].split("\n## ", 1)[0]
# Shell words of the kind path's commands that are not programs to install.
SHELL = {"for", "do", "done", "printf", "sed", "cd"}


def _programs(section: str) -> set[str]:
    """The programs the commands of ``section``'s sh blocks run (the project's venv aside)."""
    found = set()
    for block in re.findall(r"```sh\n(.*?)```", section, re.DOTALL):
        text = re.sub(r"(^|\s)#.*$", "", block.replace("\\\n", " "), flags=re.MULTILINE)
        lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
        lexer.whitespace = " \t"  # a new line ends a command, as ; does
        starts = True
        for token in lexer:
            if token == "\n" or set(token) <= set("();|&"):
                starts = True
            elif starts:
                if not token.startswith((".venv/", "$")):
                    found.add(token)
                starts = token == "$"  # $( is read as $ then (
    return found - SHELL


def test_the_kind_path_lists_every_program_it_needs() -> None:
    # The list a reader checks before starting: every program the steps run, and what the
    # images script runs for them (skopeo for the push), with each builder it takes.
    needs = KIND_PATH.split("You need:", 1)[1].strip().split("\n\n", 1)[0]
    script = ship_support.images_script()
    programs = _programs(KIND_PATH)
    assert {"kind", "docker", "kubectl", "helm", "make", "podman"} <= programs
    for builder in script.BUILDERS:
        programs |= {*script.tools("build", builder), *script.tools("push", builder)}
    missing = sorted(p for p in programs if f"`{p}`" not in needs)
    assert not missing, f"docs/operator.md's kind path runs {missing} without listing them"
    assert "Python 3.11" in needs


# -- the pages in docs/ and README ---------------------------------------------------------

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOC_NAMES = (
    "your-agent",
    "cli",
    "architecture",
    "writing-tests",
    "agent-protocol",
    "operator",
    "ledger",
    "statistics",
    "otel",
    "history",
)
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^(```|~~~)")


def _prose(text: str) -> str:
    """``text`` without its fenced code blocks (links inside them are code, not links)."""
    out, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return "\n".join(out)


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation gone, spaces as hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found = set()
    for line in _prose(page.read_text()).splitlines():
        match = re.match(r"^#{1,6}\s+(.*)$", line)
        if match:
            found.add(slug(match[1]))
    return found


def test_every_page_exists_and_readme_links_to_each() -> None:
    for name in DOC_NAMES:
        assert (ROOT / "docs" / f"{name}.md").is_file(), f"docs/{name}.md is missing"
        assert f"](docs/{name}.md)" in README, f"README.md does not link to docs/{name}.md"


def test_architecture_names_every_import_contract() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = pyproject["tool"]["importlinter"]["contracts"]
    assert len(contracts) >= 8
    for contract in contracts:
        assert f"| {contract['name']} |" in page, (
            f"docs/architecture.md does not explain the contract {contract['name']!r}"
        )
        for layer in contract.get("layers", []):
            for room in layer.split("|"):
                assert f"`{room.strip()}`" in page, (
                    f"docs/architecture.md: contract {contract['name']!r} names {room.strip()!r}"
                )


def test_the_architecture_says_what_each_package_imports_of_ours() -> None:
    """The table's last column names (backquoted, outside parentheses) every package of ours
    that the package imports, and nothing it does not: a new arrow shows up here."""
    import grimp

    graph = grimp.build_graph("agent_health")
    package = ROOT / "operator" / "agent_health"
    page = (ROOT / "docs" / "architecture.md").read_text()
    rows = re.findall(r"^\| `(\w+)/` \|.*\| ([^|]*) \|$", page, re.M)
    assert {name for name, _ in rows} >= {"sdk", "engine", "cluster", "cli", "ledger"}
    for name, column in rows:
        said = set(re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", column)))
        imported = {
            parts[1]
            for module in graph.modules
            if module == f"agent_health.{name}" or module.startswith(f"agent_health.{name}.")
            for parts in (d.split(".") for d in graph.find_modules_directly_imported_by(module))
            if parts[0] == "agent_health"
            and len(parts) > 1
            and parts[1] != name
            and (package / parts[1]).is_dir()
        }
        assert said == imported, f"docs/architecture.md, {name}/: it imports {sorted(imported)}"


def test_the_slug_of_a_heading_is_githubs() -> None:
    assert slug("Pass rate, pass@k and pass^k") == "pass-rate-passk-and-passk"
    assert slug("REST v1") == "rest-v1"
    assert slug("`agent.run()` and `RunResult`") == "agentrun-and-runresult"


def test_every_relative_link_in_the_pages_reaches_a_file_and_heading_in_the_repository() -> None:
    checked = 0
    for page in PAGES:
        for target in _LINK.findall(_prose(page.read_text())):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # https:, mailto: — outside links are allowed, files are not
            path, _, anchor = target.partition("#")
            where = (page.parent / path).resolve() if path else page
            assert where.is_relative_to(ROOT), f"{page.name} links outside the repository: {target}"
            assert where.exists(), f"{page.name} links to {target}, which does not exist"
            if anchor and where.suffix == ".md":
                assert anchor in anchors(where), f"{page.name} links to {target}: no such heading"
            checked += 1
    assert checked > 20


def _tracked_text_files() -> list[Path]:
    done = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
    )
    files = []
    for name in done.stdout.decode().split("\0"):
        path = ROOT / name
        if not name or not path.is_file() or path.suffix in (".png", ".gz", ".whl"):
            continue
        try:
            path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        files.append(path)
    return files


# Spelled in pieces so this file does not match itself.
_OUTSIDE = re.compile(
    "|".join(["\\.\\./" + "shared", "/" + "work/", "DESIGN" + "\\.md", "STYLE" + "\\.md"])
)
_MD_NAME = re.compile(r"(?<![\w/.-])((?:\.\./|\./)?[\w./-]*[\w-]\.md)\b")


def test_nothing_in_the_repository_refers_to_a_file_outside_it() -> None:
    from agent_health.engine import reporters

    files = _tracked_text_files()
    assert len(files) > 100
    # A report's default file (agent-health-summary.md) is what a run writes, not a page.
    basenames = {p.name for p in files} | {Path(p).name for p in reporters.DEFAULT_PATHS.values()}
    problems = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        for number, line in enumerate(text.splitlines(), start=1):
            where = f"{path.relative_to(ROOT)}:{number}"
            if _OUTSIDE.search(line):
                problems.append(f"{where}: {line.strip()}")
                continue
            if path.is_relative_to(ROOT / "tests"):
                continue  # tests make pages of their own in temporary directories
            for name in _MD_NAME.findall(line):
                local = (path.parent / name).resolve()
                inside = local.is_relative_to(ROOT) and local.exists()
                if not (inside or (ROOT / name).exists() or Path(name).name in basenames):
                    problems.append(f"{where}: names {name}, which is not in the repository")
    assert not problems, "references to files outside the repository:\n" + "\n".join(problems)


def test_the_crd_field_reference_in_operator_md_is_generated_from_the_models() -> None:
    page = (ROOT / "docs" / "operator.md").read_text()
    assert page == reference.rewrite(page), "docs/operator.md is stale: run `make generate`"
    for kind in crds.KINDS:
        schema = crds.open_api_schema(kind)
        for field in schema["properties"]["spec"]["properties"]:
            assert f"`spec.{field}`" in page, f"{kind.kind} spec.{field} is not documented"


def test_a_stale_reference_is_found_and_rewritten(tmp_path: Path) -> None:
    page = tmp_path / "operator.md"
    page.write_text(f"# x\n\n{reference.BEGIN}\n| old |\n{reference.END}\n\nafter\n")
    assert reference.main(["--check", str(page)]) == 1
    assert reference.main([str(page)]) == 0
    assert reference.main(["--check", str(page)]) == 0
    text = page.read_text()
    assert "| old |" not in text
    assert "`spec.runSpecRef.name`" in text
    assert text.endswith(f"{reference.END}\n\nafter\n")


CLI_DOC = (ROOT / "docs" / "cli.md").read_text()


def _commands() -> dict[str, Any]:
    """``agent-health``'s subcommands, by name, as its parser has them."""
    from agent_health.cli import app

    top = app.parser()
    sub = next(a for a in top._actions if a.dest == "command")
    return dict(sub.choices)  # type: ignore[attr-defined]


def test_the_cli_page_documents_every_flag_of_run() -> None:
    """Every option of ``agent-health run`` is in docs/cli.md's section on ``run``."""
    run = _commands()["run"]
    section = CLI_DOC.split("## `agent-health run`", 1)[1].split("\n## ", 1)[0]
    missing = [
        option
        for action in run._actions
        for option in action.option_strings
        if option not in ("-h", "--help")
        and not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", section)
    ]
    assert missing == [], f"docs/cli.md's `run` section lacks {missing}"


def test_the_cli_page_names_every_command() -> None:
    missing = [name for name in _commands() if f"`{name}" not in CLI_DOC]
    assert missing == [], f"docs/cli.md does not name the commands {missing}"


def test_the_readme_is_an_overview() -> None:
    """The README's command table says what each command is for in a line (it ran to ~190
    words a row, and a flag paragraph of ~700 words followed it): the reference is
    docs/cli.md, and the README links to it and to the five-minute page."""
    rows = [line for line in README.splitlines() if line.startswith("| `agent-health ")]
    assert len(rows) >= 5
    longest = max(len(row.split()) for row in rows)
    assert longest <= 40, f"a README command row runs to {longest} words"
    assert "`run` flags:" not in README
    assert "](docs/cli.md)" in README
    assert "](docs/your-agent.md)" in README
    assert len(README.splitlines()) < 300

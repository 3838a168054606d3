"""What every command shares: exit codes, the usage error, consoles, report writing.

Importing this module (and every command group) is cheap on purpose: ``agent-health list``
must start as fast as importing pydantic. rich, the reporters and the engine load when a
command first uses them (``tests/cli/test_cli_imports.py`` holds the line).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from rich.console import Console

    from agent_health import history
    from agent_health.engine import comparing, reports
    from agent_health.history import location
    from agent_health.ledger import store

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_ERRORED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_PIPE_CLOSED = 141
"""The exit code of a command whose reader closed its stdout: 128 + SIGPIPE, as a shell
reports a program that signal ended (``agent-health run | head -1``)."""
EXIT_BUDGET = 4
"""A budget (--max-cost, --max-tokens, --max-duration) stopped the run and nothing that ran
failed or errored: the run is green but incomplete."""


class UsageError(Exception):
    """Bad command-line input; exit 2 with the message."""


EXTRAS: dict[str, tuple[str, ...]] = {
    "operator": ("kopf", "kubernetes", "prometheus_client", "re2"),
    "s3": ("fsspec", "s3fs"),
    "gcs": ("fsspec", "gcsfs"),
    "opensearch": ("opensearchpy",),
    "bedrock": ("botocore",),
    "otel": ("google.protobuf", "opentelemetry.proto"),
    "postgresql": ("psycopg",),
}
"""The optional extras of pyproject.toml and the top-level modules each one installs."""


def require_extra(what: str, extra: str) -> None:
    """Raise the usage error naming ``extra`` when one of its modules is not installed;
    checked before anything runs (no module is imported)."""
    import importlib.util

    for module in EXTRAS[extra]:
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            found = None
        if found is None:
            raise UsageError(
                f"{what} needs the {extra} extra (no module {module!r}): "
                f"pip install 'agent-health[{extra}]'"
            )


def missing_extra(what: str, extra: str, err: ModuleNotFoundError) -> UsageError | None:
    """The usage error to raise when ``err`` is a module of ``extra`` that is not installed
    (``None`` when it is another module: a real bug, to be raised as it is)."""
    missing = (err.name or "").partition(".")[0]
    if missing not in EXTRAS[extra]:
        return None
    return UsageError(
        f"{what} needs the {extra} extra (no module {missing!r}): "
        f"pip install 'agent-health[{extra}]'"
    )


class Outlet(io.TextIOBase):
    """``sys.stdout`` or ``sys.stderr`` for a command's consoles, whose reader may go away.

    When the reader closes its end (``agent-health run | head -1``) a write raises
    ``BrokenPipeError``; here it does not. The outlet is marked :attr:`gone`, what is
    written after is discarded (the stream's file descriptor is pointed at ``/dev/null``,
    so nothing buffered fails again at exit), and whoever :meth:`watching` it is told once:
    ``run`` stops as if interrupted, so results are never half-written behind a silent
    exit. The stream is looked up at each write, as rich's own default is, so a capture that
    stands in for it (pytest's, a run's own of its tests' output) is honoured.
    """

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name  # "stdout" or "stderr"
        self.gone = False
        self._watchers: list[Callable[[], None]] = []

    def _stream(self) -> Any:
        stream = getattr(sys, self.name)
        # Past a run's router of its tests' output (engine.running.capture): the run's own lines
        # go straight out.
        return getattr(stream, "rich_proxied_file", stream)

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                self._stream().write(text)
            except BrokenPipeError:
                self._went_away()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._stream().flush()
            except BrokenPipeError:
                self._went_away()

    def isatty(self) -> bool:
        return not self.gone and bool(self._stream().isatty())

    def fileno(self) -> int:
        return int(self._stream().fileno())

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self._stream(), "encoding", None) or "utf-8")

    @contextlib.contextmanager
    def watching(self, callback: Callable[[], None]) -> Iterator[None]:
        """Call ``callback`` (once) if the reader goes away while the block runs."""
        self._watchers.append(callback)
        try:
            yield
        finally:
            self._watchers.remove(callback)

    def _went_away(self) -> None:
        self.gone = True
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self._stream().fileno())
            finally:
                os.close(devnull)
        for callback in list(self._watchers):
            callback()


class Consoles:
    """Where a command prints: results on stdout, errors and hints on stderr.

    Each rich console is made on first use, so a command that prints plain lines never
    imports rich. Both are guarded (:func:`agent_health.engine.visible.guard`): whatever
    text a message carries, only agent-health's own styling reaches the terminal, and
    neither reads ``:name:`` as an emoji code: a title or an expected value with
    ``:x:`` in it is shown as written (which also spares every command rich's table of
    emoji names). Both write through an :class:`Outlet`, which says when a reader closed
    its end.
    """

    def __init__(self) -> None:
        self._out: Console | None = None
        self._err: Console | None = None
        self.stdout = Outlet("stdout")
        self.stderr = Outlet("stderr")

    @property
    def out(self) -> Console:
        if self._out is None:
            from rich.console import Console

            from agent_health.engine import visible

            # An Outlet is a text stream (io.TextIOBase); typeshed's IO[str] is a nominal type.
            self._out = Console(
                file=cast("IO[str]", self.stdout), highlight=False, soft_wrap=True, emoji=False
            )
            visible.guard(self._out)
        return self._out

    @property
    def err(self) -> Console:
        if self._err is None:
            from rich.console import Console

            from agent_health.engine import visible

            err = cast("IO[str]", self.stderr)
            self._err = Console(file=err, stderr=True, highlight=False, soft_wrap=True, emoji=False)
            visible.guard(self._err)
        return self._err

    def error(self, message: object, *, label: str = "error:") -> None:
        """``error: MESSAGE`` on stderr; the message (it may quote a file, a title, an
        agent's answer) shown as text, its control characters made visible."""
        from rich.markup import escape

        from agent_health.engine import visible

        self.err.print(f"[red]{label}[/] {escape(visible.indented(str(message), '  '))}")


Handler = Callable[[argparse.Namespace, Consoles], int]


def check_reports(outputs: list[tuple[str, Path | None]]) -> None:
    """Every file reporter's destination can be written: checked before anything runs."""
    from agent_health.engine import reporters

    for kind, path in outputs:
        if path is not None:
            reporters.check(kind, path)


def write_reports(
    outputs: list[tuple[str, Path | None]],
    report: reports.RunReport,
    console: Console,
    *,
    context: object = None,
) -> int:
    """Write every file reporter's output (``json:PATH``, ``junit:PATH``, ``html:DIR``,
    ``markdown:PATH`` with what the history adds in ``context``); the number that could not
    be written (each said on stderr; the ones after it still are)."""
    from agent_health.engine import reporters, visible

    unwritten = 0
    for kind, path in outputs:
        if path is None:
            continue
        try:
            written = reporters.write(kind, path, report, context)
        except OSError as err:
            unwritten += 1
            shown = visible.line(f"cannot write the {kind} report {path}: {err}")
            print(f"error: {shown}", file=sys.stderr)
            continue
        console.print(f"{kind} report: {visible.line(str(written))}", markup=False)
        if kind == "html":
            again = f"{invocation()} show-report {_quote(str(path))}"
            console.print(f"open it with: {visible.line(again)}", markup=False)
    return unwritten


def exit_code(report: reports.RunReport, *, fail_on_flaky: bool = False) -> int:
    """The exit code of a run (or a re-grade) from its summary."""
    s = report.summary
    if s.interrupted:
        return EXIT_INTERRUPTED
    if s.load_errors:
        return EXIT_USAGE
    if s.failed or (fail_on_flaky and s.flaky_count):
        return EXIT_FAILED
    if s.errored:
        return EXIT_ERRORED
    if s.budget is not None and s.budget.exhausted is not None:
        return EXIT_BUDGET
    return EXIT_OK


def invocation(argv0: str | None = None, executable: str | None = None) -> str:
    """How the user can run this command again from the directory they ran it in.

    ``agent-health`` when that name on PATH is this program; the path they typed (e.g.
    ``../../.venv/bin/agent-health``) when it is not on PATH; ``python -m agent_health.cli``
    (with this interpreter) when they ran the module.
    """
    argv0 = sys.argv[0] if argv0 is None else argv0
    executable = sys.executable if executable is None else executable
    path = Path(argv0)
    if path.name == "__main__.py" or path.suffix == ".py" or not argv0:
        python = Path(executable).name
        found = shutil.which(python)
        runner = python if found and _same(found, executable) else executable
        return f"{_quote(runner)} -m agent_health.cli"
    found = shutil.which(path.name)
    if found and _same(found, argv0):
        return path.name
    return _quote(argv0)


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _quote(value: str) -> str:
    import shlex

    return shlex.quote(value)


def ledger_access(url: str) -> store.Options | None:
    """How to reach a ``configmap://`` ledger: the pod's service account, else the kubeconfig."""
    if not url.startswith("configmap://"):
        return None
    import asyncio

    try:
        from agent_health.cluster import errors, kube
    except ImportError as err:  # kopf: the operator extra
        raise UsageError(
            f"reading {url} needs the Kubernetes client of the operator extra: "
            "pip install 'agent-health[operator]'"
        ) from err

    async def login() -> store.Options:
        info, token_file = await kube.login()
        return await asyncio.to_thread(kube.ledger_options, info, token_file)

    try:
        return asyncio.run(login())
    except errors.ClusterError as err:
        raise UsageError(f"reading {url}: {err}") from err


def history_flag(parser: argparse.ArgumentParser | Any) -> None:
    """``--history URL``, which every command that reads or writes the history takes."""
    parser.add_argument(
        "--history",
        metavar="URL",
        help="the history: sqlite:///PATH.db or postgresql://USER@HOST/DB (default: "
        "$AGENT_HEALTH_HISTORY, else history= in the config, else .agent-health/history.db "
        "beside the config file)",
    )


def history_location(
    args: argparse.Namespace,
    *,
    config_file: Path | None,
    configured: str | bool | None,
    start: Path | None,
) -> location.Location | None:
    """The history a command uses (``None``: turned off); a URL that cannot name one, or a
    PostgreSQL history without its extra, is a usage error before anything runs."""
    if getattr(args, "no_history", False) and not getattr(args, "history", None):
        return None  # turned off, and nothing to contradict: the location is never loaded
    from agent_health.history import errors, location

    try:
        where = location.resolve(
            getattr(args, "history", None),
            disabled=getattr(args, "no_history", False),
            configured=configured,
            config_file=config_file,
            start=start,
        )
    except errors.LocationError as err:
        raise UsageError(str(err)) from err
    if where is not None and where.kind == "postgresql":
        require_extra(f"the history {where.shown} ({where.origin})", "postgresql")
    return where


def history_to_read(args: argparse.Namespace) -> location.Location:
    """The history a reading command (``history``, ``flaky``, ``compare --baseline``) opens:
    ``--history``, ``$AGENT_HEALTH_HISTORY``, the config's ``history=`` (the config found as
    ``run`` finds it: ``--config``, else upward from here), the default beside it."""
    from agent_health.engine import loading

    config_file = Path(args.config) if getattr(args, "config", None) else None
    if config_file is None:
        config_file = loading.find_config(Path.cwd())
    configured: str | bool | None = None
    if config_file is not None and not getattr(args, "history", None):
        configured = loading.load_config(config_file).history
    where = history_location(args, config_file=config_file, configured=configured, start=Path.cwd())
    if where is None:
        raise UsageError(
            f"the history is turned off (history=False in {config_file}); pass --history URL"
        )
    return where


def compare_flags(parser: argparse.ArgumentParser | Any) -> None:
    """The gates and statistics of ``compare``, which ``run --baseline`` takes too."""
    parser.add_argument(
        "--max-pass-rate-drop",
        type=float,
        default=0.0,
        help="largest allowed pass-rate drop as a fraction, e.g. 0.05 (5 percentage points; "
        "default 0: any drop fails)",
    )
    parser.add_argument(
        "--max-score-drop",
        type=float,
        help="largest allowed mean-score drop (default: no gate)",
    )
    parser.add_argument(
        "--max-errored-rise",
        type=int,
        default=0,
        help="largest allowed rise in the number of errored tests (default 0: any rise fails)",
    )
    parser.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="significance level of the paired tests; their intervals are at 1 - alpha "
        "(default 0.05)",
    )
    parser.add_argument(
        "--gate",
        choices=("thresholds", "significant"),
        default="thresholds",
        help="thresholds (default): fail on any drop beyond the --max-* thresholds; "
        "significant: fail only on a drop the paired test finds significant at --alpha "
        "(and beyond the thresholds)",
    )
    parser.add_argument(
        "--max-conversations-worse",
        type=int,
        help="most conversations allowed to get worse: more turns, goal-met lost, or now "
        "gave-up/max-turns (default: named, no gate)",
    )


def compare_gates(args: argparse.Namespace) -> dict[str, Any]:
    """The gates of :func:`compare_flags`, checked: keyword arguments of ``compare``."""
    if (
        args.max_pass_rate_drop < 0
        or (args.max_score_drop is not None and args.max_score_drop < 0)
        or args.max_errored_rise < 0
        or (args.max_conversations_worse is not None and args.max_conversations_worse < 0)
    ):
        raise UsageError(
            "--max-pass-rate-drop, --max-score-drop, --max-errored-rise and "
            "--max-conversations-worse must not be negative"
        )
    if not 0 < args.alpha < 1:
        raise UsageError(f"--alpha must be between 0 and 1 (e.g. 0.05), got {args.alpha:g}")
    return {
        "max_pass_rate_drop": args.max_pass_rate_drop,
        "max_score_drop": args.max_score_drop,
        "max_errored_rise": args.max_errored_rise,
        "alpha": args.alpha,
        "gate": args.gate,
        "max_conversations_worse": args.max_conversations_worse,
    }


def show_comparison(result: comparing.Comparison, consoles: Consoles, *, as_json: bool) -> int:
    """Print what ``compare`` found; its exit code (1 on a regression)."""
    if as_json:
        from agent_health.ledger import strictjson

        payload = {**result.model_dump(mode="json"), "regressed": result.regressed}
        sys.stdout.write(strictjson.dumps(payload, indent=2) + "\n")
    else:
        from agent_health.engine import comparing, visible

        for line in comparing.render_comparison(result):  # test names come from the reports' files
            consoles.out.print(visible.line(line), markup=False)
    return EXIT_FAILED if result.regressed else EXIT_OK


def baseline_line(run: history.Run, which: str) -> str:
    """``baseline: last-green = run ID of triage (2025-01-01 12:00 UTC, pass rate 80%)``."""
    from agent_health.engine import visible

    agent = run.agent.label if run.agent is not None else "no agent"
    rate = "n/a" if run.pass_rate is None else f"{run.pass_rate:.0%}"
    commit = f", commit {run.git_commit[:12]}" if run.git_commit else ""
    return visible.line(
        f"baseline: {which} = run {run.uid} of {agent} ({run.started_at:%Y-%m-%d %H:%M} UTC, "
        f"pass rate {rate}{commit}) from the history"
    )

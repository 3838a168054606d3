"""Saved reports: ``compare`` two runs, ``report`` renders one again, ``show-report`` serves one.

``report RUN.json --reporter html:DIR`` gives a CI artifact or a re-graded cluster run the
same page as a local run. ``show-report`` serves an HTML report on localhost (the page also
opens from ``file://``; serving it gives a link to share within a machine and a stable tab).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

from agent_health.cli import common

HTML_DIR = "agent-health-report"  # reporters.DEFAULT_PATHS["html"], named here for a cheap --help


def add_commands(sub: Any) -> None:
    cmp = sub.add_parser(
        "compare",
        help="compare two JSON reports (or one with a baseline from the history); non-zero on "
        "a regression",
    )
    cmp.add_argument(
        "reports",
        nargs="+",
        metavar="BASE.json NEW.json",
        help="the baseline report and the report to check against it (with --baseline: NEW.json "
        "alone)",
    )
    cmp.add_argument(
        "--baseline",
        metavar="last|last-green|RUN_ID",
        help="take BASE from the history: the newest run of NEW's agent and suite, the newest "
        "that passed whole (exit code 0), or a run by id (agent-health history lists them)",
    )
    common.history_flag(cmp)
    cmp.add_argument("--config", help="config file naming the history (default: found upward)")
    common.compare_flags(cmp)
    cmp.add_argument(
        "--allow-replayed",
        action="store_true",
        help="gate on a NEW report made by run --replay (its agent.run() answers came from a "
        "recording; without this flag such a NEW is refused, exit 2)",
    )
    cmp.add_argument("--json", action="store_true", help="print the comparison as JSON")
    cmp.set_defaults(handler=compare)

    rep = sub.add_parser("report", help="render a saved JSON report (html, junit, json, list)")
    rep.add_argument("file", help="a JSON report (agent-health run --reporter json:PATH)")
    rep.add_argument(
        "--reporter",
        action="append",
        default=[],
        help=f"list, json[:PATH], junit[:PATH], html[:DIR], markdown[:PATH] (repeatable; default "
        f"html:{HTML_DIR})",
    )
    rep.set_defaults(handler=report)

    show = sub.add_parser("show-report", help="serve an HTML report on localhost and open it")
    show.add_argument(
        "path",
        nargs="?",
        default=HTML_DIR,
        help="the report's folder (default: agent-health-report), its index.html, or a JSON "
        "report to render first",
    )
    show.add_argument("--host", default="127.0.0.1", help="address to listen on")
    show.add_argument("--port", type=int, default=9323, help="port (0: any free port)")
    show.add_argument("--no-open", action="store_true", help="do not open a browser")
    show.set_defaults(handler=show_report)


def compare(args: argparse.Namespace, consoles: common.Consoles) -> int:
    from agent_health.engine import comparing

    gates = common.compare_gates(args)
    if args.baseline:
        if len(args.reports) != 1:
            raise common.UsageError(
                "compare --baseline takes NEW.json alone: BASE comes from the history"
            )
        return _against_history(args, consoles, Path(args.reports[0]), gates)
    if len(args.reports) != 2:
        raise common.UsageError("compare takes BASE.json NEW.json (or NEW.json with --baseline)")
    base, new = (Path(p) for p in args.reports)
    try:
        result = comparing.compare_files(base, new, allow_replayed=args.allow_replayed, **gates)
    except comparing.CompareError as err:
        raise common.UsageError(str(err)) from err
    return common.show_comparison(result, consoles, as_json=args.json)


def _against_history(
    args: argparse.Namespace, consoles: common.Consoles, path: Path, gates: dict[str, Any]
) -> int:
    """``compare --baseline``: BASE rebuilt from the history, of NEW's agent and suite."""
    from agent_health import history
    from agent_health.engine import comparing

    new = comparing.load_report(path)
    if (new.get("matrix") or {}).get("agents"):
        raise common.UsageError(
            f"{path} is an agent matrix: compare --baseline compares one agent's run with "
            "that agent's baseline; compare two saved reports instead"
        )
    provenance = new.get("provenance") or {}
    agent = (provenance.get("agent") or {}).get("name")
    suite = (provenance.get("suite") or {}).get("name")
    where = common.history_to_read(args)
    try:
        with history.open_history(where, create=False) as opened:
            run, result = opened.compare(
                args.baseline,
                new,
                agent=agent,
                suite=suite,
                new_file=str(path),
                allow_replayed=args.allow_replayed,
                **gates,
            )
    except (history.HistoryError, comparing.CompareError) as err:
        raise common.UsageError(str(err)) from err
    if not args.json:
        consoles.out.print(common.baseline_line(run, args.baseline), markup=False)
    return common.show_comparison(result, consoles, as_json=args.json)


def _read(path: Path) -> Any:
    from agent_health.engine import reporters, reports

    try:
        return reporters.read_json_report(path)
    except reports.ReportFileError as err:
        raise common.UsageError(str(err)) from err


def report(args: argparse.Namespace, consoles: common.Consoles) -> int:
    from agent_health.engine import reporters

    outputs = [reporters.parse(r) for r in args.reporter or ["html"]]
    common.check_reports(outputs)
    saved = _read(Path(args.file))
    reporters.summary(consoles.out, saved, close=False)
    unwritten = common.write_reports(outputs, saved, consoles.out)
    reporters.closing(consoles.out, saved, unwritten=unwritten)
    return common.EXIT_USAGE if unwritten else common.EXIT_OK


def _report_dir(path: Path, stack: contextlib.ExitStack) -> Path:
    """The folder to serve: the given one, an index.html's, or a JSON report rendered now."""
    if path.is_file() and path.suffix == ".json":
        import tempfile

        from agent_health.engine import reporters

        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="agent-health-")))
        reporters.write_html(folder, _read(path))
        return folder
    folder = path.parent if path.is_file() else path
    if not (folder / "index.html").is_file():
        raise common.UsageError(
            f"{path}: no HTML report here (no index.html); make one with "
            f"`agent-health run --reporter html:{path}` or "
            f"`agent-health report RUN.json --reporter html:{path}`"
        )
    return folder


def show_report(args: argparse.Namespace, consoles: common.Consoles) -> int:
    import http.server
    import webbrowser

    from agent_health.cli import serve

    with contextlib.ExitStack() as stack:
        folder = _report_dir(Path(args.path), stack)
        handler = serve.handler(str(folder), args.host)
        try:
            server = http.server.ThreadingHTTPServer((args.host, args.port), handler)
        except OSError as err:
            raise common.UsageError(
                f"cannot listen on {args.host}:{args.port} ({err.strerror}); "
                "pass another --port (0 picks a free one)"
            ) from err
        stack.callback(server.server_close)
        # an address the server answers (every interface: this machine's own)
        url = f"http://{serve.named(args.host) or '127.0.0.1'}:{server.server_port}/"
        consoles.out.print(f"serving {folder} at {url} (Ctrl+C to stop)", markup=False)
        sys.stdout.flush()
        if not args.no_open:
            webbrowser.open(url)
        with contextlib.suppress(KeyboardInterrupt):
            server.serve_forever()
    return common.EXIT_OK

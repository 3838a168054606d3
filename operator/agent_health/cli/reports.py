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
    cmp = sub.add_parser("compare", help="compare two JSON reports; non-zero on a regression")
    cmp.add_argument("base", help="the baseline report (agent-health run --reporter json:...)")
    cmp.add_argument("new", help="the report to check against it")
    cmp.add_argument(
        "--max-pass-rate-drop",
        type=float,
        default=0.0,
        help="largest allowed pass-rate drop as a fraction, e.g. 0.05 (5 percentage points; "
        "default 0: any drop fails)",
    )
    cmp.add_argument(
        "--max-score-drop",
        type=float,
        help="largest allowed mean-score drop (default: no gate)",
    )
    cmp.add_argument(
        "--max-errored-rise",
        type=int,
        default=0,
        help="largest allowed rise in the number of errored tests (default 0: any rise fails)",
    )
    cmp.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="significance level of the paired tests; their intervals are at 1 - alpha "
        "(default 0.05)",
    )
    cmp.add_argument(
        "--gate",
        choices=("thresholds", "significant"),
        default="thresholds",
        help="thresholds (default): fail on any drop beyond the --max-* thresholds; "
        "significant: fail only on a drop the paired test finds significant at --alpha "
        "(and beyond the thresholds)",
    )
    cmp.add_argument(
        "--allow-replayed",
        action="store_true",
        help="gate on a NEW report made by run --replay (its agent.run() answers came from a "
        "recording; without this flag such a NEW is refused, exit 2)",
    )
    cmp.add_argument(
        "--max-conversations-worse",
        type=int,
        help="most conversations allowed to get worse: more turns, goal-met lost, or now "
        "gave-up/max-turns (default: named, no gate)",
    )
    cmp.add_argument("--json", action="store_true", help="print the comparison as JSON")
    cmp.set_defaults(handler=compare)

    rep = sub.add_parser("report", help="render a saved JSON report (html, junit, json, list)")
    rep.add_argument("file", help="a JSON report (agent-health run --reporter json:PATH)")
    rep.add_argument(
        "--reporter",
        action="append",
        default=[],
        help=f"list, json[:PATH], junit[:PATH], html[:DIR] (repeatable; default html:{HTML_DIR})",
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
    from agent_health.engine import compare, compare_render

    if (
        args.max_pass_rate_drop < 0
        or (args.max_score_drop is not None and args.max_score_drop < 0)
        or args.max_errored_rise < 0
        or (args.max_conversations_worse is not None and args.max_conversations_worse < 0)
    ):
        raise common.UsageError(
            "--max-pass-rate-drop, --max-score-drop, --max-errored-rise and "
            "--max-conversations-worse must not be negative"
        )
    if not 0 < args.alpha < 1:
        raise common.UsageError(f"--alpha must be between 0 and 1 (e.g. 0.05), got {args.alpha:g}")
    try:
        result = compare.compare_files(
            Path(args.base),
            Path(args.new),
            max_pass_rate_drop=args.max_pass_rate_drop,
            max_score_drop=args.max_score_drop,
            max_errored_rise=args.max_errored_rise,
            alpha=args.alpha,
            gate=args.gate,
            allow_replayed=args.allow_replayed,
            max_conversations_worse=args.max_conversations_worse,
        )
    except compare.CompareError as err:
        raise common.UsageError(str(err)) from err
    if args.json:
        from agent_health.ledger import strictjson

        payload = {**result.model_dump(mode="json"), "regressed": result.regressed}
        sys.stdout.write(strictjson.dumps(payload, indent=2) + "\n")
    else:
        from agent_health.engine import visible

        for line in compare_render.render(result):  # test names come from the reports' files
            consoles.out.print(visible.line(line), markup=False)
    return common.EXIT_FAILED if result.regressed else common.EXIT_OK


def _read(path: Path) -> Any:
    from agent_health.engine.reporters import json_file

    try:
        return json_file.read(path)
    except json_file.ReportFileError as err:
        raise common.UsageError(str(err)) from err


def report(args: argparse.Namespace, consoles: common.Consoles) -> int:
    from agent_health.engine import reporters
    from agent_health.engine.reporters import terminal

    outputs = [reporters.parse(r) for r in args.reporter or ["html"]]
    common.check_reports(outputs)
    saved = _read(Path(args.file))
    terminal.summary(consoles.out, saved)
    written = common.write_reports(outputs, saved, consoles.out)
    return common.EXIT_OK if written else common.EXIT_USAGE


def _report_dir(path: Path, stack: contextlib.ExitStack) -> Path:
    """The folder to serve: the given one, an index.html's, or a JSON report rendered now."""
    if path.is_file() and path.suffix == ".json":
        import tempfile

        from agent_health.engine.reporters import html

        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="agent-health-")))
        html.write(folder, _read(path))
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

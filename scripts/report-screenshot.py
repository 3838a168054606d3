"""Make the README's screenshot of the HTML report from a real run (``make screenshot``).

Runs ``examples/04-diagnosis`` against the bundled triage agent with its faulty log tool
(``--agent triage-faulty --repeat 3``), writes the HTML report to a temporary folder, opens
it in Debian's headless Chromium through Playwright (``scripts/browser.py``), selects the
first failing test and saves the view as a PNG. Fails if the page makes a network request
or hits a script error.

Usage: .venv/bin/python scripts/report-screenshot.py [--out docs/images/html-report.png]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import browser  # noqa: E402

DEFAULT_OUT = ROOT / "docs" / "images" / "html-report.png"


def make_report(folder: Path) -> Path:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent_health.cli",
            "run",
            "--agent",
            "triage-faulty",
            "--repeat",
            "3",
            "--no-ledger",
            "--reporter",
            f"html:{folder}",
        ],
        cwd=ROOT / "examples" / "04-diagnosis",
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode not in (0, 1):  # 1: the faulty agent fails tests, as intended
        raise SystemExit(f"the example run failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return folder / "index.html"


def shoot(page_path: Path, out: Path, *, width: int, height: int) -> None:
    url = page_path.as_uri()
    with (
        browser.chromium() as chromium,
        browser.watched_page(chromium, width=width, height=height) as seen,
    ):
        seen.page.goto(url)
        seen.page.wait_for_selector("body[data-ready='1']", state="attached")
        seen.page.click("#status-filters button[data-status='failed']")
        seen.page.click("#test-list .test-row")
        seen.page.locator("#browser").scroll_into_view_if_needed()
        seen.page.evaluate("window.scrollTo(0, 0)")
        out.parent.mkdir(parents=True, exist_ok=True)
        seen.page.screenshot(path=str(out))
        if seen.outside(url) or seen.errors:
            raise SystemExit(f"the page misbehaved: {seen.outside(url)} {seen.errors}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the PNG to write")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=1250)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agent-health-shot-") as tmp:
        shoot(make_report(Path(tmp)), args.out, width=args.width, height=args.height)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

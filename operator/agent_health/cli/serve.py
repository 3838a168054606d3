"""What ``show-report`` serves: one report folder, to browsers on this machine only.

Two guards a local server needs (README, "show-report"):

* The ``Host`` header must name the server as this machine knows it: ``127.0.0.1``,
  ``localhost`` or ``[::1]`` (or what was given to ``--host``), with the server's port.
  Anything else gets ``421 Misdirected Request``. A page of another site that rebinds its
  own DNS name to 127.0.0.1 sends that name as the Host, so its script cannot read the
  report (DNS rebinding).
* A path is served only when its real path, symlinks resolved, lies inside the folder; else
  ``404``. A report folder holding a link to ``/etc/passwd`` serves nothing through it.
"""

from __future__ import annotations

import http.server
import os
from http import HTTPStatus
from typing import Any

from agent_health.server import access

# The Host checks are agent-health serve's (server.access), shared so both answer alike.
LOOPBACK_NAMES = access.LOOPBACK_NAMES
host_allowed = access.host_allowed
named = access.named


def handler(folder: str, listen_host: str) -> type[http.server.SimpleHTTPRequestHandler]:
    """A request handler class serving ``folder`` with both guards; ``listen_host`` is the
    ``--host`` address, accepted as the Host too (the user's choice, not a rebinding page's)."""
    root = os.path.realpath(folder)
    own = named(listen_host)
    names = frozenset({*LOOPBACK_NAMES, *((own,) if own else ())})

    class ReportHandler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=root, **kwargs)

        def log_message(self, format: str, *args: Any) -> None:
            return  # no line per request on the terminal

        def parse_request(self) -> bool:
            if not super().parse_request():
                return False
            port = int(self.connection.getsockname()[1])  # the port this request came to
            if host_allowed(self.headers.get_all("Host") or [], names, port):
                return True
            self.send_error(
                HTTPStatus.MISDIRECTED_REQUEST,
                explain=f"show-report answers only Host {' or '.join(sorted(names))} "
                f"with port {port}",
            )
            return False

        def send_head(self) -> Any:
            path = self.translate_path(self.path)
            if os.path.isdir(path):  # what SimpleHTTPRequestHandler serves for a folder
                for index in ("index.html", "index.htm"):
                    if os.path.isfile(os.path.join(path, index)):
                        path = os.path.join(path, index)
                        break
            if not inside(os.path.realpath(path), root):
                self.send_error(HTTPStatus.NOT_FOUND, "File not found")
                return None
            return super().send_head()

    return ReportHandler


def inside(real: str, root: str) -> bool:
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)

"""An opened history: the SQLAlchemy engine, its schema brought to this agent-health's
revision, and every read and write of it, each translated into the history's own errors.

One concept: the handle on one database — opening it (SQLite in WAL mode with a busy
timeout, or PostgreSQL through psycopg 3), checking its schema revision (refusing a newer
one, migrating an older one in place with Alembic, run from code), and running each
recording and query in a transaction whose failures become one line naming the history.
What a recording writes is :mod:`.ingest`'s (a run's trend :mod:`.trends`'); what a query
reads is :mod:`.queries`', imported by the methods that read it: a run records its report and
prints its history line without it (issue #40: the history's fixed cost in a run).

Every method blocks (SQL over a file or a socket): async code calls it in a thread
(``await asyncio.to_thread(history.record, report, context)``). A :class:`History` may be
shared by threads; :meth:`History.close` ends it.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from agent_health.history import errors, facts, ingest, migrations, tables, trends
from agent_health.history import location as location_mod

if TYPE_CHECKING:
    from agent_health.engine import reports
    from agent_health.history import answers

BUSY_TIMEOUT_S = 15.0
"""How long a SQLite writer waits for another's transaction before the history is "locked"
(``sqlite:///PATH?timeout=S`` sets another)."""
CONNECT_TIMEOUT_S = 10
"""How long a PostgreSQL connection may take (``?connect_timeout=S`` sets another)."""
WRITE = "agent_health_write"
"""The execution option that makes a SQLite transaction take the write lock as it begins."""
ATTEMPTS = 3
"""Tries of a recording that met another writer's rows (both inserting one new test)."""
VERSION_KEY = "agent_health_version"
T = TypeVar("T")


def open_history(where: location_mod.Location | str, *, create: bool = True) -> History:
    """Open the history at ``where`` (a URL, or a :class:`~.location.Location`), its schema
    migrated to this agent-health's. ``create=False``: a SQLite file that is not there is
    :class:`~.errors.NotFoundError` (a reader creates nothing)."""
    found = where if isinstance(where, location_mod.Location) else location_mod.parse(where)
    if found.kind == "sqlite" and found.path is not None and not found.path.exists():
        if not create:
            raise errors.NotFoundError(
                f"no history at {found.shown} ({found.origin}) yet: `agent-health run` records "
                "one, `agent-health history import REPORT.json` fills one from saved reports"
            )
        try:
            found.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise errors.UnavailableError(
                f"history {found.shown}: cannot make its folder ({err.strerror or err})"
            ) from err
    history = History(found, _engine(found))
    try:
        history.migrate()
    except BaseException:
        history.close()
        raise
    return history


class History:
    """One opened history (:func:`open_history`). A context manager: ``with`` closes it."""

    def __init__(self, location: location_mod.Location, engine: sa.Engine) -> None:
        self.location = location
        self.engine = engine

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.engine.dispose()

    def __repr__(self) -> str:
        return f"History({self.location.shown!r})"

    # -- the schema ------------------------------------------------------------------------

    def revision(self) -> str | None:
        """The schema revision the database is at (``None``: an empty database)."""
        with self._reading() as conn:
            return _revision(conn)

    def migrate(self) -> None:
        """Bring the schema to :data:`~.migrations.HEAD` in place (creating it in an empty
        database); refuse a newer one with :class:`~.errors.NewerSchemaError`.

        Up to date, this reads one row and loads no Alembic. Two processes migrating at once
        (two first runs) are serialised by SQLite's write lock; on PostgreSQL the loser's
        transaction fails on the tables the winner made, and finds them at its next look.
        """
        for attempt in range(ATTEMPTS):
            with self._reading() as conn:
                current = _revision(conn)
                if current == migrations.HEAD:
                    return
                written_by = _written_by(conn) if current is not None else None
            _known_or_refuse(self.location, current, written_by)
            try:
                with self._writing() as conn:
                    if _revision(conn) != migrations.HEAD:
                        _upgrade(conn)
                        _set_version(conn)
                return
            except errors.UnavailableError:
                if attempt == ATTEMPTS - 1:
                    raise

    # -- writes ----------------------------------------------------------------------------

    def prepare(
        self, tests: Sequence[dict[str, Any]], line: ingest.Upcoming | None = None
    ) -> ingest.Known:
        """Find or add the tests a run is about to run, in a transaction of their own, and
        read the run it will be compared with (``line``: its agent, suite and start), so
        that recording the run at its end writes only the run and its results (``tests``:
        ``id``, ``name``, ``file``, ``line``, ``labels``, ``content_hash`` each)."""
        return self._retried(lambda conn: ingest.prepare(conn, tests, line))

    def record(
        self,
        report: reports.RunReport | dict[str, Any],
        context: facts.RunContext | None = None,
        known: ingest.Known | None = None,
    ) -> list[facts.Recorded]:
        """Record one run (an agent matrix: one run per agent, linked) in one transaction:
        its results, tests, agents, and the trend against the previous run of each agent.
        A run already recorded (the same uid) is left as it is (``new`` false). ``known``:
        what :meth:`prepare` found before the run ended."""
        data = ingest.recorded_data(report)
        told = context or facts.RunContext()
        return self._retried(lambda conn: ingest.record(conn, data, told, known))

    def _retried(self, work: Callable[[sa.Connection], T]) -> T:
        """``work`` in a writing transaction, tried again when it met another writer's rows."""
        for attempt in range(ATTEMPTS):
            try:
                with self._writing() as conn:
                    return work(conn)
            except errors.UnavailableError as err:
                # Another writer added the same new test or agent first (PostgreSQL): the
                # next try finds its rows.
                if not isinstance(err.__cause__, sa_exc.IntegrityError) or attempt == ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def prune(self, *, keep_days: float | None = None, keep_runs: int | None = None) -> int:
        """Delete the runs older than ``keep_days`` or past the newest ``keep_runs`` (with
        their results), in one transaction; the number of runs deleted."""
        from agent_health.history import queries

        with self._writing() as conn:
            return queries.prune(conn, keep_days=keep_days, keep_runs=keep_runs)

    # -- reads -----------------------------------------------------------------------------

    def runs(
        self,
        *,
        agent: str | None = None,
        label: str | None = None,
        since: datetime | None = None,
        limit: int = 20,
        suite: str | None = None,
        branch: str | None = None,
        ending: facts.Ending | None = None,
        offset: int = 0,
        ledger: Sequence[str] | None = None,
    ) -> list[answers.Run]:
        """The newest runs, newest first (``offset`` of them skipped); ``branch``: of that git
        or CI branch; ``ending``: that ended so (:data:`.facts.Ending`); ``ledger``: whose
        ledger is one of these URLs (the run that wrote a ledger)."""
        from agent_health.history import queries

        with self._reading() as conn:
            return queries.runs(
                conn,
                agent=agent,
                label=label,
                since=since,
                limit=limit,
                suite=suite,
                branch=branch,
                ending=ending,
                offset=offset,
                ledger=ledger,
            )

    def rates(
        self, *, agent: str | None = None, suite: str | None = None, limit: int = 20
    ) -> list[trends.Rate]:
        """The newest runs' pass rates and trend marks, newest first, found as :meth:`runs`
        finds them (what the history line a run prints shows)."""
        with self._reading() as conn:
            return trends.rates(conn, agent=agent, suite=suite, limit=limit)

    def run(self, uid: str) -> answers.Run:
        """One run by its uid (or a unique prefix of it)."""
        from agent_health.history import queries

        with self._reading() as conn:
            return queries.run(conn, uid)

    def results(
        self, uid: str, *, status: str | None = None, offset: int = 0, limit: int = 1000
    ) -> answers.Results:
        """A page of one run's results (``uid`` or a unique part of it), by test id and
        repeat; ``status``: of that status only."""
        from agent_health.history import queries

        with self._reading() as conn:
            return queries.results(conn, uid, status=status, offset=offset, limit=limit)

    def results_json(
        self, uid: str, *, status: str | None = None, offset: int = 0, limit: int = 1000
    ) -> bytes:
        """:meth:`results` as the JSON of :class:`~.answers.Results`, written from the rows
        without making models of them (what a server sends)."""
        from agent_health.history import queries

        with self._reading() as conn:
            return queries.results_json(conn, uid, status=status, offset=offset, limit=limit)

    def timeline(
        self,
        pattern: str,
        *,
        agent: str | None = None,
        label: str | None = None,
        since: datetime | None = None,
        limit: int = 50,
    ) -> list[answers.TestHistory]:
        """Each test whose id is ``pattern`` (else whose id or title matches it as a regular
        expression) over its newest ``limit`` runs, oldest first."""
        from agent_health.history import queries

        with self._reading() as conn:
            return queries.timeline(
                conn, pattern, agent=agent, label=label, since=since, limit=limit
            )

    def flaky(
        self,
        *,
        runs: int = 50,
        agent: str | None = None,
        label: str | None = None,
        since: datetime | None = None,
        limit: int | None = None,
    ) -> list[answers.Flaky]:
        """Tests whose outcome flipped over the newest ``runs`` runs while neither the agent's
        identity nor the test's content hash changed, ranked."""
        from agent_health.history import queries

        with self._reading() as conn:
            return queries.flaky(
                conn, runs=runs, agent=agent, label=label, since=since, limit=limit
            )

    def regressions(
        self,
        *,
        runs: int = 10,
        agent: str | None = None,
        label: str | None = None,
        since: datetime | None = None,
    ) -> list[answers.Regression]:
        """Tests that passed in a run and failed or errored in the next run of the same agent,
        over the newest ``runs`` runs, newest first."""
        from agent_health.history import queries

        with self._reading() as conn:
            return queries.regressions(conn, runs=runs, agent=agent, label=label, since=since)

    def grid(
        self,
        *,
        runs: int = 100,
        agent: str | None = None,
        label: str | None = None,
        since: datetime | None = None,
    ) -> answers.Grid:
        """The newest ``runs`` runs (oldest first, each with its tests' durations) × every
        test they ran, one character per (test, run): what the history page draws."""
        from agent_health.history import queries

        with self._reading() as conn:
            return queries.grid(conn, runs=runs, agent=agent, label=label, since=since)

    def baseline(
        self,
        which: str,
        *,
        agent: str | None = None,
        suite: str | None = None,
        exclude: str | None = None,
    ) -> tuple[answers.Run, dict[str, Any]]:
        """A run to compare with, and its report rebuilt as ``compare`` reads one: ``last``
        (the newest run of ``agent`` and ``suite``, other than the run ``exclude``),
        ``last-green`` (the newest that passed whole: exit code 0) or a run's uid."""
        from agent_health.history import queries

        with self._reading() as conn:
            return queries.baseline(conn, which, agent=agent, suite=suite, exclude=exclude)

    def compare(
        self,
        which: str,
        new: dict[str, Any],
        *,
        agent: str | None = None,
        suite: str | None = None,
        new_file: str = "NEW",
        **gates: Any,
    ) -> tuple[answers.Run, Any]:
        """``compare`` of ``new`` (a report's JSON shape) with the baseline ``which``
        (:meth:`baseline`; never ``new`` itself when it is recorded already), with
        ``compare``'s gates (``max_pass_rate_drop``, ``gate``, ``alpha``, ...). Tests that
        ``new`` quarantines are left out of both sides. Returns the baseline run and the
        :class:`agent_health.engine.comparing.compare.Comparison`."""
        from agent_health.engine import comparing

        uid = (new.get("provenance") or {}).get("run_id")
        run, base = self.baseline(which, agent=agent, suite=suite, exclude=uid)
        apart = {str(t["id"]) for t in new["tests"] if t.get("quarantined")}
        if apart:
            base, new = comparing.without(base, apart), comparing.without(new, apart)
        said = (
            f"the history's {which} (run {run.uid})"
            if which in ("last", "last-green")
            else (f"the history's run {run.uid}")
        )
        return run, comparing.compare_reports(base, new, base_file=said, new_file=new_file, **gates)

    def count(self) -> tuple[int, int]:
        """(runs, results) the history holds."""
        from agent_health.history import queries

        with self._reading() as conn:
            return queries.count(conn)

    # -- transactions ----------------------------------------------------------------------

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sa.Connection]:
        with self._translated(), self.engine.connect() as conn, conn.begin():
            yield conn

    @contextlib.contextmanager
    def _writing(self) -> Iterator[sa.Connection]:
        with self._translated(), self.engine.connect() as conn:
            conn.execution_options(**{WRITE: True})
            with conn.begin():
                yield conn

    @contextlib.contextmanager
    def _translated(self) -> Iterator[None]:
        """SQLAlchemy's and the driver's errors as the history's, in one line naming it."""
        try:
            yield
        except errors.HistoryError:
            raise
        except sa_exc.SQLAlchemyError as err:
            raise errors.UnavailableError(describe(self.location, err)) from err
        except OSError as err:
            raise errors.UnavailableError(
                f"history {self.location.shown}: {err.strerror or err}"
            ) from err


def describe(where: location_mod.Location, err: BaseException) -> str:
    """One line saying why the history ``where`` could not be used, without credentials."""
    original = getattr(err, "orig", None) or err
    text = " ".join(str(original).split())
    text = _scrub(text, where)
    lowered = text.lower()
    if "database is locked" in lowered or "database is busy" in lowered:
        why = (
            "locked by another writer past the busy timeout; try again, or raise it with ?timeout=S"
        )
    elif "file is not a database" in lowered or "malformed" in lowered:
        why = f"not a readable SQLite database ({text}); move the file aside and a new one starts"
    elif "unable to open database" in lowered:
        why = f"cannot open the file ({text})"
    elif "readonly" in lowered or "read-only" in lowered:
        why = f"cannot write it ({text})"
    elif isinstance(err, sa_exc.OperationalError | sa_exc.InterfaceError) and where.kind == (
        "postgresql"
    ):
        why = f"unreachable or refused ({text})"
    else:
        why = text
    return f"history {where.shown}: {why}"


def _scrub(text: str, where: location_mod.Location) -> str:
    """``text`` with the history's URL, password and any other URL's credentials taken out."""
    text = text.replace(where.url, where.shown)
    for secret in (_url_password(where.url), _password_quietly(where)):
        if secret:
            text = text.replace(secret, "***")
    return re.sub(r"(\w+://[^/\s:@]*):[^@\s/]*@", r"\1:***@", text)


def _url_password(url: str) -> str | None:
    from urllib.parse import unquote, urlsplit

    try:
        found = urlsplit(url).password
    except ValueError:
        return None
    return unquote(found) if found else None


def _password_quietly(where: location_mod.Location) -> str | None:
    try:
        return where.password
    except errors.LocationError:
        return None


def _engine(where: location_mod.Location) -> sa.Engine:
    """The SQLAlchemy engine of a history: SQLite with WAL and a busy timeout, writes that
    take the write lock as they begin; PostgreSQL through psycopg 3."""
    if where.kind == "sqlite":
        database, query = _sqlite_parts(where.url)
        timeout = float(str(query.pop("timeout", BUSY_TIMEOUT_S)))
        engine = sa.create_engine(
            sa.URL.create("sqlite+pysqlite", database=database, query=query),
            connect_args={"timeout": timeout},
        )
        sa.event.listen(engine, "connect", _sqlite_connected)
        sa.event.listen(engine, "begin", _sqlite_begin)
        return engine
    url = sa.make_url(where.url)
    try:
        import psycopg  # noqa: F401  # the postgresql extra
    except ModuleNotFoundError as err:
        raise errors.LocationError(
            f"history {where.shown} ({where.origin}) is on PostgreSQL, which needs the "
            "postgresql extra (psycopg 3): pip install 'agent-health[postgresql]'"
        ) from err
    args: dict[str, Any] = {}
    if "connect_timeout" not in url.query:
        args["connect_timeout"] = CONNECT_TIMEOUT_S
    password = where.password
    if password is not None and url.password is None:
        args["password"] = password  # never in the URL, so never in a message
    return sa.create_engine(
        url.set(drivername="postgresql+psycopg"), connect_args=args, pool_pre_ping=True
    )


def _sqlite_parts(url: str) -> tuple[str, dict[str, str | list[str]]]:
    """A ``sqlite:///PATH?QUERY`` URL's database and query as :func:`sqlalchemy.make_url`
    reads them (the path unquoted, a key given twice a list), without its parser: a regular
    expression compiled on its first use, about 1 ms of every run's history."""
    from urllib.parse import parse_qsl, unquote

    path, _, text = url.partition("://")[2].partition("?")
    query: dict[str, str | list[str]] = {}
    for key, value in parse_qsl(text):
        if key in query:
            was = query[key]
            query[key] = [*was, value] if isinstance(was, list) else [was, value]
        else:
            query[key] = value
    return unquote(path[1:]), query


def _sqlite_connected(dbapi_connection: Any, _record: Any) -> None:
    # The driver's own transaction handling off: SQLAlchemy's "begin" event below says how
    # each transaction begins (SQLAlchemy's documented recipe for pysqlite).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        # WAL: readers never wait for the writer and a killed writer's transaction is rolled
        # back on the next open. NORMAL is durable in WAL against a killed process.
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


def _sqlite_begin(conn: sa.Connection) -> None:
    # A writer takes the write lock as it begins (waiting up to the busy timeout), so two
    # writers queue instead of one failing when its read turns into a write.
    immediate = conn.get_execution_options().get(WRITE, False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def _revision(conn: sa.Connection) -> str | None:
    if not sa.inspect(conn).has_table("alembic_version"):
        return None
    found = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars().all()
    return str(found[0]) if found else None


def _written_by(conn: sa.Connection) -> str | None:
    if not sa.inspect(conn).has_table(tables.info.name):
        return None
    found = conn.execute(
        sa.select(tables.info.c.value).where(tables.info.c.key == VERSION_KEY)
    ).scalar()
    return str(found) if found is not None else None


def _set_version(conn: sa.Connection) -> None:
    from agent_health.engine import reports

    ours = reports.agent_health_version()
    conn.execute(sa.delete(tables.info).where(tables.info.c.key == VERSION_KEY))
    conn.execute(sa.insert(tables.info).values(key=VERSION_KEY, value=ours))


def _script() -> Any:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config())


def alembic_config(connection: sa.Connection | None = None) -> Any:
    """Alembic's config for the history's migrations, built in code (no alembic.ini is read,
    whatever the working directory holds)."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    config.attributes["connection"] = connection
    return config


def revisions() -> list[str]:
    """Every schema revision this agent-health knows, oldest first."""
    walked = [script.revision for script in _script().walk_revisions()]
    return list(reversed(walked))


def _known_or_refuse(where: location_mod.Location, current: str | None, by: str | None) -> None:
    """Raise :class:`~.errors.NewerSchemaError` when ``current`` is a revision this
    agent-health does not know: a newer one wrote the history."""
    if current is None or current in revisions():
        return
    from agent_health.engine import reports

    ours = reports.agent_health_version()
    raise errors.NewerSchemaError(
        f"history {where.shown} has schema revision {current} (written by agent-health "
        f"{by or 'unknown'}); this agent-health {ours} knows revisions up to "
        f"{migrations.HEAD}: upgrade agent-health to use it (it was left as it is)"
    )


_ALEMBIC = threading.Lock()
"""Held while Alembic migrates. Its ``op`` and ``context`` are proxies the library keeps per
process, set for each migration it runs: two threads migrating at once (two histories
opened together, in the operator or in one process's tests) would run one migration's
operations on the other's connection, and SQLite crashes the process when one connection
is used from two threads at once. The lock guards the library's globals, not ours."""


def _upgrade(conn: sa.Connection) -> None:
    from alembic import command

    with _ALEMBIC:
        command.upgrade(alembic_config(conn), "head")


def size_bytes(where: location_mod.Location) -> int | None:
    """The bytes a SQLite history takes on disk (its WAL included); ``None`` otherwise."""
    if where.path is None:
        return None
    total = 0
    for suffix in ("", "-wal"):
        with contextlib.suppress(OSError):
            total += os.stat(f"{where.path}{suffix}").st_size
    return total


def checkpoint(history: History) -> None:
    """Fold a SQLite history's WAL into its file (for measuring its size)."""
    if history.location.kind == "sqlite":
        with history._translated(), history.engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")

"""The history's schema revisions, run by Alembic from code (:mod:`..database` builds
Alembic's config in Python: no ``alembic.ini`` is looked for, wherever the command runs).

``versions/`` holds one module per revision, each naming the one before it. :data:`HEAD`
names the newest, so that opening a history that is up to date reads one row and loads no
Alembic (``tests/history/test_history_store.py`` checks it is the scripts' head, and that
``tables.py`` is what the revisions make). A change of schema is a new revision written
beside the others (``down_revision`` the previous head), the same change in ``tables.py``,
and :data:`HEAD` moved to it.
"""

HEAD = "0002"
"""The newest revision of the schema this agent-health writes."""

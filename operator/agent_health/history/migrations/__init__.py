"""The history's schema revisions, run by Alembic from code (:mod:`..database`).

``versions/`` holds one module per revision, oldest first; :data:`HEAD` names the newest, so
that opening a history that is up to date reads one row and loads no Alembic
(``tests/test_history_store.py`` checks it against the scripts). A new revision: change
``tables.py``, then ``alembic -x ... revision`` is not needed — write ``versions/NNNN_what.py``
by hand, ``down_revision`` the previous head, and move :data:`HEAD`.
"""

HEAD = "0001"
"""The newest revision of the schema this agent-health writes."""

"""The CI job a run belongs to, read from the standard variables each CI system sets.

==================  ============================================================================
provider            variables read
==================  ============================================================================
``github-actions``  ``GITHUB_ACTIONS``, ``GITHUB_SERVER_URL``/``GITHUB_REPOSITORY``/
                    ``GITHUB_RUN_ID`` (+ ``GITHUB_RUN_ATTEMPT``) for the URL, ``GITHUB_JOB``,
                    ``GITHUB_SHA``, ``GITHUB_HEAD_REF`` or ``GITHUB_REF_NAME``, the PR number
                    from ``GITHUB_REF`` (``refs/pull/N/merge``)
``gitlab-ci``       ``GITLAB_CI``, ``CI_JOB_URL``, ``CI_JOB_NAME``, ``CI_COMMIT_SHA``,
                    ``CI_MERGE_REQUEST_SOURCE_BRANCH_NAME`` or ``CI_COMMIT_REF_NAME``,
                    ``CI_MERGE_REQUEST_IID``
``jenkins``         ``JENKINS_URL``, ``BUILD_URL``, ``JOB_NAME``, ``GIT_COMMIT``,
                    ``CHANGE_BRANCH`` or ``BRANCH_NAME`` or ``GIT_BRANCH``, ``CHANGE_ID``
``buildkite``       ``BUILDKITE``, ``BUILDKITE_BUILD_URL`` (+ ``#JOB_ID``), ``BUILDKITE_LABEL``,
                    ``BUILDKITE_COMMIT``, ``BUILDKITE_BRANCH``, ``BUILDKITE_PULL_REQUEST``
``ci``              ``CI`` set to anything but ``false``/``0``: a CI system not named above
==================  ============================================================================

URLs lose any user info and query (where a token could hide).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

from agent_health.history import facts


def ci_from_env(environ: Mapping[str, str] | None = None) -> facts.CI | None:
    """The CI job of this process (``None`` outside CI)."""
    env = os.environ if environ is None else environ

    def get(*names: str) -> str | None:
        return next((env[n] for n in names if env.get(n)), None)

    if _on(env.get("GITHUB_ACTIONS")):
        url = None
        if get("GITHUB_REPOSITORY") and get("GITHUB_RUN_ID"):
            server = get("GITHUB_SERVER_URL") or "https://github.com"
            url = f"{server}/{env['GITHUB_REPOSITORY']}/actions/runs/{env['GITHUB_RUN_ID']}"
            if get("GITHUB_RUN_ATTEMPT") and env["GITHUB_RUN_ATTEMPT"] != "1":
                url += f"/attempts/{env['GITHUB_RUN_ATTEMPT']}"
        pull = re.fullmatch(r"refs/pull/(\d+)/(?:merge|head)", env.get("GITHUB_REF", ""))
        return _ci(
            "github-actions",
            url=url,
            job=get("GITHUB_JOB"),
            commit=get("GITHUB_SHA"),
            branch=get("GITHUB_HEAD_REF", "GITHUB_REF_NAME"),
            pr=pull.group(1) if pull else None,
        )
    if _on(env.get("GITLAB_CI")):
        return _ci(
            "gitlab-ci",
            url=get("CI_JOB_URL", "CI_PIPELINE_URL"),
            job=get("CI_JOB_NAME"),
            commit=get("CI_COMMIT_SHA"),
            branch=get("CI_MERGE_REQUEST_SOURCE_BRANCH_NAME", "CI_COMMIT_REF_NAME"),
            pr=get("CI_MERGE_REQUEST_IID"),
        )
    if get("JENKINS_URL") and (get("BUILD_URL") or get("BUILD_ID")):
        return _ci(
            "jenkins",
            url=get("BUILD_URL"),
            job=get("JOB_NAME"),
            commit=get("GIT_COMMIT"),
            branch=get("CHANGE_BRANCH", "BRANCH_NAME", "GIT_BRANCH"),
            pr=get("CHANGE_ID"),
        )
    if _on(env.get("BUILDKITE")):
        url = get("BUILDKITE_BUILD_URL")
        if url and get("BUILDKITE_JOB_ID"):
            url += f"#{env['BUILDKITE_JOB_ID']}"
        pr = get("BUILDKITE_PULL_REQUEST")
        return _ci(
            "buildkite",
            url=url,
            job=get("BUILDKITE_LABEL", "BUILDKITE_PIPELINE_SLUG"),
            commit=get("BUILDKITE_COMMIT"),
            branch=get("BUILDKITE_BRANCH"),
            pr=pr if pr and pr != "false" else None,
        )
    if _on(env.get("CI")):
        return facts.CI(provider="ci")
    return None


def _on(value: str | None) -> bool:
    return bool(value) and str(value).strip().lower() not in ("false", "0", "no")


def _ci(provider: str, *, url: str | None, **fields: str | None) -> facts.CI:
    return facts.CI(provider=provider, url=_clean(url), **fields)


def _clean(url: str | None) -> str | None:
    if not url:
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", parts.fragment))

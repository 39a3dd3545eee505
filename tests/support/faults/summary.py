"""The fault campaign's summary at the end of the session (pytest_terminal_summary); a plugin
of tests/conftest.py, so that the process controlling pytest-xdist workers loads it too.

Under pytest-xdist the campaign plays in a worker: its summary lines travel back to the
controlling process in ``workeroutput`` and are printed there."""

from __future__ import annotations

import sys

import pytest

_WORKER_LINES: list[str] = []
"""Lines of the summary the workers sent (in the controlling process)."""


def _summary_lines() -> list[str]:
    # A session that never imported the campaign played none of it (and pays no import).
    campaign = sys.modules.get("tests.support.faults.campaign")
    if campaign is None or not campaign.PLAYED:
        return []
    lines = [campaign.summary(campaign.PLAYED)]
    lines += [
        f"  FAILED {outcome.scenario.describe()}: {outcome.failures[0][:300]}"
        for outcome in campaign.PLAYED
        if outcome.failures
    ]
    if campaign.REPORT_PATH:
        lines.append(f"  details: {campaign.REPORT_PATH}")
    return lines


def pytest_sessionfinish(session, exitstatus):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["fault_campaign"] = _summary_lines()


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook
def pytest_testnodedown(node, error):
    _WORKER_LINES.extend(getattr(node, "workeroutput", {}).get("fault_campaign", []))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    lines = _summary_lines() + _WORKER_LINES
    if not lines:
        return
    terminalreporter.section("fault campaign")
    for line in lines:
        terminalreporter.write_line(line)

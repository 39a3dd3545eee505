"""Prints the fault campaign's summary at the end of the session (pytest_terminal_summary)."""

from __future__ import annotations

from tests.support.faults import campaign as C


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not C.PLAYED:
        return
    terminalreporter.section("fault campaign")
    terminalreporter.write_line(C.summary(C.PLAYED))
    for outcome in C.PLAYED:
        if outcome.failures:
            terminalreporter.write_line(
                f"  FAILED {outcome.scenario.describe()}: {outcome.failures[0][:300]}"
            )
    if C.REPORT_PATH:
        terminalreporter.write_line(f"  details: {C.REPORT_PATH}")

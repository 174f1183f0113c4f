"""Unit tests of the second-writer phase's reading of the supervisors' output."""

from __future__ import annotations

from faults.second_writer import node_exits


def test_node_restarts_are_read_from_the_supervisor_output() -> None:
    output = (
        "  node      ready on http://127.0.0.1:1 (3.0s)\n"
        "  node exited (code 1); restarting - log: /d/logs/node.log\n"
        "  node ready again\n"
        "  node exited (code -9); restarting - log: /d/logs/node.log\n"
    )
    assert node_exits(output) == ["1", "-9"]
    assert node_exits("memstream is up.\n") == []

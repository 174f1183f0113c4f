"""`memstream erase-user` without a node: ids checked before anything is sent, the confirmation, and
the report for people. (Against a real node: tests/memstream/test_node_user_erasure.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from memstream.cli import main
from memstream.cli.erase import report_lines

pytestmark = pytest.mark.unit


def test_bad_ids_and_a_refused_confirmation_send_nothing(tmp_path: Path) -> None:
    env = {"MEMSTREAM_DATA_DIR": str(tmp_path)}
    (tmp_path / "admin.token").write_text("t0ken\n")
    bad = CliRunner().invoke(main, ["erase-user", "--account", "acme", "--user", "a/b", "--yes"], env=env)
    assert bad.exit_code == 2 and "--user" in bad.output
    declined = CliRunner().invoke(
        main, ["erase-user", "--account", "acme", "--user", "ada"], env=env, input="n\n"
    )
    assert declined.exit_code == 1 and "Erase user 'ada' of account 'acme' everywhere?" in declined.output
    assert "Aborted" in declined.output


def test_the_report_has_a_line_per_step() -> None:
    report = {
        "account_id": "acme",
        "user_id": "ada",
        "erasure_id": 3,
        "completed_at": "2026-12-02T07:00:02+00:00",
        "erased": {
            "threads": {
                "threads": 2,
                "deletions": [
                    {"thread_id": "t2", "deletion_id": 8, "up_to_seq": 9},
                    {"thread_id": "t1", "deletion_id": 7, "up_to_seq": 4},
                ],
                "deleted": {"journal": {"messages": 5}, "thread": {"rows": 2}},
            },
            "memory": {"private_entries": 1, "unlinked_entries": 0},
        },
    }
    assert report_lines(report) == [
        "erased user ada of account acme (erasure 3, completed 2026-12-02T07:00:02+00:00)",
        "  threads: 2 deleted (t1, t2)",
        "    journal: 5 messages; thread: 2 rows",
        "  memory: private entries 1, unlinked entries 0",
    ]

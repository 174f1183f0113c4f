"""The import contracts of pyproject.toml ([tool.importlinter]): each package imports only the ones
below it (`memstream` > `processors` > `streams` > `sinks` > `core`), core does no I/O, store
adapters and processors are independent, and there are no import cycles. `scripts/test` runs
`lint-imports` too; this puts the check in the fast tier (`pytest -m unit`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_import_contracts_are_kept() -> None:
    # this checkout's packages, whatever the installed (editable) copy points at
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]

import stat
from pathlib import Path

import pytest
from pydantic import SecretStr

from core.config import Settings
from memstream.ops.admin_token import AdminTokenMissing, ensure_admin_token, read_admin_token


def test_generated_once_private_and_read_back(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    with pytest.raises(AdminTokenMissing, match=r"admin\.token"):
        read_admin_token(settings)
    token = ensure_admin_token(settings)
    assert len(token) >= 40
    assert stat.S_IMODE(settings.admin_token_path.stat().st_mode) == 0o600
    assert ensure_admin_token(settings) == token  # kept across node restarts
    assert read_admin_token(settings) == token


def test_loose_mode_is_tightened(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    token = ensure_admin_token(settings)
    settings.admin_token_path.chmod(0o644)
    assert ensure_admin_token(settings) == token
    assert stat.S_IMODE(settings.admin_token_path.stat().st_mode) == 0o600


def test_configured_token_wins_and_writes_nothing(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, admin_token=SecretStr("s3cret-token"))
    assert ensure_admin_token(settings) == "s3cret-token"
    assert read_admin_token(settings) == "s3cret-token"
    assert not settings.admin_token_path.exists()

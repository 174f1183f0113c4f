"""The configuration as the command line loads it: invalid settings become a click error."""

from __future__ import annotations

import click
from pydantic import ValidationError

from core.config import Settings


def load_settings() -> Settings:
    """The resolved `Settings`; a `click.ClickException` naming each invalid field otherwise."""
    try:
        return Settings()
    except ValidationError as exc:
        lines = [f"  {'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()]
        raise click.ClickException("invalid configuration:\n" + "\n".join(lines)) from None
    except FileNotFoundError as exc:
        raise click.ClickException(str(exc)) from None

"""The HTTP API: `create_app(deps)` builds the FastAPI app over injected dependencies (no startup I/O)."""

from memstream.api.app import create_app
from memstream.api.deps import ApiDeps

__all__ = ["ApiDeps", "create_app"]

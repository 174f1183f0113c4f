"""The HTTP API: `create_app(deps)` builds the FastAPI app over injected dependencies (no startup I/O)."""

from memstream.api.app import create_app
from memstream.api.deps import ApiDeps, build_api_deps

__all__ = ["ApiDeps", "build_api_deps", "create_app"]

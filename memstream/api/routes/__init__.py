"""Routers of the HTTP API, each built over the injected `ApiDeps`."""

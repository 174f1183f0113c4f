"""Adapters to the stores: one interface per kind of store, embedded and server adapters behind it."""

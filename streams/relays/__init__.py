"""Relays: publish a durable source to a topic in order, advancing the source only after the
broker confirmed (the memory-entries outbox relay; the journal relay joins it).
"""

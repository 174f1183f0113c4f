"""Transcript search over the journal's projection: the domain side (tool-call pairing)."""

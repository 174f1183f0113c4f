"""Operator commands' logic (replay, republish, verify, rebuild), run by the node's admin API and
driven by the `memstream` CLI, which renders their progress."""

"""Redis: derived and coordination state only (summary cache, locks). Losing it loses no data."""

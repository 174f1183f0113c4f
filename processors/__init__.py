"""The processors' logic: consumers of the journal and derived topics, free of I/O where possible."""

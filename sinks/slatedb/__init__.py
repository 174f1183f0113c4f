"""The thread journal on SlateDB (`journal.SlateJournal`): its write path (`group_commit`), its key
layout (`keys`), its object store (`objectstore`: a local directory or S3) and what it needs of
the SlateDB binding (`binding`).
"""

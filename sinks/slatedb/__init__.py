"""The thread journal on SlateDB (`SlateJournal`): its key layout and its object store (a local
directory or S3).
"""

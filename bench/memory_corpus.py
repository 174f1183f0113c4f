"""Words the memory benches build their synthetic facts from ("<subject> <verb> <object> <tail>").

The benches run as scripts (`.venv/bin/python bench/bench_x.py`), so this module is imported as
`memory_corpus` from the bench directory. Each bench extends these lists with its own words (the
order of every list is part of what a seeded bench generates: append, never reorder).
"""

from __future__ import annotations

VERBS = [
    "prefers",
    "needs",
    "uses",
    "avoids",
    "depends on",
    "was migrated to",
    "asked about",
    "complained about",
    "is allergic to",
    "deploys on",
    "reported a bug in",
    "likes",
    "wants a refund for",
    "scheduled",
]
OBJECTS = [
    "green tea",
    "dark mode",
    "PostgreSQL 16",
    "Kubernetes",
    "weekly reports",
    "the Berlin office",
    "invoice 4471",
    "two-factor authentication",
    "vegetarian food",
    "Friday deployments",
    "Python 3.12",
    "the premium plan",
    "Slack notifications",
    "the Q3 roadmap",
    "peanuts",
    "the staging cluster",
    "email summaries",
    "Redis caching",
    "the mobile checkout",
    "Spanish translations",
    "GraphQL",
    "a standing desk",
    "quarterly OKRs",
    "the London data center",
    "annual billing",
    "Jira tickets",
]
TAILS = [
    "since last spring",
    "for compliance reasons",
    "every Monday",
    "because of latency",
    "at 9am",
    "after the outage",
    "according to the last call",
    "until further notice",
    "for the new hires",
]
"""Without the empty tail (a fact with none): each bench puts it last, after its own tails."""

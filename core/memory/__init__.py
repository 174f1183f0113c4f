"""Agent memory: curated facts in Postgres, screened and capped, projected to Qdrant for recall."""

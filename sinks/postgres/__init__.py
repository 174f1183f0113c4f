"""PostgreSQL adapters: the connection pool, the schema migrations, threads and API keys."""

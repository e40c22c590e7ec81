"""Storage-side core: schema, named queries, the repository (the only module that runs SQL)."""

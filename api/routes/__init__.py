"""REST routers (thin: they parse, call :mod:`api.ingestion`, and shape the answer)."""

"""REST routers (thin: they resolve the caller, call the documents core and shape the answer)."""

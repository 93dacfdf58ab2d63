"""The pipeline's queue names (a module of its own, so the CLI names them without Celery)."""

EXTRACT_QUEUE = "extract"
# Only ``ldims.index``: documents the index worker writes in batches (workers.batching).
INDEX_QUEUE = "index"
# The index writer's other work, one task at a time; consumed with INDEX_QUEUE.
INDEX_SINGLE_QUEUE = "index-single"

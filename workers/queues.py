"""The pipeline's queue names (a module of its own, so the CLI names them without Celery)."""

# Only ``ldims.extract``: an extract task takes the ones waiting behind it (workers.batching).
EXTRACT_QUEUE = "extract"
# The extract workers' other work, one task at a time: webhook downloads and documents
# retried alone after a backoff (a batch pulls messages without waiting for their countdown).
# Consumed with EXTRACT_QUEUE.
EXTRACT_SINGLE_QUEUE = "extract-single"
# Only ``ldims.index``: documents the index worker writes in batches (workers.batching).
INDEX_QUEUE = "index"
# The index writer's other work, one task at a time; consumed with INDEX_QUEUE.
INDEX_SINGLE_QUEUE = "index-single"
# Only ``ldims.embed``: nudges that wake the embed worker (its own process, at a lower CPU
# priority than extraction and indexing), which takes its work from the catalog.
EMBED_QUEUE = "embed"
# Only ``ldims.ocr``: files whose pages need text recognition, handed on by the extract
# workers; read one at a time by workers of their own, at a lower CPU priority.
OCR_QUEUE = "ocr"

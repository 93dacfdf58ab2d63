"""A document's life across its stores: the one place that writes them.

A document lives in the catalog (its row: version, state), its original (``ldims.blobs``),
its extraction (``ldims.extracts``), the index (Whoosh chunks and qmd's lexicon rows) and the
vector segments. Every write to any of them is a function here (``tests/test_row_owner.py``
and ``tests/test_store_owners.py`` fail on one elsewhere); routes, tools, tasks, the CLI and
the reconciler ask these:

- :mod:`~ldims.lifecycle.states`: the row and its states (added, a new version, queued,
  processing, completed, failed, removed) — conditional on the version, so a stale task
  changes nothing; :mod:`~ldims.lifecycle.vector_work`: the embed stage's claims on rows.
"""

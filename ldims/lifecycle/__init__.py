"""A document's life across its stores: the one place that writes them.

A document lives in the catalog (its row: version, state), its original (``ldims.blobs``),
its extraction (``ldims.extracts``), the index (Whoosh chunks with qmd's lexicon rows) and the
vector segments. Every write to any of them is a function here — routes, tools, tasks, the
CLI and the reconciler ask these (``tests/test_row_owner.py`` and
``tests/test_store_owners.py`` fail on a write elsewhere):

- :mod:`~ldims.lifecycle.states` — the row and its states; :mod:`~ldims.lifecycle.vector_work`
  — the embed stage's claims on rows;
- :mod:`~ldims.lifecycle.contents` — originals and extractions;
- :mod:`~ldims.lifecycle.index` — the index and qmd's lexicon;
- :mod:`~ldims.lifecycle.vectors` — the vectors.

Each operation writes in one order, chosen so that a crash between two steps leaves what
the next step or the reconciler mends (``ldims check`` names it; ``--repair`` mends it):

============ ================================================ ==============================
operation    order of writes                                  a crash between two steps
============ ================================================ ==============================
ingest       original stored (durable) → row added (queued)   an original no row names:
             → extract queued                                 swept after an hour's grace
new version  new original → row's next version (queued) →     reads answer 202 until it is
             old content discarded if no row names it →        completed; the index replaces
             extract → index replaces chunks and lexicon      the old chunks in one Whoosh/
             rows at once → completed → vectors replaced       FTS5 commit (whole or not at
                                                              all); vectors of another
                                                              version are never served
extract      extraction stored → row touched → index queued   re-driven by the reconciler;
                                                              the extraction is reused
index        chunks + lexicon rows in one commit → row        indexed but not completed:
             completed (a row deleted meanwhile: its chunks   re-driven, written over
             removed at once)
embed        vectors of the completed version → row records   vectors without a record:
             them                                             written again (same version)
delete       row removed → content discarded if no row names  chunks, lexicon rows, vectors
             it → chunks and lexicon rows → vectors (delete   of a document the catalog
             task)                                            lacks: the orphan sweeps
reprocess    row queued again (vectors too) → extract (the    as a new version
             extraction reused) → index → embed
purge        ``ldims check --repair``: orphans removed,       looked at twice: a write in
             missing chunks / vectors written again           flight is not a finding
============ ================================================ ==============================
"""

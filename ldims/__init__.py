"""LDIMS: the shared base (settings, error tree, caller identity, catalog, content-addressed
storage) and the cores (``ldims.documents``, ``ldims.sql``, ``ldims.guide``).

The adapters (``api``) and the composition root (``runtime``) import from here; nothing here
imports them. The cores use the workers' producer side (``workers.Dispatcher``) and the
index; the base imports neither. ``.importlinter`` holds these rules and ``make test``
checks them.
"""

__version__ = "0.1.0"

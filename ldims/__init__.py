"""LDIMS shared core: settings, error tree, catalog and content-addressed storage.

Both sides of the pipeline import from here (``api`` and ``workers``); nothing here imports
them back, except the command-line adapter ``ldims.cli``, which starts them.
"""

__version__ = "0.1.0"

"""The ``ldims`` command: thin adapters that start or call the other packages."""

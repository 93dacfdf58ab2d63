"""The ``ldims`` command starts without the API, the pipeline's workers or NumPy: each command
imports what it needs when it runs (``ldims --help`` took 2.5 s of imports, now under 1 s; the
time itself is not asserted: tests are not timed, the module list is what keeps it so)."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = (
    "fastapi",
    "mcp",
    "numpy",
    "celery",
    "whoosh",
    "onnxruntime",
    "api",
    "indexer",
    "workers.tasks",
    "workers.extraction",
    "runtime.services",
)


def test_the_cli_module_imports_nothing_heavy() -> None:
    code = (
        "import json, sys, runtime.cli.main; "
        f"print(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == []


def test_the_lazy_names_of_the_packages_still_resolve() -> None:
    import runtime
    import workers

    assert callable(runtime.create_app) and callable(runtime.build_services)
    assert all(hasattr(workers, name) for name in workers.__all__)

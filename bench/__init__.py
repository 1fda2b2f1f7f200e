"""Benchmarks and experiments, run from the checkout (``python -m bench.NAME``).

Where the project is not installed (a bare copy of the checkout, as on a lent GPU machine), the
package ``askalike`` is mapped onto the checkout's folders here, as the editable install maps it,
so that ``askalike.core`` is ``core/`` in this process: enough for a script that runs the
library in-process (``bench.gpu``), not for one that starts ``python -m askalike.app`` children
(``bench.serve``, ``bench.runtime``), which need the install."""

import importlib.util
import sys
import types
from pathlib import Path

if importlib.util.find_spec("askalike") is None:
    _checkout = types.ModuleType("askalike")
    _checkout.__path__ = [str(Path(__file__).resolve().parents[1])]
    sys.modules["askalike"] = _checkout

"""Numerical equivalence of one model across runtimes, compared stage by stage.

Pure functions (no Prefect, no store): read stage dumps, compare them, build a report.
"""

from voxledger.tasks.equivalence.compare import (
    compare_dirs,
    compare_stage,
    length_drift,
    load_equivalence_plan,
)
from voxledger.tasks.equivalence.dumps import (
    DumpIndex,
    DumpSource,
    check_finite,
    conform_array,
    discover_dumps,
    load_dump,
)

__all__ = [
    "DumpIndex",
    "DumpSource",
    "check_finite",
    "compare_dirs",
    "compare_stage",
    "conform_array",
    "discover_dumps",
    "length_drift",
    "load_dump",
    "load_equivalence_plan",
]

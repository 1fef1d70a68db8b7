"""What a member's process does before anything else: take the sweep's code identity, follow its parent.

Every voxledger process computes its code identity once (``stores.identity.code_identity``, cached)
and every cache key it writes carries it. A member's process is started fresh (spawned: torch and
OpenMP are not safe to fork from a process that has trained), so it would compute its own, later
than the sweep did; in a checkout edited while a sweep runs the two would differ, and the sweep
would not find the run it had just had trained. So the member's process takes the sweep's identity,
exactly as a module the sweep's own process imports after start-up does. This module imports
nothing that binds ``code_identity`` first, so the identity is in place before any module that
reads it is imported.
"""

from __future__ import annotations

from typing import Any


def start_member_process(identity: dict[str, Any]) -> None:
    """The member process's initializer: the sweep's code identity, and death with the sweep's process."""
    from voxledger.schemas.base import CodeIdentity
    from voxledger.stores import identity as module
    from voxledger.tasks.processes import die_with_parent

    pinned = CodeIdentity.model_validate(identity)
    module.code_identity = lambda: pinned  # type: ignore[assignment]
    die_with_parent()

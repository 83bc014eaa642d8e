"""A replica that stops being the active one ends, so that it is never active again on what it kept.

kopf pauses a replica when a peer of a higher priority is live, and when it resumes it lists every
resource again, but it never tells its indexes of the objects deleted in between: its watch yields
what the new listing holds and nothing for what is missing (kopf/_cogs/clients/watching.py,
``continuous_watch``). A replica active again would answer admission requests, judge compliance and
plan rollouts from StorageProfiles, classes and reports that are gone (a deleted deny profile still
denying). So once a replica has been the active one, being paused ends its process with
EXIT_STOOD_DOWN; the Deployment starts its container afresh, a standby with empty indexes that kopf
fills from a new listing when it is next active. A replica that never was active is left alone: it
has listed nothing yet.
"""

import logging
import threading
import time
from collections.abc import Callable

import kopf

from mountwarden.handlers.config import OperatorConfig
from mountwarden.handlers.context import OperatorContext, Shutdown

log = logging.getLogger(__name__)

#: The exit status of a replica that stood down (sysexits' EX_TEMPFAIL: start it again).
EXIT_STOOD_DOWN = 75
#: Seconds between checks of the peering object (mountwarden.adapters.peering.ActiveReplica caches its answer 2 s).
CHECK_SECONDS = 2.0


def stand_down_when_paused(replica_active: Callable[[], bool], shutdown: Shutdown,
                           interval: float = CHECK_SECONDS) -> None:
    """Once ``replica_active()`` has said yes, its first no ends the operator (``shutdown``), and this loop."""
    was_active = False
    while True:
        try:
            active = replica_active()
        except Exception:  # a bug must not take the check away: the next tick asks again
            log.exception("could not tell whether this replica is the active one")
            active = was_active
        if active and not was_active:
            log.info("this replica is the active one")
        elif was_active and not active:
            reason = ("another replica is the active one now: this one stops and starts afresh, so that it is "
                      "never active again on indexes that still hold what was deleted while it stood by")
            log.warning(reason)
            shutdown.request(reason, EXIT_STOOD_DOWN)
            return
        was_active = active
        time.sleep(interval)


async def start_watching(memo: OperatorContext, settings: kopf.OperatorSettings, **_) -> None:
    memo.shutdown.bind()
    if settings.peering.standalone:
        return  # the only replica: never paused
    # A daemon thread: it ends with the process, or on its own once it has asked for the shutdown.
    threading.Thread(target=stand_down_when_paused, name="stand-down", daemon=True,
                     args=(memo.replica_active, memo.shutdown)).start()


def register(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    kopf.on.startup(registry=registry)(start_watching)

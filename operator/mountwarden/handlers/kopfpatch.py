"""The one patch mountwarden makes to kopf: start-up linear in the number of objects (docs/upstream/kopf-toggleset.md).

It replaces methods of a private kopf class, so it applies only to the kopf release and the
source it was written against (pyproject.toml pins kopf exactly); any other leaves kopf as it is.
"""

import ast
import hashlib
import inspect
import logging

import kopf

#: The kopf release whose ToggleSet the patch below was written against (pyproject.toml pins it exactly).
KOPF_PINNED = "1.45.2"
#: The ToggleSet methods the patch replaces or relies on (its waiters' predicate), and the SHA-256 of their
#: source in KOPF_PINNED. A kopf whose methods differ is left unpatched: slower to start, never wrong.
TOGGLESET_METHODS = ("is_on", "wait_for", "make_toggle", "drop_toggle", "drop_toggles")
TOGGLESET_SOURCE_SHA256 = "7f8e4740dcc92350ace57c6429e103ce4f15a6191beee4d4651f20e5f101fccb"


def toggleset_source_digest() -> str:
    """SHA-256 of the source of kopf's own ToggleSet methods (read from its module file: patched or not)."""
    from kopf._cogs.aiokits import aiotoggles

    source = inspect.getsource(aiotoggles)
    toggle_set = next(node for node in ast.parse(source).body
                      if isinstance(node, ast.ClassDef) and node.name == "ToggleSet")
    methods = {node.name: node for node in toggle_set.body
               if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
    digest = hashlib.sha256()
    for name in TOGGLESET_METHODS:
        segment = ast.get_source_segment(source, methods[name]) if name in methods else ""
        digest.update(f"{name}\0{segment}\0".encode())
    return digest.hexdigest()


def wake_waiters_only_on_flips() -> bool:
    """Make kopf's start-up linear in the number of objects instead of quadratic; False when not applied.

    While kopf fills its indexes, every object has a toggle in one set, drops it once
    indexed, then waits for the whole set; each drop woke every waiting task although the
    set's state (all indexed or not) flips only once: 3,000 objects took 45 s, 25,000 would
    take hours. Waiters check only that state, so waking them only when it flips is exact.
    The patch touches kopf's private ToggleSet, so it applies only to the source it was
    written against (docs/upstream/kopf-toggleset.md has the measurements and the fix for kopf).
    """
    from kopf._cogs.aiokits import aiotoggles

    toggle_set = aiotoggles.ToggleSet
    if getattr(toggle_set, "wakes_only_on_flips", False):
        return True
    if toggleset_source_digest() != TOGGLESET_SOURCE_SHA256:
        logging.getLogger(__name__).warning(
            "kopf %s's ToggleSet is not the one of kopf %s that mountwarden patches: running unpatched (start-up "
            "with many objects is slower; see docs/upstream/kopf-toggleset.md)", kopf.__version__, KOPF_PINNED)
        return False

    async def make_toggle(self, __val: bool = False, *, name: str | None = None):
        toggle = aiotoggles.Toggle(__val, name=name, condition=self._condition)
        async with self._condition:
            before = self.is_on()
            self._toggles.add(toggle)
            if self.is_on() != before:
                self._condition.notify_all()
        return toggle

    async def drop_toggles(self, toggles) -> None:
        async with self._condition:
            before = self.is_on()
            self._toggles.difference_update(toggles)
            if self.is_on() != before:
                self._condition.notify_all()

    async def drop_toggle(self, toggle) -> None:
        await drop_toggles(self, [toggle])

    toggle_set.make_toggle = make_toggle
    toggle_set.drop_toggles = drop_toggles
    toggle_set.drop_toggle = drop_toggle
    toggle_set.wakes_only_on_flips = True
    return True

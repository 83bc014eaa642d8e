"""Resources the operator keeps a few fields of: listed in pages, watched, each object reduced as it arrives.

kopf keeps, for every object it watches, a worker task with its queue, a copy of the memo
and the object itself, and at start it holds every listed object until every resource is
indexed. With 20,000 pods and 5,000 PVs and claims that was 1.1 GiB and minutes to start
(bench/scale.py; the memory profiles in bench/results/scale.json). The resources a large
cluster has by the ten thousand (pods, PersistentVolumes, claims) are therefore watched
here: each object is reduced at once to the entries it files in a few indexes, and only
those are kept. The indexes have the shape of kopf's (``index.get(key)`` -> the values filed
under ``key``), so handlers read them the same way (mountwarden.handlers.indexes).

One thread per resource lists it in pages (PAGE_SIZE objects held at a time; the first
list files each page as it comes) and then watches it from the list's resourceVersion; an
error or an expired watch (410 Gone) lists it again. ``synced`` is set once the first list
is in: before that no answer is whole.
"""

import functools
import inspect
import json
import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from typing import Any

import kubernetes
from kubernetes.client import ApiClient

from mountwarden.adapters.rest import Rest, path, watcher

log = logging.getLogger(__name__)

#: Objects per page of a list: the transient memory of a list is one page, not the cluster.
PAGE_SIZE = 500
WATCH_SECONDS = 300
RETRY_SECONDS = 5.0

#: What one object files: index name -> {key: value}.
Entries = dict[str, dict[Hashable, Any]]
#: Reduces an object (its wire form) to its entries; {} files nothing.
Reducer = Callable[[Mapping], Entries]
#: Told of every change: (uid, entries before, entries after), in the watch's thread.
Listener = Callable[[str, Entries, Entries], None]
#: A page of a list, reduced: what each object files by UID, the continue token and the resourceVersion.
ReducedPage = tuple[dict[str, Entries], str | None, str]
#: Reduces a page of a list from the bytes the API server sent.
PageReducer = Callable[[bytes | bytearray], ReducedPage]


def reduce_json_page(data: bytes | bytearray, reduce: Reducer) -> ReducedPage:
    """A page decoded whole, each object handed to ``reduce``: for resources whose objects are few or small."""
    page = json.loads(data)
    metadata = page.get("metadata") or {}
    entries = {obj["metadata"]["uid"]: reduce(obj) for obj in page.get("items") or []}
    return entries, metadata.get("continue"), metadata.get("resourceVersion", "")


class _Sole:
    """The one value filed under a key: most keys of these indexes (a pod's UID, a PV's name) have one filer, and
    a pair of slots costs a quarter of a one-entry dict."""

    __slots__ = ("uid", "value")

    def __init__(self, uid: str, value: Any) -> None:
        self.uid = uid
        self.value = value


class Index(Mapping):
    """key -> the values filed under it, as a tuple (a copy, made under the lock the watch thread writes under)."""

    def __init__(self, lock: threading.Lock) -> None:
        self._store: dict[Hashable, _Sole | dict[str, Any]] = {}
        self._lock = lock

    @staticmethod
    def _values(found: _Sole | dict[str, Any]) -> tuple:
        return (found.value,) if isinstance(found, _Sole) else tuple(found.values())

    def __getitem__(self, key: Hashable) -> tuple:
        with self._lock:
            return self._values(self._store[key])

    def get(self, key: Hashable, default: Any = None) -> Any:
        with self._lock:
            found = self._store.get(key)
            return self._values(found) if found is not None else default

    def __contains__(self, key: object) -> bool:
        return key in self._store

    def __iter__(self) -> Iterator[Hashable]:
        with self._lock:
            return iter(list(self._store))

    def __len__(self) -> int:
        return len(self._store)

    def _file(self, uid: str, entries: Mapping[Hashable, Any]) -> None:
        for key, value in entries.items():
            found = self._store.get(key)
            if found is None:
                self._store[key] = _Sole(uid, value)
            elif isinstance(found, _Sole):
                self._store[key] = {found.uid: found.value, uid: value}
            else:
                found[uid] = value

    def _unfile(self, uid: str, keys: Iterable[Hashable]) -> None:
        for key in keys:
            found = self._store.get(key)
            if isinstance(found, _Sole):
                if found.uid == uid:
                    del self._store[key]
            elif found is not None:
                found.pop(uid, None)
                if len(found) == 1:
                    (sole_uid, value), = found.items()
                    self._store[key] = _Sole(sole_uid, value)

    def _filed_by(self, uid: str, keys: Iterable[Hashable]) -> dict[Hashable, Any]:
        """What ``uid`` filed under ``keys``, as its reducer gave it."""
        filed = {}
        for key in keys:
            found = self._store[key]
            filed[key] = found.value if isinstance(found, _Sole) else found[uid]
        return filed


class ReducedWatch:
    """One resource, kept as the indexes its objects file; ``indexes[name]`` reads one."""

    def __init__(self, what: str, rest: Rest | None, reduce: Reducer,
                 names: tuple[str, ...], reduce_page: PageReducer | None = None) -> None:
        """``what`` is the plural of a core resource listed cluster-wide (pods, persistentvolumes), read through
        ``rest``; without one the watch holds what ``load`` is given and follows nothing. ``reduce`` takes a watch event's
        object; ``reduce_page`` a list's page, as bytes (by default, each object decoded and handed to ``reduce``:
        a resource listed by the ten thousand decodes only what it keeps instead)."""
        self.what = what
        self.rest = rest
        self.path = path("v1", what)
        self.reduce = reduce
        self.reduce_page = reduce_page or functools.partial(reduce_json_page, reduce=reduce)
        self._lock = threading.Lock()
        self.indexes: dict[str, Index] = {name: Index(self._lock) for name in names}
        self.listeners: list[Listener] = []
        self.synced = threading.Event()
        self._names = names
        #: uid -> the keys it filed under, in each index of ``names`` (in that order): enough to unfile it, and
        #: its entries are in the indexes themselves, so none is held twice.
        self._filed: dict[str, tuple[tuple[Hashable, ...], ...]] = {}
        self._stop = threading.Event()
        self._watch: kubernetes.watch.Watch | None = None
        self._thread: threading.Thread | None = None

    def __len__(self) -> int:
        return len(self._filed)

    def start(self) -> None:
        if self.rest is None:
            raise RuntimeError(f"the watch of {self.what} has no list call to follow")
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"watch-{self.what}", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
        if self._thread is not None:
            self._thread.join(timeout=10)

    # -- filing ----------------------------------------------------------------------------------

    def entries_of(self, uid: str) -> Entries:
        """What ``uid`` files now (the indexes it files nothing in left out)."""
        with self._lock:
            return self._entries_of(uid)

    def load(self, objects: Mapping[str, Entries]) -> None:
        """Hold exactly what ``objects`` (uid -> entries, a whole list's worth) file; answers are whole from now."""
        with self._lock:
            before = {uid: self._entries_of(uid) for uid in self._filed} if self.listeners else {}
            self._filed = {}
            for index in self.indexes.values():
                index._store.clear()
            for uid, entries in objects.items():
                self._file(uid, entries)
        self.synced.set()
        if self.listeners:
            for uid in before.keys() | objects.keys():
                after = _kept(objects.get(uid, {}))
                if before.get(uid, {}) != after:
                    self._tell(uid, before.get(uid, {}), after)

    def apply(self, uid: str, entries: Entries) -> None:
        """One object changed ({} when it is gone or files nothing any more)."""
        with self._lock:
            before = self._entries_of(uid) if self.listeners else {}
            for name, keys in zip(self._names, self._filed.pop(uid, ()), strict=False):
                self.indexes[name]._unfile(uid, keys)
            self._file(uid, entries)
        if self.listeners and before != (after := _kept(entries)):
            self._tell(uid, before, after)

    def _entries_of(self, uid: str) -> Entries:
        return {name: self.indexes[name]._filed_by(uid, keys)
                for name, keys in zip(self._names, self._filed.get(uid, ()), strict=False) if keys}

    def _file(self, uid: str, entries: Entries) -> None:
        if any(entries.values()):
            self._filed[uid] = tuple(tuple(entries.get(name) or ()) for name in self._names)
            for name, filed in _kept(entries).items():
                self.indexes[name]._file(uid, filed)

    def _tell(self, uid: str, before: Entries, after: Entries) -> None:
        for listener in self.listeners:
            try:
                listener(uid, before, after)
            except Exception:  # a listener's bug must not stop the watch
                log.exception("a listener of %s failed", self.what)

    # -- the list and the watch -------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._follow(self._list())
            except Exception as error:  # the API server away, 410 Gone: list again after a pause
                if self._stop.is_set():
                    return
                log.warning("watching %s failed (%s): listing them again in %.0f s", self.what, error, RETRY_SECONDS)
                self._stop.wait(RETRY_SECONDS)

    def _list(self) -> str:
        # The first list files each page as it comes: gathering a whole cluster's entries before filing them (some
        # 700 bytes a pod, all in small blocks CPython's allocator keeps once freed) set the operator's peak. A
        # later list (after an error or a 410 Gone), or a first one begun again, replaces what is filed at once.
        streaming = not self.synced.is_set() and not self._filed
        objects: dict[str, Entries] = {}
        token = None
        while True:
            page = self.rest.raw("GET", self.path, query={"limit": PAGE_SIZE, "continue": token})
            entries, token, resource_version = self.reduce_page(page)
            if streaming:
                self._add(entries)
            else:
                objects.update(entries)
            if not token:
                if streaming:
                    self.synced.set()
                else:
                    self.load(objects)
                log.info("following %d %s", len(self._filed), self.what)
                return resource_version

    def _add(self, objects: Mapping[str, Entries]) -> None:
        """File objects none of which is filed yet (a page of the first list), telling the listeners."""
        with self._lock:
            for uid, entries in objects.items():
                self._file(uid, entries)
        if self.listeners:
            for uid, entries in objects.items():
                if after := _kept(entries):
                    self._tell(uid, {}, after)

    def _follow(self, resource_version: str) -> None:
        while not self._stop.is_set():
            self._watch = watcher()
            for event in self.rest.watch(self._watch, self.path, resource_version=resource_version,
                                         timeout_seconds=WATCH_SECONDS):
                obj = event["object"]
                resource_version = obj["metadata"]["resourceVersion"]
                if event["type"] != "BOOKMARK":
                    uid = obj["metadata"]["uid"]
                    self.apply(uid, {} if event["type"] == "DELETED" else self.reduce(obj))


def _kept(entries: Entries) -> Entries:
    return {name: filed for name, filed in entries.items() if filed}


#: How a resource is kept: its reducer, its indexes' names and, optionally, its page reducer (see ReducedWatch).
WatchedAs = tuple[Reducer, tuple[str, ...]] | tuple[Reducer, tuple[str, ...], PageReducer]


class CoreWatches:
    """The cluster's pods, PersistentVolumes and claims, each kept as the indexes its reducer files."""

    def __init__(self, client: ApiClient, *, pods: WatchedAs, volumes: WatchedAs, claims: WatchedAs) -> None:
        rest = Rest(client)
        self.pods = ReducedWatch("pods", rest, *pods)
        self.volumes = ReducedWatch("persistentvolumes", rest, *volumes)
        self.claims = ReducedWatch("persistentvolumeclaims", rest, *claims)

        self.all = (self.pods, self.volumes, self.claims)
        #: Every index of the three, by name.
        self.indexes: dict[str, Index] = {name: index for watch in self.all for name, index in watch.indexes.items()}

    def start(self) -> None:
        for watch in self.all:
            watch.start()

    def stop(self) -> None:
        for watch in self.all:
            watch.stop()

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return all(watch.synced.wait(max(0.0, deadline - time.monotonic())) for watch in self.all)


def with_cluster_indexes(handler: Callable) -> Callable:
    """Hand a kopf handler the indexes of ``memo.watches`` (a CoreWatches) by name, as kopf hands its own."""

    def with_indexes(kwargs: dict) -> dict:
        watches = getattr(kwargs["memo"], "watches", None)
        return {**watches.indexes, **kwargs} if watches is not None else kwargs  # those given (by a test) win

    if inspect.iscoroutinefunction(handler):
        @functools.wraps(handler)
        async def async_wrapper(*args, **kwargs):
            return await handler(*args, **with_indexes(kwargs))
        return async_wrapper

    @functools.wraps(handler)
    def wrapper(*args, **kwargs):
        return handler(*args, **with_indexes(kwargs))
    return wrapper

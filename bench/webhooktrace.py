"""Where a PVC create's time goes when it passes through mountwarden's webhook: a per-request trace.

Used by the benchmarks' counting operator (bench/rollout.py) when $MOUNTWARDEN_BENCH_WEBHOOK_TRACE
names a file: from SIGUSR2 to the next SIGUSR1 the operator records, all on CLOCK_MONOTONIC
(time.perf_counter, which the benchmark's client uses too, so both sides share one clock):

- per webhook request: when its first bytes reached aiohttp's protocol (the event loop read
  them), when kopf's handler began, the PVC review itself (name, start, end), when the handler
  returned and when the response was written;
- every garbage collection (generation, duration), from gc.callbacks;
- every 10 ms, from a thread of its own: how late a callback posted to the event loop ran
  (the loop's lag: busy with other work, or waiting for the GIL), how late the thread itself
  woke (the GIL, or the CPU), the CPU time of each thread of the process and the time the
  event loop's thread waited for a CPU (/proc/self/task/TID/schedstat: the machine's load).

``report`` joins this with the client's own timings of each create (bench/admission.py) and
says, for the slowest creates of each side, where their time went. Nothing here changes how
the operator answers; the sampler costs a thread waking 100 times a second.
"""

import asyncio
import contextvars
import gc
import json
import random
import threading
import time
from collections.abc import Mapping
from pathlib import Path

TRACE_ENV = "MOUNTWARDEN_BENCH_WEBHOOK_TRACE"
SAMPLE_SECONDS = 0.010

_current: contextvars.ContextVar[dict | None] = contextvars.ContextVar("mountwarden_webhook_trace", default=None)


def _schedstat(tid: int) -> tuple[int, int]:
    """(ns on a CPU, ns waiting for one) of one thread of this process."""
    with open(f"/proc/self/task/{tid}/schedstat") as stat:
        running, waiting, _ = stat.read().split()
    return int(running), int(waiting)


class WebhookTrace:
    def __init__(self) -> None:
        self.recording = False
        self.requests: list[dict] = []
        self.collections: list[tuple[float, float, int]] = []
        self.loop_lags: list[tuple[float, float]] = []
        self.wake_lags: list[tuple[float, float]] = []
        #: (time, {thread name: cpu seconds}, event loop thread's runqueue wait seconds, None before its first request)
        self.threads: list[tuple[float, dict[str, float], float | None]] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        #: What a full collection walks and what is frozen out of it; a full collection's duration at the end.
        self.heap: dict = {}
        self.loop_tid: int | None = None
        self._gc_started = 0.0
        self._stop = threading.Event()

    # -- hooks ------------------------------------------------------------------------------------

    def install(self) -> None:
        """Wrap aiohttp's and kopf's webhook path and the PVC review, and follow the garbage collector."""
        import aiohttp.web_protocol
        import kopf

        from mountwarden.handlers.admission import PvcReviews

        trace = self
        protocol = aiohttp.web_protocol.RequestHandler
        data_received, finish_response = protocol.data_received, protocol.finish_response
        serve = kopf.WebhookServer._serve
        answer = PvcReviews.answer

        # aiohttp's RequestHandler has __slots__: what is noted per connection is kept here, by its id.
        received: dict[int, float] = {}
        in_flight: dict[int, dict] = {}

        def traced_data_received(self, data: bytes) -> None:
            # The SSL transport also hands over empty reads, and a body can follow its headers once kopf's
            # handler (entered on the headers) is waiting for it: neither starts a request.
            if trace.recording and data and id(self) not in in_flight:
                received.setdefault(id(self), time.perf_counter())
            data_received(self, data)

        async def traced_serve(fn, request):
            if not trace.recording:
                return await serve(fn, request)
            if trace.loop is None:
                trace.loop = asyncio.get_running_loop()
                trace.loop_tid = threading.get_native_id()
            record = {"webhook": request.match_info.get("id"), "received": received.pop(id(request.protocol), None),
                      "entered": time.perf_counter()}
            in_flight[id(request.protocol)] = record
            _current.set(record)
            try:
                return await serve(fn, request)
            finally:
                record["served"] = time.perf_counter()

        async def traced_finish_response(self, request, resp, start_time):
            try:
                return await finish_response(self, request, resp, start_time)
            finally:
                record = in_flight.pop(id(self), None)
                if record is not None:
                    record["written"] = time.perf_counter()
                    trace.requests.append(record)

        def traced_answer(self, request: Mapping) -> dict | None:
            record = _current.get()
            started = time.perf_counter()
            try:
                return answer(self, request)
            finally:
                if record is not None:
                    record["reviewed"] = (started, time.perf_counter())
                    payload = (request.get("request") or {}) if isinstance(request, Mapping) else {}
                    record["namespace"], record["name"] = payload.get("namespace"), payload.get("name")

        protocol.data_received = traced_data_received
        protocol.finish_response = traced_finish_response
        kopf.WebhookServer._serve = staticmethod(traced_serve)
        PvcReviews.answer = traced_answer
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        if not self.recording:
            return
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self.collections.append((self._gc_started, time.perf_counter() - self._gc_started, info["generation"]))

    # -- the sampler ------------------------------------------------------------------------------

    def start(self) -> None:
        self.heap = {"walked_at_start": len(gc.get_objects()), "frozen_at_start": gc.get_freeze_count()}
        self.recording = True
        threading.Thread(target=self._sample, name="webhook-trace", daemon=True).start()

    def _sample(self) -> None:
        due = time.perf_counter()
        while not self._stop.is_set():
            due += SAMPLE_SECONDS
            time.sleep(max(0.0, due - time.perf_counter()))
            now = time.perf_counter()
            self.wake_lags.append((due, now - due))
            if now - due > SAMPLE_SECONDS:
                due = now  # late: start again from now rather than waking in a burst
            if self.loop is not None and not self.loop.is_closed():
                self.loop.call_soon_threadsafe(self._ran, now)
            cpu = {}
            for thread in threading.enumerate():
                if thread.ident is None or thread.name == "webhook-trace":
                    continue
                try:
                    cpu[thread.name] = cpu.get(thread.name, 0.0) + time.clock_gettime(
                        time.pthread_getcpuclockid(thread.ident))
                except (OSError, ProcessLookupError):
                    continue
            waiting = _schedstat(self.loop_tid)[1] / 1e9 if self.loop_tid else None
            self.threads.append((now, cpu, waiting))

    def _ran(self, posted: float) -> None:
        self.loop_lags.append((posted, time.perf_counter() - posted))

    def write(self, path: Path) -> None:
        self._stop.set()
        self.recording = False
        # What one full collection costs the operator now (the creates are over: it stalls nobody measured).
        started = time.perf_counter()
        gc.collect()
        self.heap["full_collection_ms"] = round((time.perf_counter() - started) * 1000, 1)
        self.heap["walked_at_end"], self.heap["frozen_at_end"] = len(gc.get_objects()), gc.get_freeze_count()
        path.write_text(json.dumps({
            "requests": self.requests, "collections": self.collections, "loop_lags": self.loop_lags,
            "wake_lags": self.wake_lags, "threads": self.threads, "heap": self.heap,
        }))


# -- the API server's own view ---------------------------------------------------------------------------

WEBHOOK_HISTOGRAM = "apiserver_admission_webhook_admission_duration_seconds_bucket"


def webhook_histograms(client) -> dict[str, dict[str, int]]:
    """The API server's histogram of each validating webhook's call duration: webhook -> {le: cumulative count}."""
    method, url, headers, _, _ = client.param_serialize("GET", "/metrics", auth_settings=["BearerToken"])
    text = client.call_api(method, url, headers).read().decode()
    histograms: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        if line.startswith(WEBHOOK_HISTOGRAM + "{") and 'type="validating"' in line:
            labels, _, value = line[len(WEBHOOK_HISTOGRAM) + 1:].rpartition("} ")
            fields = dict(part.split("=", 1) for part in labels.split(","))
            name, le = fields["name"].strip('"'), fields["le"].strip('"')
            bucket = histograms.setdefault(name, {})
            bucket[le] = bucket.get(le, 0) + int(float(value))
    return histograms


def histogram_lines(before: Mapping, after: Mapping) -> list[str]:
    """Each webhook's calls during the creates by the API server's duration buckets (its own clock)."""
    lines = ["the API server's own timing of each webhook call during the creates (calls per bucket, seconds):"]
    for name in sorted(after):
        counts = {le: after[name][le] - before.get(name, {}).get(le, 0) for le in after[name]}
        bounds = sorted(counts, key=lambda le: float(le))
        previous, cells = 0, []
        for le in bounds:
            cells.append(f"<={le}: {counts[le] - previous}")
            previous = counts[le]
        lines.append(f"  {name}: " + ", ".join(cells))
    return lines


# -- the report -----------------------------------------------------------------------------------------


def _in(samples: list, start: float, end: float) -> list:
    return [s for s in samples if start <= s[0] <= end]


def _thread_cpu(threads: list, start: float, end: float) -> tuple[dict[str, float], float]:
    """CPU seconds each thread used in [start, end], and the loop thread's wait for a CPU, from the samples around."""
    threads = [s for s in threads if s[2] is not None]
    before = [s for s in threads if s[0] <= start]
    after = [s for s in threads if s[0] >= end]
    if not before or not after:
        return {}, 0.0
    (_, first, waited_first), (_, last, waited_last) = before[-1], after[0]
    return ({name: last[name] - first.get(name, 0.0) for name in last if last[name] - first.get(name, 0.0) > 0.0005},
            waited_last - waited_first)


def _added_ratio(seconds: Mapping[str, list[float]], q: float) -> float | None:
    """mountwarden's added latency over none's at quantile ``q``, divided by the null webhook's (as admission.figures)."""
    from bench.admission import percentile

    at = {side: percentile(values, q) for side, values in seconds.items()}
    null_added = at["null"] - at["none"]
    return (at["mountwarden"] - at["none"]) / null_added if null_added > 0.00005 else None


def _ratio_noise(seconds: Mapping[str, list[float]], resamples: int = 2000) -> list[str]:
    """The added-latency ratio at several quantiles, and how far the p99 one moves when the creates are resampled."""
    if not all(seconds.get(side) for side in ("none", "null", "mountwarden")):
        return []
    lines = ["webhook_added_vs_null at p50/p90/p95/p99: " + ", ".join(
        f"{name} {ratio:.2f}" if (ratio := _added_ratio(seconds, q)) is not None else f"{name} n/a"
        for name, q in (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99)))]
    rng = random.Random(14)
    ratios = sorted(r for _ in range(resamples) if (r := _added_ratio(
        {side: rng.choices(values, k=len(values)) for side, values in seconds.items()}, 0.99)) is not None)
    if ratios:
        lines.append(f"the p99 ratio over {resamples} bootstrap resamples of the same creates: 5th-95th percentile "
                     f"{ratios[int(len(ratios) * 0.05)]:.2f} .. {ratios[int(len(ratios) * 0.95)]:.2f}, "
                     f"median {ratios[len(ratios) // 2]:.2f}; {sum(1 for r in ratios if r <= 1.5) / len(ratios):.0%} "
                     "of them <= 1.5")
    return lines


def report(client: list[dict], trace: Mapping, *, slowest: int = 8, histograms: tuple | None = None) -> str:
    """Text: each side's slowest creates, and for mountwarden's the phases and what the process did meanwhile.

    ``client``: {"side", "namespace", "name", "start", "end"} per create (bench/admission.py).
    """
    by_name = {(r.get("namespace"), r.get("name")): r for r in trace["requests"] if r.get("name")}
    ms = 1000.0
    lines = []
    sides = sorted({c["side"] for c in client})
    for side in sides:
        creates = sorted((c for c in client if c["side"] == side), key=lambda c: c["end"] - c["start"])
        durations = [(c["end"] - c["start"]) * ms for c in creates]
        lines.append(f"{side}: {len(creates)} creates, median {durations[len(durations) // 2]:.1f} ms, "
                     f"slowest {', '.join(f'{d:.0f}' for d in durations[-slowest:][::-1])} ms")
    lines.append("")
    lines.extend(_ratio_noise({side: [c["end"] - c["start"] for c in client if c["side"] == side] for side in sides}))
    lines.append("")
    if histograms:
        lines.extend(histogram_lines(*histograms))
        lines.append("")
    phases = ("apiserver before the call, and the loop reading it", "aiohttp -> kopf handler", "PVC review",
              "kopf handler -> response written", "apiserver after the answer")
    traced = [(c, by_name.get((c["namespace"], c["name"]))) for c in client if c["side"] == "mountwarden"]
    traced = [(c, r) for c, r in traced if r and r.get("received") and r.get("written")]
    lines.append(f"mountwarden's creates with a server-side record: {len(traced)}")

    def split(c: dict, r: dict) -> list[float]:
        reviewed = r.get("reviewed") or (r["entered"], r["entered"])
        return [r["received"] - c["start"], reviewed[0] - r["received"], reviewed[1] - reviewed[0],
                r["written"] - reviewed[1], c["end"] - r["written"]]

    if traced:
        inside = sorted((r["written"] - r["received"]) * ms for _, r in traced)
        lines.append(f"in the operator (first bytes read -> response written): median {inside[len(inside) // 2]:.2f} ms, "
                     f"p99 {inside[min(len(inside) - 1, int(len(inside) * 0.99))]:.1f} ms, max {inside[-1]:.1f} ms")
        medians = [sorted(split(c, r)[i] for c, r in traced)[len(traced) // 2] * ms for i in range(len(phases))]
        lines.append("median of each phase (ms): " + "; ".join(f"{p} {m:.2f}" for p, m in zip(phases, medians,
                                                                                             strict=True)))
    lines.append("")
    lines.append(f"mountwarden's {slowest} slowest creates: each phase (ms), and in the whole create: "
                 "garbage collections, the event loop's worst lag, the loop thread's wait for a CPU, "
                 "the CPU each busy thread used")
    for c, r in sorted(traced, key=lambda cr: cr[0]["end"] - cr[0]["start"])[-slowest:][::-1]:
        start, end = c["start"], c["end"]
        parts = split(c, r)
        collections = _in(trace["collections"], start - 1.0, end)
        collections = [g for g in collections if g[0] + g[1] >= start]
        lags = _in(trace["loop_lags"], start, end)
        cpu, waited = _thread_cpu(trace["threads"], start, end)
        lines.append(f"- {c['name']}: {(end - start) * ms:.1f} ms = " + " + ".join(f"{p * ms:.1f}" for p in parts))
        lines.append(f"    gc: {', '.join(f'gen{g[2]} {g[1] * ms:.1f} ms' for g in collections) or 'none'}; "
                     f"loop lag max {max((lag for _, lag in lags), default=0.0) * ms:.1f} ms; "
                     f"loop thread waited for a CPU {waited * ms:.1f} ms; cpu: "
                     + ", ".join(f"{name} {seconds * ms:.0f}" for name, seconds in
                                 sorted(cpu.items(), key=lambda item: -item[1])[:5]))
    lines.append("")
    lines.append("whole-process stalls (the trace thread woke over 50 ms late), and the creates they overlapped:")
    stalls = [(due, lag) for due, lag in trace["wake_lags"] if lag > 0.05]
    for due, lag in stalls:
        during = [g for g in trace["collections"] if g[0] <= due + lag and g[0] + g[1] >= due and g[1] > 0.001]
        hit = [f"{c['side']} {c['name']} {(c['end'] - c['start']) * ms:.0f} ms" for c in client
               if c["start"] <= due + lag and c["end"] >= due]
        lines.append(f"- {lag * ms:.0f} ms at {due - client[0]['start']:.1f} s into the creates; "
                     f"{', '.join(f'gen{g[2]} collection {g[1] * ms:.0f} ms' for g in during) or 'no collection'}; "
                     f"creates in flight: {', '.join(hit) or 'none'}")
    if not stalls:
        lines.append("- none")
    heap = trace.get("heap") or {}
    if heap:
        lines.append(f"objects a full collection walks: {heap['walked_at_start']:,} at the start of the creates, "
                     f"{heap['walked_at_end']:,} at the end ({heap['frozen_at_start']:,} and {heap['frozen_at_end']:,} "
                     f"frozen out of it); one full collection forced after the creates took "
                     f"{heap['full_collection_ms']} ms")
    collections = trace["collections"]
    for generation in (0, 1, 2):
        pauses = sorted(g[1] * ms for g in collections if g[2] == generation)
        if pauses:
            lines.append(f"gc gen{generation}: {len(pauses)} collections, median {pauses[len(pauses) // 2]:.2f} ms, "
                         f"max {pauses[-1]:.1f} ms, total {sum(pauses):.0f} ms")
    lags = sorted(lag * ms for _, lag in trace["loop_lags"])
    if lags:
        lines.append(f"event loop lag ({len(lags)} probes): median {lags[len(lags) // 2]:.2f} ms, "
                     f"p99 {lags[int(len(lags) * 0.99)]:.1f} ms, max {lags[-1]:.1f} ms; "
                     f"over 20 ms: {sum(1 for lag in lags if lag > 20)}")
    threads = [s for s in trace["threads"] if s[2] is not None]
    if len(threads) > 1:
        cpu, waited = _thread_cpu(threads, threads[0][0], threads[-1][0])
        wall = threads[-1][0] - threads[0][0]
        lines.append(f"over the {wall:.0f} s traced: the loop thread waited {waited:.1f} s for a CPU; CPU s by thread: "
                     + ", ".join(f"{name} {seconds:.1f}" for name, seconds in
                                 sorted(cpu.items(), key=lambda item: -item[1])[:8]))
    return "\n".join(lines) + "\n"

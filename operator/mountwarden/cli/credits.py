"""Subcommands: credits model | forecast | watch (EFS burst credits)."""

import json
import re
import sys
import time
from contextlib import nullcontext
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import kubernetes
import typer
from pydantic import ValidationError
from rich.live import Live
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from mountwarden.adapters.aws import AwsClients, CreditWatchError, fetch_credit_series, make_clients
from mountwarden.adapters.kube import api_client
from mountwarden.api.base import GROUP, VERSION
from mountwarden.api.nodemountreport import PLURAL as REPORTS
from mountwarden.api.nodemountreport import UnreadableReport, read_node_report
from mountwarden.api.storageprofile import PLURAL as PROFILES
from mountwarden.api.storageprofile import StorageProfileSpec
from mountwarden.cli._app import app
from mountwarden.cli._output import console, err_console, fail, print_json
from mountwarden.core.credits import (
    DEFAULT_HISTORY,
    GIB,
    MIB,
    CreditBucket,
    CreditSeries,
    CreditState,
    CreditWatchProblem,
    EfsMetric,
    Forecast,
    ForecastSettings,
    SingleClientCeiling,
    ThroughputMode,
    condition_message,
    forecast_credits,
    format_bytes,
    format_duration,
    format_rate,
    metadata_load,
    samples_from_metric_data,
)
from mountwarden.core.credits.consumers import (
    ConsumerSummary,
    VolumeOwners,
    cost_basis,
    price_namespaces,
    reported_volumes,
    summarize_consumers,
)
from mountwarden.core.credits.pricing import throughput_bill
from mountwarden.core.node.report import NodeReport
from mountwarden.core.storageclass import PROFILE_LABEL

EXIT_CODES_HELP = (
    "Exit codes: 0 every file system Healthy; 1 Draining, Empty, Trap or Unknown (so scripts can alert); "
    "2 usage, credential, permission or lookup problems."
)

MODEL_HELP = (
    "The token bucket of a Bursting EFS file system of --size-gib GiB, and what each number means.\n\n"
    'Units: KiB = 1024 bytes, MiB = 1024^2, GiB = 1024^3, TiB = 1024^4 ("2.1 TiB" = 2.1 x 1024^4 bytes); '
    "rates are bytes per second.\n\n"
    "A 20 GiB file system earns 1 MiB/s (256 small writes or metadata requests/s once empty), holds at most "
    "2.1 TiB of credits, drains them in ~6.2 h at 100 MiB/s (99 MiB/s net, as the baseline keeps earning) and "
    "refills them in ~25 days at idle.\n\n"
    "With --metadata-ops and --window-seconds it also meters that many metadata requests at 4 KiB each and "
    "compares their rate with the baseline.\n\n"
    "Example: mountwarden credits model --size-gib 20 --metadata-ops 4240000 --window-seconds 36000"
)
FORECAST_HELP = (
    "Forecast one file system's burst credits: balance, slope, time to empty, state and throughput-mode "
    "advice.\n\n"
    "Online, one DescribeFileSystems call gives the throughput mode and size, and one batched GetMetricData "
    "call reads BurstCreditBalance (Minimum), PermittedThroughput (Average), MeteredIOBytes, MetadataIOBytes, "
    "DataReadIOBytes, DataWriteIOBytes (Sum) and PercentIOLimit (Average) from AWS/EFS at 300 s periods, and "
    "the request counts (SampleCount of DataReadIOBytes, DataWriteIOBytes, MetadataIOBytes) hourly, for the "
    "Elastic cost estimate. The IAM role needs elasticfilesystem:DescribeFileSystems and "
    "cloudwatch:GetMetricData.\n\n"
    "The default --window of 48h holds two whole days: the day-over-day net change (mean balance of the "
    "last 24 h against the 24 h before) then sees a nightly drain that the rest of the day does not refill, "
    "which the newest hour's slope cannot. time_to_empty_basis says what the time to empty was projected "
    "from: slope, day-over-day or same time yesterday.\n\n"
    "The advice sizes Provisioned throughput only by periods that were not throttled (a throttled peak is "
    "the baseline itself), names those periods in recommendation.basis, and prices both modes "
    "(recommendation.monthly_cost_usd; elastic_estimate: what the window's load would be billed in Elastic "
    "mode, 32 KiB minimum per read or write, 4 KiB per metadata request; us-east-1 list prices).\n\n"
    "With --consumers it also reads the cluster's NodeMountReports (and PVs, pods, StorageClasses, "
    "StorageProfiles) to name who drains the file system: each pod volume's metered bytes estimated from "
    "its NFS per-operation totals.\n\n"
    'Offline, --from-file reads a saved GetMetricData answer: {"MetricDataResults": [{"Id", "Label", '
    '"Timestamps", "Values"}]}. Each result is recognised by its Label, the metric name optionally after '
    'the file system id ("fs-0123 BurstCreditBalance"), or else by its Id: balance, permitted, metered, '
    "metadata, read, write, iolimit, readops, writeops, metadataops (the SampleCount request counts) or "
    "storage (StorageBytes, Standard class), optionally followed by _anything. Give the size and mode with "
    "--size-gib and --throughput-mode.\n\n"
    "States: Healthy (not falling day over day, nor by a new drain), Draining (time_to_empty_seconds says "
    "when it is empty), Empty "
    "(no credits, the load still under the permitted rate), Trap (no credits and metered at the permitted "
    "rate: throttled), Unknown (no data).\n\n"
    "Example: mountwarden credits forecast --file-system-id fs-0123456789abcdef0 --region eu-west-1 --json"
)
WATCH_HELP = (
    "Repeat the forecast every --interval for several file systems, in a live table.\n\n"
    "Each round is one batched fetch for all of them (DescribeFileSystems, then GetMetricData with up to 500 "
    "queries per call), whatever their number.\n\n"
    "Example: mountwarden credits watch --file-system-id fs-aaa --file-system-id fs-bbb --interval 1m"
)

credits_app = typer.Typer(
    name="credits",
    help=(
        "EFS burst credits: the bucket model for a size, and a forecast from CloudWatch.\n\n"
        "In Bursting mode a file system earns credits at its baseline (50 KiB/s per GiB, at least 1 MiB/s) "
        "and may spend them at its burst ceiling (100 KiB/s per GiB, at least 100 MiB/s). Every NFS request "
        "is metered as at least 4 KiB, so once the balance is zero a small file system serves only about "
        "256 small writes or metadata requests per second per MiB/s of baseline. Alert on the slope of "
        "BurstCreditBalance, not its level."
    ),
    no_args_is_help=True,
)
app.add_typer(credits_app, name="credits")

#: ``--window``'s default, in the words of the option: the forecast's default history.
DEFAULT_WINDOW = f"{DEFAULT_HISTORY.total_seconds() / 3600:g}h"
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    """``24h``, ``90m``, ``1h30m``, ``2d``, ``300s`` or plain seconds (``300``)."""
    text = text.strip().lower()
    try:
        seconds = float(text)
    except ValueError:
        parts = _DURATION.findall(text)
        if not parts or "".join(number + unit for number, unit in parts) != text:
            raise typer.BadParameter(f"{text!r} is not a duration like 24h, 90m, 1h30m or 300s") from None
        seconds = sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)
    if seconds <= 0:
        raise typer.BadParameter(f"{text!r}: a duration must be above zero")
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise typer.BadParameter(f"{text!r} is longer than the calendar") from None


SizeOption = Annotated[
    float | None,
    typer.Option(
        "--size-gib",
        min=0,
        help="Bytes in the Standard storage class, in GiB (1 GiB = 1024^3 bytes). With --from-file, or to "
        "override what DescribeFileSystems reports.",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
RegionOption = Annotated[
    str | None, typer.Option("--region", help="AWS region of the file system (default: AWS_REGION / config).")
]
EndpointOption = Annotated[
    str | None,
    typer.Option(
        "--endpoint-url", help="Send EFS and CloudWatch calls here (a VPC endpoint, or moto in tests)."
    ),
]
WindowOption = Annotated[
    str,
    typer.Option(
        "--window",
        help="How much history to read and judge (the StorageProfile's creditWatch.windowHours). 48h or more "
        "compares whole days (the day-over-day change); the advice and the Elastic estimate use all of it. "
        "Durations like 48h, 90m, 1h30m, 2d.",
    ),
]
TrendOption = Annotated[
    str,
    typer.Option(
        "--trend-window",
        help="The newest part of the window the balance's slope is fitted over (Theil–Sen), so a bucket "
        "that started draining an hour ago alerts now; also how long a drain at this time yesterday is "
        "compared over.",
    ),
]


@credits_app.command("model", help=MODEL_HELP)
def model(
    size_gib: Annotated[
        float, typer.Option("--size-gib", min=0, help="Bytes in the Standard class, in GiB (1024^3 bytes).")
    ],
    metadata_ops: Annotated[
        float | None,
        typer.Option(
            "--metadata-ops",
            min=0,
            help="A count of metadata requests (GETATTR, LOOKUP, ACCESS, ...), e.g. from mountstats, "
            "to meter at 4 KiB each. Needs --window-seconds.",
        ),
    ] = None,
    window_seconds: Annotated[
        float | None,
        typer.Option("--window-seconds", min=0, help="The seconds over which --metadata-ops were counted."),
    ] = None,
    json_output: JsonOption = False,
) -> None:
    """The token bucket of a Bursting EFS file system of --size-gib GiB."""
    if (metadata_ops is None) != (window_seconds is None):
        fail("--metadata-ops and --window-seconds go together: a count needs the seconds it was counted over")
    if window_seconds == 0:
        fail("--window-seconds must be above zero")
    bucket = CreditBucket(size_gib)
    document = bucket.to_json()
    load = None
    if metadata_ops is not None and window_seconds is not None:
        load = metadata_load(metadata_ops, window_seconds, bucket.baseline_bytes_per_second)
        document |= load.to_json()
    if json_output:
        print_json(document)
        return
    table = Table(show_header=True, header_style="bold", box=None, padding=(0, 2))
    table.add_column("quantity")
    table.add_column("value", justify="right")
    table.add_column("what it means")
    baseline = bucket.baseline_bytes_per_second
    table.add_row(
        "baseline",
        format_rate(baseline),
        "credits earned per second, and the ceiling once the balance is zero (50 KiB/s per GiB, at least 1 MiB/s)",
    )
    table.add_row(
        "burst ceiling",
        format_rate(bucket.burst_bytes_per_second),
        "the permitted rate while the balance is above zero (100 KiB/s per GiB, at least 100 MiB/s)",
    )
    table.add_row(
        "largest balance",
        format_bytes(bucket.max_balance_bytes),
        "2.1 TiB below 1 TiB of data, 2.1 TiB per TiB above; new file systems start full",
    )
    table.add_row(
        "drain a full bucket",
        format_duration(bucket.seconds_to_drain_full_at_burst),
        f"at the burst ceiling, net {format_rate(bucket.burst_bytes_per_second - baseline)} "
        "as the baseline keeps earning",
    )
    table.add_row(
        "refill from empty",
        format_duration(bucket.seconds_to_refill_from_empty),
        "with no load at all: the balance grows at baseline minus metered throughput",
    )
    budget = bucket.ops_budget_when_empty
    table.add_row(
        "small ops once empty",
        f"{budget.writes_or_metadata:.0f}/s writes or metadata, {budget.reads:.0f}/s reads",
        "each request is metered as at least 4 KiB; reads count one third",
    )
    ceiling = SingleClientCeiling()
    table.add_row(
        "one synchronous client",
        f"≤ {ceiling.reads:.0f} reads/s, ≤ {ceiling.writes:.0f} writes/s",
        "one request in flight at a time waits ~1 ms per read, ~2.7 ms per write at best, credits or not",
    )
    if load is not None:
        table.add_row(
            "metered metadata",
            f"{format_bytes(load.metered_metadata_bytes)} = {format_rate(load.metered_metadata_bytes_per_second)}",
            f"{metadata_ops:.0f} requests x 4 KiB over {format_duration(window_seconds or 0)}: "
            f"{load.baseline_share:.0%} of the baseline",
        )
    console.print(
        Panel(table, title=f"EFS Bursting credits for {size_gib:g} GiB of Standard data", expand=False)
    )


@credits_app.command("forecast", help=FORECAST_HELP, epilog=EXIT_CODES_HELP)
def forecast(
    file_system_id: Annotated[
        str | None,
        typer.Option("--file-system-id", help="fs-...; required unless --from-file names exactly one."),
    ] = None,
    region: RegionOption = None,
    endpoint_url: EndpointOption = None,
    window: WindowOption = DEFAULT_WINDOW,
    trend_window: TrendOption = "1h",
    from_file: Annotated[
        Path | None,
        typer.Option(
            "--from-file",
            exists=True,
            dir_okay=False,
            help="A saved GetMetricData answer (JSON) to forecast offline from: its shape is above.",
        ),
    ] = None,
    size_gib: SizeOption = None,
    throughput_mode: Annotated[
        ThroughputMode | None,
        typer.Option("--throughput-mode", help="With --from-file (default bursting), or to override."),
    ] = None,
    provisioned_mibps: Annotated[
        float | None,
        typer.Option("--provisioned-mibps", min=0, help="Provisioned throughput in MiB/s, for --from-file."),
    ] = None,
    consumers: Annotated[
        bool,
        typer.Option(
            "--consumers",
            help="Also name who drains it, from the cluster's NodeMountReports (needs list on nodemountreports, "
            "storageprofiles, persistentvolumes, pods and storageclasses).",
        ),
    ] = False,
    kubeconfig: Annotated[
        str | None,
        typer.Option("--kubeconfig", envvar="KUBECONFIG", metavar="FILE", help="With --consumers: the cluster."),
    ] = None,
    context: Annotated[str | None, typer.Option("--context", help="With --consumers: the kubeconfig context.")] = None,
    json_output: JsonOption = False,
) -> None:
    """Forecast one file system's burst credits."""
    history, trend = parse_duration(window), parse_duration(trend_window)
    settings = ForecastSettings(trend_window=trend)
    if from_file is not None:
        series = _series_from_file(from_file, file_system_id)
        now = None
    else:
        if not file_system_id:
            fail("--file-system-id is required (or --from-file for an offline forecast)")
        now = datetime.now(UTC)
        found = _fetch([file_system_id], region, endpoint_url, history, now)[file_system_id]
        if isinstance(found, CreditWatchProblem):
            if json_output:
                print_json({"file_system_id": file_system_id, "problem": found.to_json()})
            fail(f"{found.reason.value}: {found.message}")
        series = found
    series = _with_overrides(
        series, size_gib, throughput_mode, provisioned_mibps, offline=from_file is not None
    )
    result = forecast_credits(series, window=history, now=now, settings=settings)
    drainers = _cluster_consumers(series.file_system_id, kubeconfig, context) if consumers else None
    mode, provisioned = throughput_bill(series)
    if json_output:
        print_json({**result.to_json(), "consumers": drainers.to_json(mode, provisioned) if drainers else None})
    else:
        console.print(_forecast_panel(result))
        if drainers is not None:
            console.print(_consumers_table(drainers))
            console.print(_namespaces_table(drainers, mode, provisioned))
    raise typer.Exit(_exit_code([result]))


@credits_app.command(
    "watch", help=WATCH_HELP, epilog=EXIT_CODES_HELP + " The code is that of the last round."
)
def watch(
    file_system_ids: Annotated[
        list[str], typer.Option("--file-system-id", help="fs-...; repeat for several file systems.")
    ],
    region: RegionOption = None,
    endpoint_url: EndpointOption = None,
    window: WindowOption = DEFAULT_WINDOW,
    trend_window: TrendOption = "1h",
    interval: Annotated[
        str, typer.Option("--interval", help="Time between rounds, e.g. 5m (EFS publishes per minute).")
    ] = "5m",
    count: Annotated[
        int | None,
        typer.Option("--count", min=1, help="Stop after this many rounds (default: until Ctrl-C)."),
    ] = None,
    json_output: Annotated[
        bool,
        typer.Option("--json", help="Print one JSON document per round, one per line, instead of a table."),
    ] = False,
) -> None:
    """Repeat the forecast for several file systems in a live table."""
    history, trend, pause = parse_duration(window), parse_duration(trend_window), parse_duration(interval)
    settings = ForecastSettings(trend_window=trend)
    clients = _clients(region, endpoint_url)
    code = 0
    rounds = 0
    live = nullcontext() if json_output else Live(console=console, auto_refresh=False)
    with live:
        try:
            while count is None or rounds < count:
                if rounds:
                    time.sleep(pause.total_seconds())
                now = datetime.now(UTC)
                found = fetch_credit_series(clients, file_system_ids, history, now)
                results = {
                    fs_id: value
                    if isinstance(value, CreditWatchProblem)
                    else forecast_credits(value, window=history, now=now, settings=settings)
                    for fs_id, value in found.items()
                }
                code = _exit_code(list(results.values()))
                rounds += 1
                if json_output:
                    sys.stdout.write(json.dumps(_round_json(now, results), default=str) + "\n")
                    sys.stdout.flush()
                else:
                    live.update(_watch_table(now, results, rounds), refresh=True)
        except KeyboardInterrupt:
            err_console.print("stopped")
    raise typer.Exit(code)


def _clients(region: str | None, endpoint_url: str | None) -> AwsClients:
    try:
        return make_clients(region=region, endpoint_url=endpoint_url)
    except CreditWatchError as error:
        fail(f"{error.problem.reason.value}: {error.problem.message}")


def _fetch(
    ids: list[str], region: str | None, endpoint_url: str | None, window: timedelta, now: datetime
) -> dict[str, CreditSeries | CreditWatchProblem]:
    return fetch_credit_series(_clients(region, endpoint_url), ids, window, now)


def _cluster_consumers(file_system_id: str, kubeconfig: str | None, context: str | None) -> ConsumerSummary:
    """Who drains ``file_system_id``, read from the cluster with the caller's own credentials.

    The operator answers the same from its watches (handlers/credits.py); a person at
    a terminal has none, so this lists the five kinds once.
    """
    try:
        client = api_client(kubeconfig, context)
        core, storage = kubernetes.client.CoreV1Api(client), kubernetes.client.StorageV1Api(client)
        custom = kubernetes.client.CustomObjectsApi(client)
        pods = {
            pod["metadata"]["uid"]: f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
            for pod in _listed(core.list_pod_for_all_namespaces(_preload_content=False))
        }
        classes_of_volumes = {
            pv["metadata"]["name"]: (pv.get("spec") or {}).get("storageClassName")
            for pv in _listed(core.list_persistent_volume(_preload_content=False))
        }
        profiles_of_classes = {
            sc["metadata"]["name"]: sc["metadata"]["labels"][PROFILE_LABEL]
            for sc in _listed(storage.list_storage_class(label_selector=PROFILE_LABEL, _preload_content=False))
        }
        file_systems = {
            profile["metadata"]["name"]: watched[0]
            for profile in _listed(custom.list_cluster_custom_object(GROUP, VERSION, PROFILES, _preload_content=False))
            if (watched := _watched(profile.get("spec") or {}))
        }
        volumes = [
            volume
            for report in _listed(custom.list_cluster_custom_object(GROUP, VERSION, REPORTS, _preload_content=False))
            if (node_report := _readable(report)) is not None
            for volume in reported_volumes(node_report)
        ]
    except (kubernetes.config.ConfigException, kubernetes.client.ApiException, OSError) as error:
        fail(f"--consumers could not read the cluster ({escape(str(error).strip())}): pass --kubeconfig (or set "
             "KUBECONFIG), or leave --consumers out")
    owners = VolumeOwners.from_mappings(
        pods, {pv: sc for pv, sc in classes_of_volumes.items() if sc}, profiles_of_classes, file_systems
    )
    return summarize_consumers(volumes, owners, file_system_id)


def _readable(report: dict) -> NodeReport | None:
    try:
        return read_node_report(report["metadata"]["name"], report.get("spec") or {})
    except UnreadableReport:  # written by hand without a field the schema requires: as if absent
        return None


def _listed(response) -> list[dict]:
    return json.loads(response.data)["items"]


def _series_from_file(path: Path, file_system_id: str | None) -> CreditSeries:
    try:
        grouped = samples_from_metric_data(json.loads(path.read_text()))
    except (ValueError, TypeError, AttributeError) as error:
        fail(f'{path} is not a GetMetricData JSON answer ({{"MetricDataResults": [...]}}): {error}')
    labelled = sorted(key for key in grouped if key is not None)
    if file_system_id is None:
        if len(labelled) > 1:
            fail(f"{path} holds several file systems ({', '.join(labelled)}): pick one with --file-system-id")
        file_system_id = labelled[0] if labelled else "unknown"
    samples = {**grouped.get(None, {}), **grouped.get(file_system_id, {})}
    if not samples:
        fail(
            f"{path} has no AWS/EFS results for {file_system_id} (see --help for the Labels and Ids expected)"
        )
    return CreditSeries(file_system_id=file_system_id, samples=samples)


def _with_overrides(
    series: CreditSeries,
    size_gib: float | None,
    mode: ThroughputMode | None,
    provisioned_mibps: float | None,
    *,
    offline: bool,
) -> CreditSeries:
    size_bytes = series.size_bytes
    if size_gib is not None:
        size_bytes = size_gib * GIB
    elif size_bytes is None and series.of(EfsMetric.STORAGE_BYTES):
        size_bytes = series.of(EfsMetric.STORAGE_BYTES)[-1].value or None
    return replace(
        series,
        size_bytes=size_bytes,
        throughput_mode=mode or series.throughput_mode or (ThroughputMode.BURSTING if offline else None),
        provisioned_bytes_per_second=(
            provisioned_mibps * MIB if provisioned_mibps is not None else series.provisioned_bytes_per_second
        ),
    )


def _exit_code(results: list[Forecast | CreditWatchProblem]) -> int:
    if any(isinstance(result, CreditWatchProblem) for result in results):
        return 2
    return 0 if all(result.state is CreditState.HEALTHY for result in results) else 1


_STATE_STYLE = {
    CreditState.HEALTHY: "green",
    CreditState.DRAINING: "yellow",
    CreditState.EMPTY: "yellow",
    CreditState.TRAP: "bold red",
    CreditState.UNKNOWN: "dim",
}


def _forecast_panel(result: Forecast) -> Panel:
    table = Table(show_header=False, box=None, padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    size = (
        "unknown (assuming the smallest bucket)" if result.size_gib is None else f"{result.size_gib:.1f} GiB"
    )
    mode = result.throughput_mode.value if result.throughput_mode else "unknown"
    table.add_row("file system", f"{result.file_system_id} ({mode}, {size} Standard)")
    table.add_row("state", f"[{_STATE_STYLE[result.state]}]{result.state.value}[/]")
    table.add_row("balance", _or_unknown(result.balance_bytes, format_bytes))
    slope = result.slope_bytes_per_second
    table.add_row(
        "slope", "unknown" if slope is None else f"{'+' if slope >= 0 else '-'}{format_rate(abs(slope))}"
    )
    net = result.net_change_per_day_bytes
    table.add_row(
        "day over day",
        f"{'+' if net >= 0 else '-'}{format_bytes(abs(net))} a day (mean of the last 24 h against the 24 h before)"
        if net is not None
        else "unknown: needs two whole days of history (--window 48h or more)",
    )
    tte = result.time_to_empty_seconds
    basis = f" (from the {result.time_to_empty_basis.value})" if result.time_to_empty_basis else ""
    table.add_row("time to empty", "not draining" if tte is None else format_duration(tte) + basis)
    headroom = result.headroom_bytes_per_second
    table.add_row(
        "metered / permitted",
        f"{_or_unknown(result.metered_bytes_per_second, format_rate)} of "
        f"{_or_unknown(result.permitted_bytes_per_second, format_rate)}"
        + ("" if headroom is None else f" ({format_rate(max(headroom, 0))} left before throttling)"),
    )
    if result.ops_budget_per_second:
        budget = result.ops_budget_per_second
        table.add_row(
            "small ops budget now",
            f"{budget.writes_or_metadata:.0f}/s writes or metadata, {budget.reads:.0f}/s reads",
        )
    table.add_row(
        "metadata share", _or_unknown(result.metadata_share, lambda share: f"{share:.0%} of metered bytes")
    )
    if result.elastic is not None:
        cost = result.elastic.monthly_cost()
        table.add_row(
            "Elastic would bill",
            ("unknown" if cost is None else f"${cost:,.2f} a month")
            + f" for this load: {result.elastic.describe()}",
        )
    advice = result.recommendation
    table.add_row("advice", f"{advice.mode.value}: {advice.reason}")
    table.add_row("condition", condition_message(result))
    return Panel(
        table, title=f"EFS burst credits of {result.file_system_id}", title_align="left", expand=False
    )


def _consumers_table(summary: ConsumerSummary) -> Table:
    table = Table(
        title=f"Who drains {summary.file_system_id}: {summary.consumers} consumer(s), about "
        f"{format_rate(summary.metered_bytes_per_second)} metered in all (node reports)",
        title_justify="left",
        caption="; ".join(summary.notes),
        caption_justify="left",
    )
    for column in ("pods", "node", "profiles", "metered", "Elastic would bill", "mounted for"):
        table.add_column(column)
    for consumer in summary.top:
        table.add_row(
            ", ".join(consumer.pods),
            consumer.node,
            ", ".join(consumer.profiles),
            _or_unknown(consumer.metered_bytes_per_second, format_rate),
            _or_unknown(consumer.elastic_bytes_per_second, format_rate),
            _or_unknown(consumer.age_seconds, format_duration),
        )
    return table


def _namespaces_table(summary: ConsumerSummary, mode: ThroughputMode | None, provisioned: float | None) -> Table:
    table = Table(title=f"What each namespace costs on {summary.file_system_id}", caption=cost_basis(mode),
                  title_justify="left", caption_justify="left")
    for column in ("namespace", "workload", "metered", "share", "a month", "Elastic would bill"):
        table.add_column(column)
    for row in price_namespaces(summary, mode, provisioned):
        table.add_row(row["namespace"], "", format_rate(row["meteredBytesPerSecond"]),
                      "" if row["share"] is None else f"{row['share']:.0%}", _dollars(row["monthlyCostUsd"]),
                      _dollars(row["elasticMonthlyCostUsd"]))
        for workload in row["workloads"]:
            table.add_row("", workload["workload"].partition("/")[2], format_rate(workload["meteredBytesPerSecond"]),
                          "", _dollars(workload["monthlyCostUsd"]), "")
    return table


def _dollars(value: float | None) -> str:
    return "—" if value is None else f"${value:,.2f}"


def _or_unknown(value: Any, render: Any) -> str:
    return "unknown" if value is None else render(value)


def _watch_table(now: datetime, results: dict[str, Forecast | CreditWatchProblem], rounds: int) -> Table:
    table = Table(title=f"EFS burst credits at {now:%H:%M:%S} UTC (round {rounds})", title_justify="left")
    for column in (
        "file system",
        "state",
        "balance",
        "slope",
        "empty in",
        "metered / permitted",
        "condition",
    ):
        table.add_column(column)
    for fs_id, result in results.items():
        if isinstance(result, CreditWatchProblem):
            table.add_row(fs_id, f"[red]{result.reason.value}[/]", "", "", "", "", result.message)
            continue
        slope = result.slope_bytes_per_second
        table.add_row(
            fs_id,
            f"[{_STATE_STYLE[result.state]}]{result.state.value}[/]",
            _or_unknown(result.balance_bytes, format_bytes),
            "" if slope is None else f"{'+' if slope >= 0 else '-'}{format_rate(abs(slope))}",
            "—" if result.time_to_empty_seconds is None else format_duration(result.time_to_empty_seconds),
            f"{_or_unknown(result.metered_bytes_per_second, format_rate)} / "
            f"{_or_unknown(result.permitted_bytes_per_second, format_rate)}",
            condition_message(result),
        )
    return table


def _round_json(now: datetime, results: dict[str, Forecast | CreditWatchProblem]) -> dict[str, Any]:
    return {
        "at": now.isoformat(),
        "file_systems": [
            {"file_system_id": fs_id, "problem": result.to_json()}
            if isinstance(result, CreditWatchProblem)
            else result.to_json()
            for fs_id, result in results.items()
        ],
    }


def _watched(spec: dict) -> tuple[str, str] | None:
    """The file system a listed profile watches; none for a spec that is not valid (written around the webhook)."""
    try:
        return StorageProfileSpec.model_validate(spec).watched_file_system()
    except ValidationError:
        return None

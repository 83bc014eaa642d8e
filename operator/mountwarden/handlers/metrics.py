"""The operator's Prometheus metrics (served on --metrics-port)."""

import contextlib

from prometheus_client import Gauge, start_http_server

_CREDIT_LABELS = ("profile", "file_system_id")
CREDIT_BALANCE = Gauge("mountwarden_credit_balance_bytes", "EFS BurstCreditBalance", _CREDIT_LABELS)
CREDIT_SLOPE = Gauge("mountwarden_credit_slope_bytes_per_second",
                     "Robust slope of the burst-credit balance (negative: draining)", _CREDIT_LABELS)
CREDIT_TIME_TO_EMPTY = Gauge("mountwarden_credit_time_to_empty_seconds",
                             "Seconds until the balance is empty at the current slope (absent: not draining)",
                             _CREDIT_LABELS)
CREDIT_PERMITTED = Gauge("mountwarden_credit_permitted_bytes_per_second", "EFS PermittedThroughput", _CREDIT_LABELS)
CREDIT_METERED = Gauge("mountwarden_credit_metered_bytes_per_second", "EFS metered throughput", _CREDIT_LABELS)

_CREDIT_GAUGES = {
    "balanceBytes": CREDIT_BALANCE,
    "slopeBytesPerSecond": CREDIT_SLOPE,
    "timeToEmptySeconds": CREDIT_TIME_TO_EMPTY,
    "permittedBytesPerSecond": CREDIT_PERMITTED,
    "meteredBytesPerSecond": CREDIT_METERED,
}


def record_credits(profile: str, credits: dict) -> None:
    """Set the credit gauges from a status.credits object; a missing value removes its series."""
    labels = (profile, credits["fileSystemId"])
    for key, gauge in _CREDIT_GAUGES.items():
        value = credits.get(key)
        if value is None:
            with contextlib.suppress(KeyError):
                gauge.remove(*labels)
        else:
            gauge.labels(*labels).set(value)


def serve(port: int, address: str = "0.0.0.0") -> None:
    if port:
        start_http_server(port, addr=address)

PROFILE_VOLUMES = Gauge("mountwarden_profile_volumes", "Pod volumes of a profile by verdict (node reports)",
                        ("profile", "state"))
PROFILE_PODS = Gauge("mountwarden_profile_pods", "Pods using a profile's volumes by their worst verdict",
                     ("profile", "state"))
SQLITE_DATABASES = Gauge("mountwarden_sqlite_databases", "SQLite databases in use on a profile's volumes",
                         ("profile",))


def record_compliance(profile: str, counts: dict[str, dict[str, int]], sqlite_databases: int) -> None:
    for state, number in counts["volumes"].items():
        PROFILE_VOLUMES.labels(profile, state).set(number)
    for state, number in counts["pods"].items():
        PROFILE_PODS.labels(profile, state).set(number)
    SQLITE_DATABASES.labels(profile).set(sqlite_databases)

"""CloudWatch requests per credit-watch interval for 100 file systems, against a real moto server.

Counts what the operator's one batched fetch sends (botocore's own events):
GetMetricData calls and DescribeFileSystems pages. moto reports every file
system's size as 0, so each also needs the StorageBytes fallback query; the
figure with sizes known (as real EFS reports them) is computed by the same
batching code on the same plan. Writes bench/results/cloudwatch.json.

    .venv/bin/python bench/cloudwatch.py [--file-systems 100]
"""

import argparse
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

from moto.server import ThreadedMotoServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support import free_port  # noqa: E402

from mountwarden.adapters.aws import (
    FileSystemFacts,
    batch_queries,
    fetch_credit_series,
    make_clients,
    plan_metric_queries,
)
from mountwarden.core.credits import DEFAULT_HISTORY, GIB, ThroughputMode

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
#: What the operator fetches by default (creditWatch.windowHours): two whole days.
WINDOW = DEFAULT_HISTORY


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--file-systems", type=int, default=100)
    args = parser.parse_args()
    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1",
                       "AWS_EC2_METADATA_DISABLED": "true"})
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        clients = make_clients(region="us-east-1", endpoint_url=f"http://127.0.0.1:{port}")
        ids = [clients.efs.create_file_system(CreationToken=f"bench-{n}")["FileSystemId"]
               for n in range(args.file_systems)]
        created_calls = clients.calls.describe_file_systems
        found = fetch_credit_series(clients, ids, WINDOW, datetime.now(UTC))
    finally:
        server.stop()
    sized = [FileSystemFacts(fs_id, ThroughputMode.BURSTING, 20 * GIB, None) for fs_id in ids]
    with_sizes = len(batch_queries(plan_metric_queries(sized), WINDOW))
    summary = {
        "file_systems": args.file_systems,
        "cloudwatch_requests_per_interval": clients.calls.get_metric_data,
        "cloudwatch_requests_per_interval_with_sizes": with_sizes,
        "describe_file_systems_per_interval": clients.calls.describe_file_systems - created_calls,
        "series_fetched": sum(1 for value in found.values() if not hasattr(value, "reason")),
        "window_hours": WINDOW.total_seconds() / 3600,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "cloudwatch.json").write_text(json.dumps({"summary": summary}, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()

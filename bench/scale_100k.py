"""The operator's memory at 100,000 pods: bench/scale.py's run at 25,000 PVs / 100,000 pods / 500 nodes.

    .venv/bin/python bench/scale_100k.py [--pvs 25000] [--pods 100000] [--nodes 500] [--creates 500]

Bench only, not in `make test`: loading the cluster alone took 14 minutes on two cores (20 in all). The same run
as bench/scale.py (the operator started as users run it, one profile change of --touched PVs, PVC creates
through the webhook), five times the cluster. Writes bench/results/scale_100k.json:

- operator_rss_mib_100k: the operator's peak resident memory over the run (scale.py's operator_rss_mib);
- operator_ready_s_100k: from its start until a profile created then is Ready;
- rss_growth_mib_per_1000_pods: the slope between this run and bench/results/scale.json's (20,000 pods, with
  PVs and nodes in the same proportion), with that run's date: what each 1,000 more pods cost.

Fewer creates than scale.py's 2,000 per side: the webhook's figures are scale.py's, this run is for memory.
Figures, not assertions.
"""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import scale  # noqa: E402

RESULTS = ROOT / "bench" / "results"


def growth_per_1000_pods(large: dict, small: dict) -> float | None:
    """MiB of peak RSS per 1,000 more pods between two runs' summaries, None when they cannot be compared."""
    pods = large["pods"] - small["pods"]
    if pods <= 0 or not small.get("operator_rss_mib"):
        return None
    return round((large["operator_rss_mib"] - small["operator_rss_mib"]) / pods * 1000, 2)


def main() -> None:
    parser = scale.parser()
    parser.description = __doc__
    parser.set_defaults(pvs=25000, pods=100000, nodes=500, creates=500)
    args = parser.parse_args()
    result = scale.measure(args)
    summary = result["summary"]
    earlier_path = RESULTS / "scale.json"
    earlier = json.loads(earlier_path.read_text()) if earlier_path.exists() else None
    result["summary"] = {
        "operator_rss_mib_100k": summary["operator_rss_mib"],
        "operator_ready_s_100k": summary["operator_ready_s"],
        "rss_growth_mib_per_1000_pods": growth_per_1000_pods(summary, earlier["summary"]) if earlier else None,
        "compared_with": {"pods": earlier["summary"]["pods"], "operator_rss_mib": earlier["summary"]["operator_rss_mib"],
                          "date": earlier.get("date")} if earlier else None,
        **{key: value for key, value in summary.items() if key not in ("operator_rss_mib", "operator_ready_s")},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "scale_100k.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=2))


if __name__ == "__main__":
    main()

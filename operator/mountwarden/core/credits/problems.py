"""Why a credit forecast could not be made, and what to fix: values, never exceptions.

The AWS adapter turns credential, permission, throttling and lookup failures into
these, so that one bad file system (or a missing IAM action) shows up as a
condition on its profile instead of crashing the timer or retrying forever.
"""

from dataclasses import dataclass
from enum import StrEnum

#: The IAM actions the credit watch needs, in the words of an IAM policy.
REQUIRED_IAM_ACTIONS = ("elasticfilesystem:DescribeFileSystems", "cloudwatch:GetMetricData")


class ProblemReason(StrEnum):
    NO_CREDENTIALS = "NoCredentials"
    ACCESS_DENIED = "AccessDenied"
    FILE_SYSTEM_NOT_FOUND = "FileSystemNotFound"
    THROTTLED = "Throttled"
    UNAVAILABLE = "Unavailable"


@dataclass(frozen=True)
class CreditWatchProblem:
    file_system_id: str | None
    reason: ProblemReason
    message: str

    def to_json(self) -> dict[str, str | None]:
        return {"file_system_id": self.file_system_id, "reason": self.reason.value, "message": self.message}


class CreditWatchError(Exception):
    """No client could be made at all (no region); carries the problem to show."""

    def __init__(self, problem: CreditWatchProblem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def no_credentials(file_system_id: str | None = None, detail: str = "none found") -> CreditWatchProblem:
    return CreditWatchProblem(
        file_system_id,
        ProblemReason.NO_CREDENTIALS,
        f"no usable AWS credentials ({detail}): in the cluster, give the operator's service account an IAM role (IRSA "
        "annotation eks.amazonaws.com/role-arn, or EKS Pod Identity); on a workstation, set AWS_PROFILE or "
        f"AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY. The role needs {' and '.join(REQUIRED_IAM_ACTIONS)}",
    )


def access_denied(file_system_id: str | None, action: str, detail: str) -> CreditWatchProblem:
    return CreditWatchProblem(
        file_system_id,
        ProblemReason.ACCESS_DENIED,
        f"{action} was denied ({detail}): allow {' and '.join(REQUIRED_IAM_ACTIONS)} to the operator's IAM "
        "role (IRSA), on this file system and in this region",
    )


def file_system_not_found(file_system_id: str, region: str | None) -> CreditWatchProblem:
    return CreditWatchProblem(
        file_system_id,
        ProblemReason.FILE_SYSTEM_NOT_FOUND,
        f"file system {file_system_id} does not exist in region {region or '(default)'}: check the id in the "
        "profile's backend parameters (fileSystemId) and the region the operator is given",
    )


def throttled(file_system_id: str | None, action: str, attempts: int) -> CreditWatchProblem:
    return CreditWatchProblem(
        file_system_id,
        ProblemReason.THROTTLED,
        f"{action} was throttled after {attempts} attempts: the next interval tries again; lengthen the "
        "credit-watch interval or raise the CloudWatch GetMetricData quota if this persists",
    )


def unavailable(file_system_id: str | None, detail: str) -> CreditWatchProblem:
    return CreditWatchProblem(
        file_system_id,
        ProblemReason.UNAVAILABLE,
        f"AWS could not be reached or answered with an error ({detail}): check the region, the endpoint URL "
        "and the network path to the EFS and CloudWatch endpoints",
    )


def no_region() -> CreditWatchProblem:
    return CreditWatchProblem(
        None,
        ProblemReason.UNAVAILABLE,
        "no AWS region: pass --region (or the operator's region setting), or set AWS_REGION",
    )

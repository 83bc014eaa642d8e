"""Label selectors checked as the API server checks them, in the models the CRDs come from."""

import pytest
from pydantic import ValidationError

from mountwarden.api.base import LabelSelector
from mountwarden.api.storageprofile import NAME_RULE, StorageProfileSpec
from mountwarden.core.selectors import label_key_problem, label_value_problem, requirement_problems


@pytest.mark.parametrize("key", ["app", "example.com/app", "a" * 63, "app.kubernetes.io/name", "A_b-c.d",
                                 "a" * 253 + "/b"])
def test_valid_label_keys(key):
    assert label_key_problem(key) is None


@pytest.mark.parametrize(("key", "said"), [
    ("", "has no name"), ("/app", "empty prefix"), ("Example.com/app", "not a DNS subdomain"),
    ("a" * 254 + "/b", "not a DNS subdomain"), ("a" * 64, "at most 63"), ("-app", "beginning and ending"),
    ("not a key", "beginning and ending"), ("a/b/c", "not a DNS subdomain"), ("app/", "has no name"),
])
def test_invalid_label_keys(key, said):
    assert said in label_key_problem(key)


@pytest.mark.parametrize("value", ["", "db", "a" * 63, "v1.2_3-x"])
def test_valid_label_values(value):
    assert label_value_problem(value) is None


@pytest.mark.parametrize(("value", "said"), [("a" * 64, "at most 63"), ("-db", "beginning and ending"),
                                             ("d b", "alphanumerics")])
def test_invalid_label_values(value, said):
    assert said in label_value_problem(value)


def test_operators_and_their_values():
    assert requirement_problems("app", "In", ["db"]) == []
    assert requirement_problems("app", "Exists", []) == []
    assert requirement_problems("app", "In", []) == [
        "values: operator In needs at least one value: list the values, or use Exists/DoesNotExist"]
    assert requirement_problems("app", "NotIn", []) != []
    assert requirement_problems("app", "DoesNotExist", ["db"]) == [
        "values: operator DoesNotExist takes no values: remove them, or use In/NotIn"]
    assert requirement_problems("app", "In", ["ok", "-bad"])[0].startswith("values[1]: ")


def test_a_profile_with_a_bad_selector_is_refused_naming_the_field():
    spec = {"backend": {"provisioner": "nfs.csi.k8s.io"},
            "consumers": {"pvcSelector": {"matchExpressions": [{"key": "app", "operator": "In"}]}}}
    with pytest.raises(ValidationError) as refused:
        StorageProfileSpec.model_validate(spec)
    (error,) = refused.value.errors()
    assert error["loc"] == ("consumers", "pvcSelector", "matchExpressions", 0)
    assert "operator In needs at least one value" in error["msg"]


def test_match_labels_keys_and_values_are_checked():
    with pytest.raises(ValidationError, match="label key 'bad key'"):
        LabelSelector.model_validate({"matchLabels": {"bad key": "db"}})
    with pytest.raises(ValidationError, match="String should match pattern"):
        LabelSelector.model_validate({"matchLabels": {"app": "-db"}})
    assert LabelSelector.model_validate({"matchLabels": {"example.com/app": "db"}}).match_labels


def test_the_name_rule_is_a_label_values_bound():
    assert NAME_RULE["rule"] == "size(self.metadata.name) <= 63"

from pathlib import Path

import yaml

from mountwarden.api.crds import ALL, rendered

ROOT = Path(__file__).resolve().parents[2]


def walk(node, path="$"):
    yield path, node
    if isinstance(node, dict):
        for key, child in node.get("properties", {}).items():
            yield from walk(child, f"{path}.{key}")
        if isinstance(node.get("items"), dict):
            yield from walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            yield from walk(node["additionalProperties"], f"{path}{{}}")


def test_committed_crds_match_the_models():
    assert sorted(rendered()) == sorted(path.name for path in (ROOT / "crds").glob("*.yaml"))
    for name, text in rendered().items():
        committed = ROOT / "crds" / name
        assert committed.exists(), f"{committed} is missing: run `make crds`"
        assert committed.read_text() == text, f"{committed} differs from the models: run `make crds`"


def test_schemas_are_structural():
    assert set(rendered()) == {"mountwarden.io_storageprofiles.yaml", "mountwarden.io_nodemountreports.yaml",
                               "mountwarden.io_networkfilesystems.yaml"}
    for text in rendered().values():
        crd = yaml.safe_load(text)
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        assert len(list(walk(schema))) > 10, crd["metadata"]["name"]
        for path, node in walk(schema):
            assert "type" in node, f"{path} has no type"
            assert "$ref" not in node and "anyOf" not in node and "title" not in node, path
            assert node.get("additionalProperties") is not False, path


def test_storageprofile_crd_shape():
    crd = yaml.safe_load(rendered()["mountwarden.io_storageprofiles.yaml"])
    version = crd["spec"]["versions"][0]
    assert crd["spec"]["scope"] == "Cluster" and crd["spec"]["group"] == "mountwarden.io"
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    assert "sprof" in crd["spec"]["names"]["shortNames"]
    columns = {c["name"] for c in version["additionalPrinterColumns"]}
    assert {"Class", "Version", "Ready", "Age"} <= columns
    schema = version["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]
    assert spec["required"] == ["backend"]
    assert spec["properties"]["cachePolicy"]["enum"] == ["strict", "staging", "cached", "read-only", "coherent"]
    assert spec["properties"]["enforcement"]["default"] == "warn"
    conditions = schema["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    for path, node in walk(schema):
        is_field = path.startswith(("$.spec.", "$.status.")) and not path.endswith(("[]", "{}"))
        if is_field:
            assert node.get("description"), f"{path} has no description: document it in the model"


def test_every_crd_is_listed():
    assert set(ALL) == set(rendered())

"""The suite's own layout: pytest imports test modules by their basename (no __init__.py under tests/), so two
modules of one name in different directories stop the whole run at collection."""

from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_test_module_has_a_name_of_its_own():
    modules = [path.name for directory in ("tests", "e2e") for path in (ROOT / directory).rglob("test_*.py")]
    assert len(modules) > 100, modules
    twice = sorted(name for name, count in Counter(modules).items() if count > 1)
    assert not twice, f"test modules of the same name in different directories (rename one): {twice}"

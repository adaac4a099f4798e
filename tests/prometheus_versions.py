"""Prometheus-dependent tests on two Prometheus versions: Debian's 2.42 and 3.5 (scripts/prometheus3).

A test that uses the ``prometheus_version`` fixture (in its arguments, or a module's
``pytestmark = pytest.mark.usefixtures("prometheus_version")``) runs once per version when pytest is
given ``--prometheus3`` (scripts/test gives it), else on Debian's alone, and is marked
``prometheus_versions`` (``-m prometheus_versions`` selects the set). The fixture is module-scoped, so
a module's own Prometheus fixtures (which request it) start once per version; while it is in use
``servers.prometheus()`` and ``servers.prometheus_build()`` give that version's binaries. Without
the binaries the 3.5 runs are skipped with the reason. docs/development.md lists the set and why
it is that one.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from servers import PrometheusBuild, debian_prometheus, prometheus3, using_prometheus

VERSIONS = ("2.42", "3.5")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--prometheus3", action="store_true",
                     help="run the tests marked prometheus_versions on Prometheus 3.5 too "
                          "(.tools/prometheus3, from scripts/prometheus3)")  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "prometheus_versions: uses the prometheus_version fixture: runs on Debian's "
        "Prometheus 2.42 and, with --prometheus3, on 3.5 (select the set with -m prometheus_versions)",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "prometheus_version" not in metafunc.fixturenames:
        return
    versions = VERSIONS if metafunc.config.getoption("--prometheus3") else VERSIONS[:1]
    metafunc.parametrize("prometheus_version", versions, indirect=True, scope="module",
                         ids=[f"prometheus-{v}" for v in versions])  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "prometheus_version" in getattr(item, "fixturenames", ()):
            item.add_marker("prometheus_versions")


@pytest.fixture(scope="module")
def prometheus_version(request: pytest.FixtureRequest) -> Iterator[PrometheusBuild]:
    """The Prometheus this module's tests run on (Debian's unless parametrized)."""
    name = getattr(request, "param", VERSIONS[0])
    build = debian_prometheus() if name == VERSIONS[0] else prometheus3()
    if build is None:
        pytest.skip("Prometheus 3.5 is not in .tools/prometheus3: run scripts/prometheus3")
    with using_prometheus(build):
        yield build

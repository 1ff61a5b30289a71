"""A network black hole between ONE instance and its store, default options: nothing is
lost.

Three instances run the workload; ``a`` reaches the store through a local TCP proxy
(proxy.py), ``b`` and ``c`` directly. ``a`` starts first and takes a few long tasks; once
the others run and tasks are fed at a steady rate, the proxy
starts dropping its traffic silently (no RST, no FIN: its calls simply get no answer),
until every one of ``a``'s runs has been reaped and taken over by ``b`` or ``c``; then the
proxy heals. ``a`` must notice the lost leases on its own (async handlers cancelled,
nothing written), the others must rerun its work, and ``a`` must reconnect and carry on.
In leader mode (long form) ``a`` is the leader, and the every-second job must pass to
another instance without a missing or doubled second. A sync handler that completed its
side effect while cut off has run twice: those doubled completions are counted and bounded
by ``a``'s slots; no other figure may be above 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest

from acceptance.cluster import wait_for

from .harness import CONCURRENCY, ChaosCluster, scaled
from .proxy import BlackholeProxy

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(scaled(150, 300))]

RATE = 10
#: Long tasks that ``a`` holds when it is cut off.
HELD = 4
CASES = [
    pytest.param("postgres", "distributed", marks=pytest.mark.quick),
    pytest.param("redis", "distributed"),
    pytest.param("etcd", "distributed"),
    pytest.param("postgres", "leader"),
    pytest.param("redis", "leader"),
    pytest.param("etcd", "leader"),
]


def _through(url: str, port: int) -> str:
    """``url`` with its host and port replaced by the proxy's (user and password kept)."""
    parts = urlsplit(url)
    userinfo, at, _ = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{userinfo}{at}127.0.0.1:{port}"))


@pytest.fixture
def proxies() -> Iterator[list[BlackholeProxy]]:
    made: list[BlackholeProxy] = []
    yield made
    for proxy in made:
        proxy.close()


@pytest.mark.parametrize(("store", "mode"), CASES)
def test_blackhole_between_one_instance_and_its_store(  # type: ignore[no-untyped-def]
    store: str, mode: str, store_url, proxies, cluster_factory
) -> None:
    """The store's traffic of one instance dropped silently until its runs are taken over,
    then restored: no task, outcome or instant is lost, only its cut-off runs complete
    twice, and it carries on."""
    url = store_url(store)
    target = urlsplit(url)
    assert target.hostname and target.port, f"the proxy needs a TCP server, not {target.netloc!r}"
    proxy = BlackholeProxy.start(target.hostname or "127.0.0.1", target.port or 0)
    proxies.append(proxy)
    cluster: ChaosCluster = cluster_factory(url, f"blackhole[{store}-{mode}]", mode=mode)
    # a starts alone (so it leads, in leader mode) and takes the first tasks: which
    # instance wins a claim is otherwise up to chance.
    (a,) = cluster.start_all("a", url=_through(url, proxy.port))
    if mode == "leader":
        wait_for(lambda: cluster.status()["leader_id"] == "a", 20, "a to lead")
    cluster.enqueue_tasks(HELD, (4.0, 5.0))
    cluster.busiest([a], minimum=HELD)
    cluster.start_all("b", "c")
    _, held = cluster.busiest([a], minimum=HELD)
    cluster.enqueue_tasks(scaled(40, 160), (0.5, 2.0), rate=RATE)

    proxy.blackhole()
    cluster.faults += 1
    wait_for(lambda: cluster.taken_over(held), 30, "a's runs to be taken over")
    if mode == "leader":
        wait_for(lambda: cluster.status()["leader_id"] in {"b", "c"}, 30, "another leader")
    print(f"cut a off holding {len(held)} running tasks, until taken over")
    proxy.heal()
    assert a.alive
    cluster.finish(allowed_doubles=cluster.faults * CONCURRENCY)

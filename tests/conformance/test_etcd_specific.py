"""What only the etcd store does: its URL, etcd's request limits, the history bound, the
watch that wakes idle instances, the member's clock, TLS and authentication."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from chaos.servers import EtcdProcess, free_port
from ci import missing
from soloist.clock import SystemClock
from soloist.errors import ConfigError, PayloadError, StoreError
from soloist.models import (
    Claimed,
    JobRecord,
    Kind,
    NewOccurrence,
    Outcome,
    Overlap,
    PlanAdvance,
    PlanFence,
    State,
)
from soloist.stores import open_store
from soloist.stores.etcd import EtcdStore, parse_url
from soloist.stores.etcd.ops import delete, put
from soloist.stores.pages import JobQuery
from soloist.testing.clock import FakeClock

T0 = FakeClock().now()
TTL = timedelta(seconds=30)


def occurrence(key: str, *, task: str = "t", seconds: int = 0, payload: dict | None = None):
    at = T0 + timedelta(seconds=seconds)
    return NewOccurrence(
        dedupe_key=key,
        job="j",
        task=task,
        scope="",
        plan_time=at,
        due_at=at,
        kind=Kind.TASK,
        payload=payload or {},
    )


# -- the URL ------------------------------------------------------------------------------------
def test_the_url_gives_members_prefix_credentials_and_history_bounds() -> None:
    target = parse_url("etcd://app:s3cret@10.0.0.1,10.0.0.2:2380?prefix=billing&history_max=5")
    assert target.endpoints == ("10.0.0.1:2379", "10.0.0.2:2380")
    assert (target.prefix, target.history_max, target.tls) == ("billing", 5, False)
    assert (target.user, target.password) == ("app", "s3cret")
    assert "s3cret" not in target.display and "s3cret" not in repr(target)
    assert parse_url("etcds://h").tls and parse_url("etcd://h").history_age == timedelta(days=30)
    assert parse_url("etcd://h?history_age=0").history_age is None


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("etcd://h?colour=red", "unknown option 'colour'"),
        ("etcd://h?colour=red&prefix=x", "unknown option"),
        ("etcds://h?ca=/etc/hosts", "invalid ca '/etc/hosts'"),
        ("etcd://h?ca=/etc/hosts", "needs TLS: use 'etcds://'"),
        ("etcds://h?cert=/etc/hosts", "needs both"),
        ("etcds://h?ca=/no/such.pem", "invalid ca '/no/such.pem'"),
        ("etcd://h/app", "the key prefix is an option"),
        ("etcd://h:99999", "invalid member 'h:99999'"),
        ("etcd://h?prefix=a/b", "invalid prefix 'a/b'"),
        ("etcd://h?history_max=-1", "invalid history_max '-1'"),
        ("etcd://app@h", "expected 'user:password@'"),
        ("etcd://h?prefix=a&prefix=b", "given twice"),
    ],
)
def test_a_bad_url_is_refused_naming_the_part(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match="etcd store URL") as caught:
        open_store(url)
    assert message in str(caught.value)


def test_a_password_is_masked_in_errors() -> None:
    with pytest.raises(ConfigError) as caught:
        open_store("etcd://app:s3cret@h?nope=1")
    assert "s3cret" not in str(caught.value) and "***" in str(caught.value)


# -- etcd's limits ------------------------------------------------------------------------------
async def test_batches_beyond_one_transaction_are_split(etcd_url: str) -> None:
    """etcd takes at most 128 operations and 1.5 MiB per request: a batch of 300 inserts,
    claims, completions, a plan step with 300 items and 300 jobs are split, and all apply."""
    store = EtcdStore(etcd_url, clock=FakeClock())
    try:
        await store.migrate()
        created = await store.occurrence_insert_many([occurrence(f"k{n}") for n in range(300)])
        assert created == 300
        claimed = await store.occurrence_claim("i1", ["t"], 300, TTL, now=T0)
        assert len(claimed) == 300 and len({o.id for o in claimed}) == 300
        outcomes = [Outcome(o.id, o.fencing_token, State.SUCCEEDED) for o in claimed]
        assert len(await store.occurrence_complete("i1", outcomes, now=T0)) == 300
        items = [occurrence(f"p{n}", seconds=n) for n in range(300)]
        last = items[-1].plan_time
        step = PlanAdvance("j", "", None, last, 300, items, next_plan_time=None)
        assert await store.plan_advance_many([step]) == [True]
        cursor = await store.plan_cursor_get("j", "")
        assert cursor is not None and (cursor.last_plan_time, cursor.planned_count) == (last, 300)
        assert len(await store.occurrence_claim("i1", ["t"], 1000, TTL, now=last)) == 300
        jobs = [JobRecord(f"job{n:03d}", "t", {"every": "1m"}) for n in range(300)]
        await store.job_upsert(jobs)
        assert [j.name for j in await store.job_list()] == [j.name for j in jobs]
    finally:
        await store.close()


async def test_a_payload_too_large_for_etcd_is_refused_by_name(etcd_url: str) -> None:
    store = EtcdStore(etcd_url, clock=FakeClock())
    try:
        await store.migrate()
        big = occurrence("huge", payload={"blob": "x" * 600_000})
        with pytest.raises(PayloadError, match="payload of 'huge' is 600012 bytes"):
            await store.occurrence_insert(big)
        assert await store.occurrence_list() == []
    finally:
        await store.close()


# -- history ------------------------------------------------------------------------------------
async def test_history_is_trimmed_to_history_max_with_its_keys(etcd_url: str) -> None:
    """Finished occurrences beyond ``history_max`` go, with their attempts and dedupe keys;
    waiting and running ones stay."""
    clock = FakeClock()
    store = EtcdStore(f"{etcd_url}&history_max=5", clock=clock)
    try:
        await store.migrate()
        await store.occurrence_insert_many([occurrence(f"k{n}") for n in range(14)])
        claimed = await store.occurrence_claim("i1", ["t"], 12, TTL, now=T0)
        finished = [Outcome(o.id, o.fencing_token, State.SUCCEEDED) for o in claimed[:10]]
        await store.occurrence_complete("i1", finished, now=T0)
        await store.trim_history()
        states = sorted(o.state.value for o in await store.occurrence_list(limit=100))
        assert states == ["running"] * 2 + ["scheduled"] * 2 + ["succeeded"] * 5
        gone = claimed[0]
        assert await store.occurrence_get(gone.id) is None
        assert await store.occurrence_attempts(gone.id) == []
        # Its dedupe key went with it: the key can be inserted again.
        assert (await store.occurrence_insert(occurrence(gone.dedupe_key)))[1] is True
        assert len(await store._range(*store._prefix("f"))) == 5  # the job's finished keys
    finally:
        await store.close()


async def test_concurrent_prunes_keep_exactly_keep_rows(etcd_url: str) -> None:
    """Several handles pruning to ``keep`` at once (each instance trims after its completions)
    delete only what is over the bound: each reads the count and the oldest rows at one
    revision, so a prune that counted before another's deletions does not delete past it."""
    clock = FakeClock()
    stores = [EtcdStore(etcd_url, clock=clock) for _ in range(4)]
    try:
        await stores[0].migrate()
        for _ in range(3):
            await stores[0].occurrence_insert_many([occurrence(f"k{n}-{_}") for n in range(20)])
            claimed = await stores[0].occurrence_claim("i1", ["t"], 20, TTL, now=T0)
            done = [Outcome(o.id, o.fencing_token, State.SUCCEEDED) for o in claimed]
            await stores[0].occurrence_complete("i1", done, now=T0)
            await asyncio.gather(*(s.history_prune(None, 5, 1000) for s in stores))
            left = await stores[0].occurrence_list(limit=100)
            assert len(left) == 5, [o.state.value for o in left]
    finally:
        for store in stores:
            await store.close()


# -- pages of jobs ------------------------------------------------------------------------------
EVERY = {"kind": "every", "seconds": 300}


async def _steady(store: EtcdStore, jobs: int) -> dict[str, str]:
    """``jobs`` jobs as after a run: each one's occurrence succeeded, its next one waits.
    Returns each job's succeeded occurrence id."""
    names = [f"j{n:04}" for n in range(jobs)]
    await store.job_upsert([JobRecord(name=n, task="t", schedule=EVERY) for n in names])
    ran = [replace(occurrence(f"{n}:0"), job=n) for n in names]
    await store.occurrence_insert_many(ran)
    claimed = await store.occurrence_claim("i1", ["t"], jobs, TTL, now=T0)
    done = [Outcome(o.id, o.fencing_token, State.SUCCEEDED) for o in claimed]
    assert len(await store.occurrence_complete("i1", done, now=T0)) == jobs
    await store.occurrence_insert_many(
        [replace(occurrence(f"{n}:1", seconds=60), job=n) for n in names]
    )
    return {o.job: o.id for o in claimed}


async def _page_reads(store: EtcdStore) -> tuple[int, int]:
    """The requests one page of 10 jobs sends, and the keys they read."""
    conns = store._conns
    requests, keys = [0], [0]
    original_range, original_txn = conns.range, conns.txn

    async def range_(*args: object, **kwargs: object) -> object:
        reply = await original_range(*args, **kwargs)
        requests[0] += 1
        keys[0] += len(reply.kvs)
        return reply

    async def txn(*args: object, **kwargs: object) -> object:
        reply = await original_txn(*args, **kwargs)
        requests[0] += 1
        keys[0] += sum(len(r.response_range.kvs) for r in reply.responses)
        return reply

    conns.range, conns.txn = range_, txn  # type: ignore[method-assign]
    try:
        page = await store.job_page(JobQuery(limit=10))
    finally:
        conns.range, conns.txn = original_range, original_txn  # type: ignore[method-assign]
    assert len(page.jobs) == 10 and all(view.last is not None for view in page.jobs)
    return requests[0], keys[0]


async def test_a_page_reads_what_it_shows_whatever_the_store_holds(
    make_etcd_url: Callable[[], str],
) -> None:
    """A page of 10 jobs with their last outcomes sends the same requests and reads the
    same keys at 20 jobs and at 400 (each job's last key of f/, not a walk of every
    occurrence in l/)."""
    small = EtcdStore(make_etcd_url(), clock=FakeClock())
    large = EtcdStore(make_etcd_url(), clock=FakeClock())
    try:
        for store in (small, large):
            await store.migrate()
        await _steady(small, 20)
        await _steady(large, 400)
        few, many = await _page_reads(small), await _page_reads(large)
        assert many == few and many[1] <= 31, (few, many)
    finally:
        for store in (small, large):
            await store.close()


async def test_migrate_enters_the_finished_occurrences_of_an_older_store(etcd_url: str) -> None:
    """A store of key layout 1 (no f/ keys, no job in h/ values): migrate gives each
    finished occurrence its f/ key (more than a page of them), so that the pages show the
    same last outcomes as before, and the history's trim deletes those keys after it."""
    store = EtcdStore(etcd_url, clock=FakeClock())
    try:
        await store.migrate()
        ran = await _steady(store, 600)
        before = await store.job_page(JobQuery(limit=500))
        assert [v.last.id for v in before.jobs if v.last] == [
            ran[v.record.name] for v in before.jobs
        ]
        raw = store._conns
        await raw.txn([], [delete(*store._prefix("f"))])
        for kv in await store._range(*store._prefix("h")):
            dedupe, list_key, _ = json.loads(kv.value)
            await raw.txn([], [put(bytes(kv.key), json.dumps([dedupe, list_key]).encode())])
        await raw.txn([], [put(store._base + b"schema", b"1")])
        assert await store.migrate() == [2]
        assert len(await store._range(*store._prefix("f"))) == 600
        assert await store.job_page(JobQuery(limit=500)) == before
        assert await store.migrate() == []
        assert await store.history_prune(None, 100, 1000) == 500
        assert len(await store._range(*store._prefix("f"))) == 100
    finally:
        await store.close()


# -- wake-ups -----------------------------------------------------------------------------------
async def test_work_wait_wakes_on_an_insert_by_another_handle(etcd_url: str) -> None:
    waiter, writer = EtcdStore(etcd_url), EtcdStore(etcd_url)
    try:
        await waiter.migrate()
        await waiter.listen()
        assert await waiter.work_wait(0.2) is False
        waiting = asyncio.create_task(waiter.work_wait(30))
        await asyncio.sleep(0.1)
        await writer.occurrence_insert(occurrence("wake"))
        started = asyncio.get_running_loop().time()
        # Woken by the watch, not at its 30 s timeout; 5 s leaves room for a loaded machine.
        assert await asyncio.wait_for(waiting, 30) is True
        assert asyncio.get_running_loop().time() - started < 5
    finally:
        await waiter.close()
        await writer.close()


# -- the member's clock -------------------------------------------------------------------------
async def test_the_store_clock_is_the_members(etcd_url: str) -> None:
    """Without a given clock the store reads the member's: on this machine it is the local
    clock, measured from whole-second Date headers to within a few milliseconds."""
    store = EtcdStore(etcd_url)
    try:
        await store.migrate()
        for _ in range(3):
            gap = (await store.now() - SystemClock().now()).total_seconds()
            assert abs(gap) < 0.05, gap
    finally:
        await store.close()


_SKEWED = """
import asyncio, sys, time
from soloist.stores.etcd import EtcdStore

async def main():
    store = EtcdStore(sys.argv[1])
    await store.migrate()
    print((await store.now()).timestamp(), time.time())
    await store.close()

asyncio.run(main())
"""


@pytest.mark.parametrize("skew", ["+30", "-30"])
def test_a_skewed_local_clock_does_not_move_the_store_clock(
    etcd_url: str, skew: str, faketime_library: str
) -> None:
    """A process whose clock libfaketime moves 30 s still gets the member's time (the
    same measurement as above, through the Date header)."""
    env = {**os.environ, "LD_PRELOAD": faketime_library, "FAKETIME": f"{skew}s"}
    env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
    # Debian 12's libfaketime breaks time.sleep under these settings: the chaos suite's fix.
    env["PYTHONPATH"] = str(Path(__file__).parents[1] / "chaos" / "faketime_fix")
    done = subprocess.run(
        [sys.executable, "-c", _SKEWED, etcd_url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    store_time, local_time = map(float, done.stdout.split())
    real = SystemClock().now().timestamp()
    assert abs(local_time - real - int(skew)) < 5, "libfaketime did not move the clock"
    assert abs(store_time - real) < 2


@pytest.fixture
def faketime_library() -> str:
    found = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
    if not found:
        missing("libfaketime is not installed (Debian: libfaketime; .ci/run installs it)")
    return str(found[0])


# -- TLS and authentication ---------------------------------------------------------------------
class _TlsEtcd(EtcdProcess):
    """A member serving clients over TLS with the certificate of ``certs``."""

    def __init__(self, data_dir: Path, certs: Path) -> None:
        super().__init__(data_dir, free_port(), free_port())
        self.certs = certs

    def argv(self) -> list[str]:
        argv = super().argv()
        plain = f"http://127.0.0.1:{self.client_port}"
        argv = [a.replace(plain, f"https://127.0.0.1:{self.client_port}") for a in argv]
        return [
            *argv,
            "--cert-file", str(self.certs / "server.pem"),
            "--key-file", str(self.certs / "server-key.pem"),
        ]  # fmt: skip

    def healthy(self) -> bool:
        import ssl
        import urllib.request

        context = ssl.create_default_context(cafile=str(self.certs / "ca.pem"))
        url = f"https://127.0.0.1:{self.client_port}/health"
        try:
            with urllib.request.urlopen(url, timeout=1, context=context) as response:
                return json.loads(response.read()).get("health") == "true"
        except OSError:
            return False


def _certificates(directory: Path) -> Path:
    """A CA and a server certificate for 127.0.0.1, made with openssl."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
            "-keyout", "ca-key.pem", "-out", "ca.pem")  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
            "-keyout", "server-key.pem", "-out", "server.csr")  # fmt: skip
    (directory / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem",
            "-CAcreateserial", "-days", "2", "-extfile", "ext.cnf",
            "-out", "server.pem")  # fmt: skip
    return directory


async def _enable_auth(url: str, password: str) -> None:
    """Create the root user with ``password`` and turn authentication on."""
    from aetcd import rpc

    from soloist.stores.deadlines import Deadlines
    from soloist.stores.etcd.connections import Connections

    conns = Connections(parse_url(url), Deadlines.from_ttl(None))
    try:
        channel = await conns._channel()
        auth = rpc.AuthStub(channel.channel)
        await auth.UserAdd(rpc.AuthUserAddRequest(name="root", password=password))
        await auth.UserGrantRole(rpc.AuthUserGrantRoleRequest(user="root", role="root"))
        await auth.AuthEnable(rpc.AuthEnableRequest())
    finally:
        await conns.close_all()


async def test_etcds_with_a_password_runs_the_store_over_tls(tmp_path: Path) -> None:
    """``etcds://root:...@host?ca=...``: TLS checked against the given CA, the user
    authenticated; a wrong password is a StoreError that does not show it."""
    certs = _certificates(tmp_path)
    member = _TlsEtcd(tmp_path / "data", certs)
    try:
        member.start()
        ca = urllib.parse.quote(str(certs / "ca.pem"))
        base = f"127.0.0.1:{member.client_port}?prefix=tls&ca={ca}"
        await _enable_auth(f"etcds://{base}", "pw-1")
        store = EtcdStore(f"etcds://root:pw-1@{base}")
        try:
            await store.migrate()
            (occ, created) = await store.occurrence_insert(occurrence("over-tls"))
            claimed = await store.occurrence_claim("i1", ["t"], 1, TTL)
            assert created and [o.id for o in claimed] == [occ.id]
            assert await store.lease_renew("i1", [Claimed(occ.id, 1)], TTL) == {occ.id}
        finally:
            await store.close()
        wrong = EtcdStore(f"etcds://root:not-it@{base}")
        with pytest.raises(StoreError) as caught:
            await wrong.migrate()
        assert "not-it" not in str(caught.value)
        await wrong.close()
        untrusted = EtcdStore(f"etcds://root:pw-1@127.0.0.1:{member.client_port}?prefix=tls")
        with pytest.raises(StoreError):
            await untrusted.migrate()
        await untrusted.close()
    finally:
        member.stop()


# -- found by review: each of these failed on the first version of the store --------------------
async def test_a_long_fenced_catch_up_applies_while_its_partition_is_renewed(
    etcd_url: str,
) -> None:
    """A plan step too long for one request is a chain of atomic links; the fence is the
    lease's epoch, which the holder's own renewals keep, so renewing meanwhile refuses
    nothing."""
    store = EtcdStore(etcd_url, clock=FakeClock())
    try:
        await store.migrate()
        (lease,) = await store.partition_sync("i1", [0], TTL)
        items = [occurrence(f"c{n}", seconds=n, payload={"pad": "x" * 2000}) for n in range(600)]
        last = items[-1].plan_time
        fence = PlanFence(0, lease.epoch)
        step = PlanAdvance("j", "", None, last, 600, items, next_plan_time=None, fence=fence)

        async def renew() -> None:
            for _ in range(20):
                await store.partition_sync("i1", [0], TTL)

        applied, _ = await asyncio.gather(store.plan_advance_many([step]), renew())
        assert applied == [True]
        cursor = await store.plan_cursor_get("j", "")
        assert cursor is not None and (cursor.last_plan_time, cursor.planned_count) == (last, 600)
        assert len(await store.occurrence_list(limit=1000)) == 600
    finally:
        await store.close()


async def test_a_refused_step_inserts_none_of_its_items(etcd_url: str) -> None:
    """Two planners race to plan one new stream with different items: one step applies,
    and the store holds exactly its items (none of the loser's, however long its step)."""
    one, two = EtcdStore(etcd_url, clock=FakeClock()), EtcdStore(etcd_url, clock=FakeClock())
    try:
        await one.migrate()
        long = [occurrence(f"long{n}", seconds=n) for n in range(1, 200)]
        steps = [
            PlanAdvance("j", "", None, long[-1].plan_time, 199, long),
            PlanAdvance("j", "", None, T0, 1, [occurrence("short")]),
        ]
        results = await asyncio.gather(
            one.plan_advance_many([steps[0]]), two.plan_advance_many([steps[1]])
        )
        assert sorted(r[0] for r in results) == [False, True]
        winner = steps[0] if results[0] == [True] else steps[1]
        stored = {o.dedupe_key for o in await one.occurrence_list(limit=1000)}
        assert stored == {item.dedupe_key for item in winner.items}
    finally:
        await one.close()
        await two.close()


async def test_a_busy_group_does_not_hide_the_work_of_others(etcd_url: str) -> None:
    """60 instants of one scope wait behind its running one (overlap queue); a claim
    passes over them to another scope's due instant, as the other stores do."""
    store = EtcdStore(etcd_url, clock=FakeClock())
    try:
        await store.migrate()

        def queued(key: str, scope: str, seconds: int) -> NewOccurrence:
            return replace(occurrence(key, seconds=seconds), scope=scope, overlap=Overlap.QUEUE)

        await store.occurrence_insert(queued("s1-0", "s1", 0))
        assert len(await store.occurrence_claim("i1", ["t"], 1, TTL, now=T0)) == 1
        await store.occurrence_insert_many([queued(f"s1-{n}", "s1", n) for n in range(1, 61)])
        await store.occurrence_insert(queued("s2-50", "s2", 50))
        later = T0 + timedelta(seconds=70)
        claimed = await store.occurrence_claim("i1", ["t"], 1, TTL, now=later)
        assert [o.dedupe_key for o in claimed] == ["s2-50"]
    finally:
        await store.close()


async def test_history_trimming_keeps_up_with_completions(etcd_url: str) -> None:
    store = EtcdStore(f"{etcd_url}&history_max=100", clock=FakeClock())
    try:
        await store.migrate()
        for batch in range(4):
            keys = [f"b{batch}-{n}" for n in range(300)]
            await store.occurrence_insert_many([occurrence(k) for k in keys])
            claimed = await store.occurrence_claim("i1", ["t"], 300, TTL, now=T0)
            done = [Outcome(o.id, o.fencing_token, State.SUCCEEDED) for o in claimed]
            await store.occurrence_complete("i1", done, now=T0)
        if store._trim is not None:
            await store._trim
        await store.trim_history()
        counts = await store.occurrence_counts(now=T0)
        assert counts.by_job_state == {("j", State.SUCCEEDED): 100}
    finally:
        await store.close()


async def test_a_job_with_hundreds_of_scopes_is_deleted(etcd_url: str) -> None:
    store = EtcdStore(etcd_url, clock=FakeClock())
    try:
        await store.migrate()
        await store.job_upsert([JobRecord("j", "t", {"every": "1m"})])
        streams = [("j", f"scope{n}") for n in range(200)]
        assert await store.plan_cursor_ensure(streams, T0) == 200
        assert await store.job_delete("j") is True
        assert await store.job_get("j") is None
        assert await store.plan_cursor_get("j", "scope7") is None
        assert (await store.plan_due(T0 + TTL, 500)).streams == []
    finally:
        await store.close()


async def test_a_wall_clock_step_does_not_move_the_store_clock(
    etcd_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The offset is kept from the monotonic clock: a step of the wall clock (an NTP
    step, a resumed VM) after the measurement changes nothing."""
    store = EtcdStore(etcd_url)
    try:
        await store.migrate()
        before = await store.now()
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + 30)
        gap = (await store.now() - before).total_seconds()
        assert 0 <= gap < 0.5, gap
    finally:
        await store.close()


async def test_a_dead_first_member_is_passed_over(etcd_url: str) -> None:
    """Of ``etcd://dead,alive``, the first call already reaches the live member."""
    host = parse_url(etcd_url)
    prefix = host.prefix
    url = f"etcd://127.0.0.1:{free_port()},{host.endpoints[0]}?prefix={prefix}"
    store = EtcdStore(url, clock=FakeClock())
    try:
        await store.migrate()
        assert (await store.occurrence_insert(occurrence("reached")))[1] is True
    finally:
        await store.close()


async def test_an_outcome_is_not_lost_to_its_own_lease_renewal(etcd_url: str) -> None:
    """A completion and the heartbeat's renewals of the same lease race (both rewrite the
    occurrence): the runner still holds the lease, so the completion applies every time
    instead of leaving the occurrence running until it is reaped and run again."""
    runner, heart = EtcdStore(etcd_url, clock=FakeClock()), EtcdStore(etcd_url, clock=FakeClock())
    try:
        await runner.migrate()
        for n in range(15):
            await runner.occurrence_insert(occurrence(f"r{n}"))
            (occ,) = await runner.occurrence_claim("i1", ["t"], 1, TTL, now=T0)
            held = [Claimed(occ.id, occ.fencing_token)]
            outcome = Outcome(occ.id, occ.fencing_token, State.SUCCEEDED)
            done, *_ = await asyncio.gather(
                runner.occurrence_complete("i1", [outcome], now=T0),
                *(heart.lease_renew("i1", held, TTL, now=T0) for _ in range(4)),
            )
            assert done == {occ.id}, f"round {n}: the completion was refused"
            stored = await runner.occurrence_get(occ.id)
            assert stored is not None and stored.state == State.SUCCEEDED
    finally:
        await runner.close()
        await heart.close()

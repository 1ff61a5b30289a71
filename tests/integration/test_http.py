"""The HTTP endpoint of real ``soloist run APP --http 127.0.0.1:0`` processes, over HTTP.

Two instances share one SQLite file: ``admin`` has a token (actions enabled), ``reader``
has none (read-only). Each listens on a port the OS chose, read from its log line
"http listening on ...". Metrics are parsed with prometheus_client's text parser.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from soloist.testing import wait_until

SOLOIST = Path(sys.executable).parent / "soloist"
APP = f"{Path(__file__).parent / 'apps' / 'http_app.py'}:app"
SCRIPT_NAME = "<script>alert('x')</script>"
TOKEN = "s3cret-token-for-tests"
LISTENING = re.compile(r"http listening on (http://127\.0\.0\.1:\d+)")
DEADLINE_S = 30.0
JOB_KEYS = {"name", "task", "schedule", "paused", "dynamic", "next_plan_time", "last"}
OCCURRENCE_KEYS = {
    "id",
    "job",
    "task",
    "scope",
    "kind",
    "plan_time",
    "due_at",
    "state",
    "attempt",
    "max_attempts",
    "instance_id",
    "started_at",
    "finished_at",
    "error_code",
    "error_message",
    "result",
}


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOLOIST_")}
    return {**env, **extra}


@dataclass
class Instance:
    proc: subprocess.Popen[bytes]
    log_path: Path
    base: str = ""

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def url(self, path: str) -> str:
        return f"{self.base}/{path.lstrip('/')}"

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.get(self.url(path), timeout=10, **kwargs)

    def post(self, path: str, token: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return httpx.post(self.url(path), headers=headers, timeout=10)


@dataclass
class Cluster:
    store: str
    cwd: Path
    admin: Instance
    reader: Instance

    def soloist(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SOLOIST), *args, "--store", self.store],
            cwd=self.cwd,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )


def start(cwd: Path, store: str, name: str, **env: str) -> Instance:
    log_path = cwd / f"{name}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [str(SOLOIST), "run", APP, "--store", store, "--http", "127.0.0.1:0"],
            cwd=cwd,
            env=clean_env(SOLOIST_INSTANCE_ID=name, **env),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    instance = Instance(proc, log_path)

    def listening() -> str | None:
        if proc.poll() is not None:
            raise AssertionError(f"{name} exited early:\n{instance.log()}")
        found = LISTENING.search(instance.log())
        return found.group(1) if found else None

    instance.base = wait_until(listening, f"{name} to listen", DEADLINE_S)
    return instance


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cwd = tmp_path_factory.mktemp("http")
    store = f"sqlite:///{cwd / 'soloist.db'}"
    admin = start(cwd, store, "admin", SOLOIST_TOKEN=TOKEN)
    reader = start(cwd, store, "reader")
    try:
        yield Cluster(store, cwd, admin, reader)
    finally:
        for instance in (admin, reader):
            instance.proc.send_signal(signal.SIGTERM)
        for instance in (admin, reader):
            try:
                instance.proc.wait(timeout=DEADLINE_S)
            except subprocess.TimeoutExpired:
                instance.proc.kill()
        # The token must never be written to the logs.
        for instance in (admin, reader):
            assert TOKEN not in instance.log()


def metrics(instance: Instance) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``/metrics``, parsed by the Prometheus text parser."""
    response = instance.get("metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def sample(
    values: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return values.get((name, tuple(sorted(labels.items()))), 0.0)


def occurrence(instance: Instance, occurrence_id: str) -> dict[str, Any]:
    response = instance.get(f"api/occurrences/{occurrence_id}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def wait_state(instance: Instance, occurrence_id: str, *states: str) -> dict[str, Any]:
    return wait_until(
        lambda: (o := occurrence(instance, occurrence_id))["state"] in states and o,
        f"occurrence {occurrence_id} to reach {states}",
        DEADLINE_S,
    )


# -- probes ------------------------------------------------------------------------------------
def test_healthz_and_readyz_answer_json(cluster: Cluster) -> None:
    """/healthz says the process is alive and /readyz that the store answers, both as JSON."""
    for instance in (cluster.admin, cluster.reader):
        health = instance.get("healthz")
        assert (health.status_code, health.json()) == (200, {"status": "ok"})
        ready = instance.get("readyz")
        assert (ready.status_code, ready.json()) == (200, {"status": "ready"})
        assert ready.headers["content-type"] == "application/json"


def test_status_reports_instance_leader_instances_and_jobs(cluster: Cluster) -> None:
    """/status has every contract field; both instances are live and agree on one leader."""

    def both_live() -> dict[str, Any] | None:
        status: dict[str, Any] = cluster.admin.get("status").json()
        ids = {i["instance_id"] for i in status["instances"]}
        return status if ids == {"admin", "reader"} and status["leader_id"] else None

    status = wait_until(both_live, "both instances live with a leader", DEADLINE_S)
    assert status["instance_id"] == "admin"
    assert status["mode"] == "distributed"
    assert status["actions_enabled"] is True
    assert status["will_execute_jobs"] is True
    assert status["store"] == cluster.store
    assert isinstance(status["epoch"], int) and status["epoch"] >= 1
    assert status["is_leader"] == (status["leader_id"] == "admin")
    for inst in status["instances"]:
        assert set(inst) >= {"instance_id", "host", "pid", "mode", "started_at", "last_seen"}
    jobs = {job["name"]: job for job in status["jobs"]}
    assert set(jobs) == {"tick", "flaky", SCRIPT_NAME, "reports/daily"}
    assert set(jobs["tick"]) == JOB_KEYS
    assert jobs["tick"]["schedule"] == "every 1s"
    reader = cluster.reader.get("status").json()
    assert reader["instance_id"] == "reader" and reader["actions_enabled"] is False
    assert reader["leader_id"] == status["leader_id"]
    assert reader["is_leader"] == (status["leader_id"] == "reader")


def test_jobs_show_next_plan_time_and_last_outcome(cluster: Cluster) -> None:
    """/api/jobs lists every job; the ticking job's last outcome is a success."""

    def tick_ran() -> dict[str, Any] | None:
        jobs = {job["name"]: job for job in cluster.reader.get("api/jobs").json()["jobs"]}
        last = jobs["tick"]["last"]
        return jobs if last is not None and last["state"] == "succeeded" else None

    jobs = wait_until(tick_ran, "tick to succeed once", DEADLINE_S)
    last = jobs["tick"]["last"]
    assert set(last) == {"id", "state", "plan_time", "finished_at", "error_code"}
    assert jobs["tick"]["next_plan_time"] is not None
    assert jobs["tick"]["paused"] is False and jobs["tick"]["dynamic"] is False


def test_markup_in_a_job_name_is_plain_json_data(cluster: Cluster) -> None:
    """A job named <script>... comes back as a JSON string, served as nosniff JSON."""
    response = cluster.reader.get("api/jobs")
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-content-type-options"] == "nosniff"
    names = [job["name"] for job in response.json()["jobs"]]
    assert SCRIPT_NAME in names
    triggered = cluster.admin.post(f"api/jobs/{quote(SCRIPT_NAME, safe='')}/trigger", TOKEN)
    assert triggered.status_code == 202, triggered.text
    occ = wait_state(cluster.admin, triggered.json()["occurrence_id"], "succeeded")
    assert occ["job"] == SCRIPT_NAME


# -- occurrences --------------------------------------------------------------------------------
def test_occurrences_filter_by_job_and_state_newest_first(cluster: Cluster) -> None:
    """/api/occurrences filters by job and state, caps at limit and lists newest first."""
    wait_until(
        lambda: (
            len(
                cluster.reader.get("api/occurrences?job=tick&state=succeeded").json()["occurrences"]
            )
            >= 2
        ),
        "two successful ticks",
        DEADLINE_S,
    )
    found = cluster.reader.get("api/occurrences", params={"job": "tick", "state": "succeeded"})
    rows = found.json()["occurrences"]
    assert all(row["job"] == "tick" and row["state"] == "succeeded" for row in rows)
    assert set(rows[0]) >= OCCURRENCE_KEYS
    plan_times = [row["plan_time"] for row in rows]
    assert plan_times == sorted(plan_times, reverse=True)
    limited = cluster.reader.get("api/occurrences", params={"limit": "1"}).json()
    assert len(limited["occurrences"]) == 1
    assert cluster.reader.get("api/occurrences", params={"job": "nope"}).json() == {
        "occurrences": []
    }


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"state": "bogus"}, "invalid state 'bogus': expected one of"),
        ({"limit": "0"}, "invalid limit '0'"),
        ({"limit": "501"}, "invalid limit '501'"),
        ({"limit": "ten"}, "invalid limit 'ten'"),
    ],
)
def test_bad_occurrence_filters_are_400_naming_the_value(
    cluster: Cluster, params: dict[str, str], named: str
) -> None:
    """A bad state or limit answers 400 with an error naming the value and what is expected."""
    response = cluster.reader.get("api/occurrences", params=params)
    assert response.status_code == 400
    assert response.json()["error"].startswith(named), response.json()


def test_one_occurrence_with_attempts_and_unknown_is_404(cluster: Cluster) -> None:
    """/api/occurrences/{id} adds the attempts' audit log; an unknown id is a JSON 404."""
    rows = wait_until(
        lambda: cluster.reader.get("api/occurrences?job=tick&state=succeeded").json()[
            "occurrences"
        ],
        "a successful tick",
        DEADLINE_S,
    )
    occ = occurrence(cluster.reader, rows[0]["id"])
    assert occ["id"] == rows[0]["id"]
    assert [a["outcome"] for a in occ["attempts"]] == ["succeeded"]
    missing = cluster.reader.get("api/occurrences/not-an-id")
    assert missing.status_code == 404
    assert "not-an-id" in missing.json()["error"]


# -- actions ------------------------------------------------------------------------------------
def test_actions_need_the_bearer_token(cluster: Cluster) -> None:
    """Without a token configured POST is 403; with one, a missing or wrong token is 401."""
    for path in ("api/jobs/tick/trigger", "api/jobs/tick/pause", "api/occurrences/x/retry"):
        refused = cluster.reader.post(path, TOKEN)
        assert refused.status_code == 403
        assert refused.json() == {"error": "read-only: set SOLOIST_TOKEN to enable actions"}
        for token in (None, "wrong", TOKEN + "x", TOKEN[:-1]):
            denied = cluster.admin.post(path, token)
            assert denied.status_code == 401, (path, token)
            assert denied.headers["www-authenticate"].startswith("Bearer")
            assert TOKEN not in denied.text
    basic = httpx.post(cluster.admin.url("api/jobs/tick/trigger"), auth=("user", TOKEN), timeout=10)
    assert basic.status_code == 401


def test_trigger_runs_the_job_once_now(cluster: Cluster) -> None:
    """POST trigger answers 202 with the new occurrence id, which then runs."""
    response = cluster.admin.post("api/jobs/reports%2Fdaily/trigger", TOKEN)
    assert response.status_code == 202
    occ = wait_state(cluster.admin, response.json()["occurrence_id"], "succeeded")
    assert occ["job"] == "reports/daily" and occ["kind"] == "trigger"


def test_pause_and_resume_flip_the_flag(cluster: Cluster) -> None:
    """POST pause / resume answer the new flag, and /api/jobs shows it."""

    def paused() -> bool:
        jobs = cluster.reader.get("api/jobs").json()["jobs"]
        return bool(next(j for j in jobs if j["name"] == "flaky")["paused"])

    response = cluster.admin.post("api/jobs/flaky/pause", TOKEN)
    assert (response.status_code, response.json()) == (200, {"job": "flaky", "paused": True})
    assert paused()
    response = cluster.admin.post("api/jobs/flaky/resume", TOKEN)
    assert (response.status_code, response.json()) == (200, {"job": "flaky", "paused": False})
    assert not paused()


def test_unknown_job_actions_are_404(cluster: Cluster) -> None:
    """Trigger, pause and resume of a job that does not exist answer a JSON 404."""
    for verb in ("trigger", "pause", "resume"):
        response = cluster.admin.post(f"api/jobs/no-such-job/{verb}", TOKEN)
        assert response.status_code == 404, verb
        assert "no-such-job" in response.json()["error"]


def test_retry_of_a_dead_occurrence_makes_one_new_occurrence(cluster: Cluster) -> None:
    """Retry makes one new occurrence of a dead one (idempotent); other states are 409."""
    triggered = cluster.admin.post("api/jobs/flaky/trigger", TOKEN).json()["occurrence_id"]
    dead = wait_state(cluster.admin, triggered, "dead")
    assert dead["error_code"] == "handler_error"
    first = cluster.admin.post(f"api/occurrences/{triggered}/retry", TOKEN)
    assert first.status_code == 202, first.text
    new_id = first.json()["occurrence_id"]
    assert new_id != triggered
    again = cluster.admin.post(f"api/occurrences/{triggered}/retry", TOKEN)
    assert (again.status_code, again.json()["occurrence_id"]) == (202, new_id)
    retried = wait_state(cluster.admin, new_id, "dead")
    assert (retried["job"], retried["task"], retried["scope"]) == ("flaky", "flaky", "")
    assert occurrence(cluster.admin, triggered)["state"] == "dead"  # the audit record stays
    # The CLI does the same, through the same operation.
    done = cluster.soloist("retry", triggered)
    assert done.returncode == 0 and new_id in done.stdout, done.stderr

    ticks = cluster.reader.get("api/occurrences?job=tick&state=succeeded").json()
    conflict = cluster.admin.post(f"api/occurrences/{ticks['occurrences'][0]['id']}/retry", TOKEN)
    assert conflict.status_code == 409
    assert "only dead occurrences" in conflict.json()["error"]
    unknown = cluster.admin.post("api/occurrences/nope/retry", TOKEN)
    assert unknown.status_code == 404
    done = cluster.soloist("retry", ticks["occurrences"][0]["id"])
    assert done.returncode == 2 and "only dead occurrences" in done.stderr


# -- metrics and the rest ------------------------------------------------------------------------
def test_metrics_parse_and_move_with_the_work(cluster: Cluster) -> None:
    """/metrics parses as Prometheus text, and its counters count the runs that happened."""
    before = metrics(cluster.admin)
    assert sample(before, "soloist_instance_info", instance_id="admin", mode="distributed") == 1
    triggered = cluster.admin.post("api/jobs/flaky/trigger", TOKEN).json()["occurrence_id"]
    ran_here = wait_state(cluster.admin, triggered, "dead")["instance_id"] == "admin"
    after = metrics(cluster.admin)
    dead = sample(after, "soloist_runs_total", job="flaky", outcome="dead")
    assert dead - sample(before, "soloist_runs_total", job="flaky", outcome="dead") == ran_here
    # The cluster may have just started (this test alone, or first on an xdist worker):
    # wait for the first tick rather than assume one ran.
    wait_until(
        lambda: (
            sum(
                sample(metrics(i), "soloist_runs_total", job="tick", outcome="succeeded")
                for i in (cluster.admin, cluster.reader)
            )
            >= 1
        ),
        "a tick to be counted as succeeded",
        DEADLINE_S,
    )
    assert (
        sum(
            sample(metrics(i), "soloist_run_duration_seconds_count", job="tick")
            for i in (cluster.admin, cluster.reader)
        )
        >= 1
    )
    # Store-wide counts, cached for a few seconds: the dead flaky runs show up.
    wait_until(
        lambda: (
            sample(metrics(cluster.reader), "soloist_occurrences", job="flaky", state="dead") >= 1
        ),
        "the dead occurrences to be counted",
        DEADLINE_S,
    )
    assert ("soloist_queue_depth", ()) in after
    leaders = [sample(metrics(i), "soloist_is_leader") for i in (cluster.admin, cluster.reader)]
    assert sorted(leaders) == [0.0, 1.0]
    assert (
        sum(
            sample(metrics(i), "soloist_leader_changes_total")
            for i in (cluster.admin, cluster.reader)
        )
        >= 1
    )


def test_dashboard_page_and_unknown_paths(cluster: Cluster) -> None:
    """/ serves the HTML page under a restrictive CSP; unknown paths and methods are JSON."""
    page = cluster.reader.get("")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert "<html" in page.text.lower()
    missing = cluster.reader.get("nope/nothing")
    assert missing.status_code == 404
    assert missing.headers["content-type"] == "application/json"
    assert "error" in missing.json()
    wrong_method = cluster.reader.get("api/jobs/tick/trigger")
    assert wrong_method.status_code == 405
    assert "error" in wrong_method.json()


def test_cli_status_uses_the_same_report(cluster: Cluster) -> None:
    """``soloist status --json`` shows the leader, the live instances and the jobs."""
    done = cluster.soloist("status", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    http_status = cluster.reader.get("status").json()
    assert report["leader_id"] == http_status["leader_id"]
    assert {i["instance_id"] for i in report["instances"]} == {"admin", "reader"}
    assert {j["name"] for j in report["jobs"]} == {j["name"] for j in http_status["jobs"]}


# -- hardening ----------------------------------------------------------------------------------
def raw_request(instance: Instance, request: bytes) -> tuple[int, dict[str, str], str]:
    """Send ``request`` as given (a client library would fix the Host header) and parse the
    answer of a ``Connection: close`` exchange."""
    import socket
    from urllib.parse import urlsplit

    address = urlsplit(instance.base)
    with socket.create_connection((address.hostname, address.port), timeout=10) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body.decode()


@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:8080", "127.0.0.1.nip.io", "localhost.evil.example"]
)
def test_a_foreign_host_header_is_refused_on_loopback(cluster: Cluster, host: str) -> None:
    """DNS rebinding: a loopback-bound server answers 421 JSON to a Host that is not local."""
    for method, path, auth in (
        ("GET", "/status", ""),
        ("GET", "/", ""),
        ("POST", "/api/jobs/tick/trigger", f"Authorization: Bearer {TOKEN}\r\n"),
    ):
        request = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n"
        status, headers, body = raw_request(cluster.admin, request.encode())
        assert status == 421, (host, path, body)
        assert headers["content-type"] == "application/json"
        assert json.loads(body)["error"].startswith(f"invalid Host header {host!r}")


def test_local_host_headers_are_answered_with_any_port(cluster: Cluster) -> None:
    """localhost, 127.0.0.1 and [::1], with or without a port, are the names allowed."""
    for host in ("localhost", "LOCALHOST:8080", "127.0.0.1:1", "[::1]:8080", "[::1]"):
        request = f"GET /healthz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        status, _, body = raw_request(cluster.reader, request.encode())
        assert (status, json.loads(body)) == (200, {"status": "ok"}), host


def test_the_token_is_accepted_only_as_a_bearer_header(cluster: Cluster) -> None:
    """No query string, form field or cookie carries the token; whitespace around it is fine."""
    url = cluster.admin.url("api/jobs/tick/pause")
    for attempt in (
        httpx.post(url, params={"token": TOKEN}, timeout=10),
        httpx.post(url, params={"access_token": TOKEN}, timeout=10),
        httpx.post(url, data={"token": TOKEN, "access_token": TOKEN}, timeout=10),
        httpx.post(url, cookies={"token": TOKEN, "soloist.token": TOKEN}, timeout=10),
        httpx.post(url, headers={"Authorization": TOKEN}, timeout=10),
        httpx.post(url, headers={"X-Token": TOKEN}, timeout=10),
    ):
        assert attempt.status_code == 401, attempt.request
        assert TOKEN not in attempt.text
    spaced = httpx.post(
        cluster.admin.url("api/jobs/tick/resume"),
        headers={"Authorization": f"bearer   {TOKEN}"},
        timeout=10,
    )
    assert (spaced.status_code, spaced.json()) == (200, {"job": "tick", "paused": False})


def test_cors_is_not_enabled(cluster: Cluster) -> None:
    """A cross-origin preflight of POST fails and no answer allows another origin."""
    origin = {"Origin": "http://evil.example"}
    preflight = httpx.options(
        cluster.admin.url("api/jobs/tick/trigger"),
        headers={
            **origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization",
        },
        timeout=10,
    )
    assert preflight.status_code == 405
    for response in (preflight, cluster.admin.get("status", headers=origin)):
        assert not any(k.lower().startswith("access-control-") for k in response.headers)


@pytest.mark.parametrize(
    ("path", "status", "named"),
    [
        ("api/occurrences?limit=%C2%B2", 400, "invalid limit '²'"),
        ("api/occurrences?limit=" + "9" * 5000, 400, "invalid limit '999"),
        ("api/occurrences?limit=-1", 400, "invalid limit '-1'"),
        ("api/occurrences?limit=1e3", 400, "invalid limit '1e3'"),
        ("api/occurrences?limit=%205", 400, "invalid limit ' 5'"),
        ("api/occurrences?state=%00", 400, "invalid state '\\x00'"),
        ("api/occurrences?job=a%00b", 400, "invalid job 'a\\x00b'"),
        ("api/occurrences/a%00b", 400, "invalid id 'a\\x00b'"),
        ("api/occurrences/%F0%9F%92%A9%E2%80%AE", 404, "unknown occurrence '💩\\u202e'"),
        ("api/occurrences/..%2F..%2Fetc%2Fpasswd", 404, "no such endpoint"),
        ("api/occurrences/" + "x" * 6000, 404, "unknown occurrence 'xxx"),
    ],
)
def test_weird_input_is_a_clean_4xx(cluster: Cluster, path: str, status: int, named: str) -> None:
    """Odd limits, NUL bytes, unicode, traversal and long ids answer a short JSON 4xx."""
    response = cluster.reader.get(path)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    message = response.json()["error"]
    assert message.startswith(named) and len(message) <= 500
    assert "Traceback" not in response.text


def test_actions_refuse_nul_bytes_and_ignore_a_body(cluster: Cluster) -> None:
    """A NUL in a job name or id is 400; a large request body of an action is ignored."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for path in ("api/jobs/a%00b/trigger", "api/jobs/a%00b/pause", "api/occurrences/a%00/retry"):
        response = httpx.post(cluster.admin.url(path), headers=auth, timeout=10)
        assert response.status_code == 400, response.text
        assert "must not contain a NUL byte" in response.json()["error"]
    body = httpx.post(
        cluster.admin.url("api/jobs/tick/resume"),
        headers=auth,
        content=b"x" * 5_000_000,
        timeout=30,
    )
    assert (body.status_code, body.json()) == (200, {"job": "tick", "paused": False})
    assert cluster.admin.get("healthz").status_code == 200


def test_every_answer_carries_the_safety_headers(cluster: Cluster) -> None:
    """JSON, metrics, errors and the page are unframeable, unsniffable, uncached and
    send no referrer; the page's policy allows its script by hash, not 'unsafe-inline'."""
    for path in ("status", "api/jobs", "metrics", "nope", "api/occurrences?limit=0", ""):
        headers = cluster.reader.get(path).headers
        assert headers["x-content-type-options"] == "nosniff", path
        assert headers["cache-control"] == "no-store", path
        assert headers["x-frame-options"] == "DENY", path
        assert headers["referrer-policy"] == "no-referrer", path
        assert "frame-ancestors 'none'" in headers["content-security-policy"], path
    csp = cluster.reader.get("").headers["content-security-policy"]
    script_src = next(p for p in csp.split(";") if p.strip().startswith("script-src"))
    assert "'sha256-" in script_src and "unsafe" not in script_src

"""The dashboard in a real headless chromium against real ``soloist run --http`` servers."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from playwright.sync_api import Locator, Page, Request, expect

from soloist import JobContext, Scheduler

from .apps.dashboard_app import ERROR_MARKUP, IMG_NAME, SCRIPT_NAME
from .apps.many_jobs_app import fill
from .conftest import TOKEN, PageWatch, Servers
from .servers import APPS, Server

MANY_APP = str(APPS / "many_jobs_app.py") + ":app"

# Auto-waiting assertions retry until this many ms have passed: the page refreshes every
# 2.5 s and the jobs run every 1-2 s on a loaded machine.
expect.set_options(timeout=15_000)


def open_dashboard(page: Page, url: str) -> None:
    page.goto(url)
    expect(page.locator("#updated")).to_have_text(re.compile(r"^updated at "))


def occurrence_requests(page: Page) -> list[str]:
    """Record the URLs of every later ``api/occurrences`` request the page makes."""
    seen: list[str] = []

    def record(request: Request) -> None:
        if "/api/occurrences?" in request.url:
            seen.append(request.url)

    page.on("request", record)
    return seen


def job_row(page: Page, name: str) -> Locator:
    return page.locator("#jobs tbody tr").filter(
        has=page.locator(".job-name").get_by_text(name, exact=True)
    )


def test_page_shows_header_jobs_and_instances(page: Page, servers: Servers) -> None:
    """The page shows this instance, the leader, every job and both live instances."""
    open_dashboard(page, servers.admin.url)
    _, status = servers.admin.get("status")
    expect(page.locator("#instance-id")).to_have_text("dash-admin")
    expect(page.locator("#mode")).to_contain_text(status["mode"])
    names = page.locator("#jobs .job-name")
    for name in ("tick", "always-fails", "monthly-report", SCRIPT_NAME, IMG_NAME):
        expect(names.get_by_text(name, exact=True)).to_have_count(1)
    expect(job_row(page, "tick").locator(".state-succeeded")).to_have_text("succeeded")
    expect(job_row(page, "always-fails").locator(".state-dead")).to_have_text("dead")
    instances = page.locator("#instances tbody tr")
    expect(instances.filter(has_text="dash-admin")).to_have_count(1)
    expect(instances.filter(has_text="dash-viewer")).to_have_count(1)
    # Exactly one instance is marked leader, and it is the one the store elected.
    leader = page.locator(".badge.leader")
    expect(instances.locator(".badge.leader")).to_have_count(1)
    _, status = servers.admin.get("status")
    assert status["leader_id"] in ("dash-admin", "dash-viewer"), status
    expect(page.locator("#leader")).to_contain_text(status["leader_id"])
    expect(instances.filter(has=leader)).to_have_attribute("data-instance", status["leader_id"])


def test_instances_show_the_planning_partitions_they_hold(page: Page, servers: Servers) -> None:
    """Each live instance's row says how many of the 64 planning partitions it holds; the
    two instances share them all, and the tooltip names the spans."""
    open_dashboard(page, servers.admin.url)
    cells = page.locator("#instances tbody tr td.partitions")
    expect(cells).to_have_count(2)
    deadline = time.monotonic() + 15
    while True:
        texts = cells.all_inner_texts()
        held = [int(text.split(" of ")[0]) for text in texts]
        if (sum(held) == 64 and all(text.endswith(" of 64") for text in texts)) or (
            time.monotonic() > deadline
        ):
            break
        time.sleep(0.3)
    assert sum(held) == 64 and min(held) > 0, texts
    expect(cells.first).to_have_attribute("title", re.compile(r"^partitions \d+(-\d+)?"))


def test_page_refreshes_itself_without_reloading(page: Page, servers: Servers) -> None:
    """The "updated at" time moves on by itself while the document stays the same one."""
    open_dashboard(page, servers.admin.url)
    page.evaluate("window.sameDocument = true")
    # Wait for a later second, so that two refreshes cannot render the same text.
    first = page.locator("#updated").inner_text()
    expect(page.locator("#updated")).not_to_have_text(first)
    assert page.evaluate("window.sameDocument === true"), "the page was reloaded"


def test_failed_refresh_is_shown_and_recovers(page: Page, servers: Servers) -> None:
    """When the server stops answering the page says so, keeps its data, and recovers."""
    open_dashboard(page, servers.admin.url)
    page.route("**/status", lambda route: route.fulfill(status=503, body="{}"))
    expect(page.locator("#updated")).to_contain_text("refresh failed")
    expect(page.locator("#updated")).to_have_class("stale")
    expect(job_row(page, "tick")).to_have_count(1)
    page.unroute("**/status")
    expect(page.locator("#updated")).to_have_text(re.compile(r"^updated at "))


def test_filters_narrow_history_and_are_kept(page: Page, servers: Servers) -> None:
    """Choosing a job and a state narrows the history, in the request and on the page,
    and the choice survives the automatic refreshes."""
    open_dashboard(page, servers.admin.url)
    rows = page.locator("#occurrences tbody tr[data-state]")
    expect(rows.filter(has_text="tick").first).to_be_visible()
    expect(rows.filter(has_text="always-fails").first).to_be_visible()
    requests = occurrence_requests(page)

    page.get_by_label("Job", exact=True).select_option("tick")
    expect(rows.filter(has_not_text="tick")).to_have_count(0)
    expect(rows.first).to_contain_text("tick")
    assert any("job=tick" in url for url in requests), requests

    page.get_by_label("State", exact=True).select_option("dead")
    expect(page.locator("#occurrences tbody")).to_contain_text("no occurrences match")
    page.get_by_label("Job", exact=True).select_option("always-fails")
    expect(rows.filter(has_not_text="always-fails")).to_have_count(0)
    expect(page.locator("#occurrences tbody tr:not([data-state='dead'])")).to_have_count(0)
    expect(rows.first).to_have_attribute("data-state", "dead")

    # The next two automatic refreshes still ask for the chosen job and state.
    wanted = re.compile(r"job=always-fails.*state=dead|state=dead.*job=always-fails")
    for _ in range(2):
        with page.expect_request(lambda r: "job=" in r.url, timeout=10_000) as req:
            pass
        assert wanted.search(req.value.url), req.value.url
    expect(page.get_by_label("Job", exact=True)).to_have_value("always-fails")
    expect(page.get_by_label("State", exact=True)).to_have_value("dead")


def test_markup_in_names_and_errors_is_shown_as_text(
    page: Page, servers: Servers, watch: PageWatch
) -> None:
    """Job names and error messages made of HTML appear literally; nothing is injected."""
    open_dashboard(page, servers.admin.url)
    names = page.locator("#jobs .job-name")
    expect(names.get_by_text(SCRIPT_NAME, exact=True)).to_have_count(1)
    expect(names.get_by_text(IMG_NAME, exact=True)).to_have_count(1)
    expect(page.locator("#failures .error-message").first).to_contain_text(ERROR_MARKUP)
    expect(
        page.get_by_label("Job", exact=True).locator("option", has_text=SCRIPT_NAME)
    ).to_have_count(1)
    # The page's own script is the only script; no element came from the data.
    expect(page.locator("script")).to_have_count(1)
    expect(page.locator("img")).to_have_count(0)
    expect(page.locator("main b")).to_have_count(0)
    assert watch.dialogs == []


def test_actions_need_the_token(page: Page, servers: Servers) -> None:
    """Trigger is refused with 401 without the token, accepted with it (202), and the new
    occurrence then shows in the history; the token stays out of the URL."""
    open_dashboard(page, servers.admin.url)
    expect(page.locator("#readonly")).to_be_hidden()
    page.get_by_label("Job", exact=True).select_option("monthly-report")
    history = page.locator("#occurrences tbody")
    expect(history).to_contain_text("no occurrences match")
    trigger = page.get_by_role("button", name="trigger monthly-report", exact=True)

    trigger.click()
    expect(page.locator("#message")).to_contain_text("refused, HTTP 401")
    page.get_by_label("API token", exact=True).fill("wrong-" + TOKEN)
    trigger.click()
    expect(page.locator("#message")).to_contain_text("refused, HTTP 401")
    expect(history).to_contain_text("no occurrences match")

    page.get_by_label("API token", exact=True).fill(TOKEN)
    trigger.click()
    expect(page.locator("#message")).to_contain_text("accepted, HTTP 202")
    triggered = history.locator("tr[data-state]").filter(has_text="monthly-report")
    expect(triggered).to_have_count(1)
    expect(triggered.locator(".state")).to_have_text("succeeded")
    assert TOKEN not in page.url
    assert page.evaluate("sessionStorage.getItem('soloist.token')") == TOKEN

    # The token is kept for the tab: after a reload the next action is accepted at once.
    page.reload()
    expect(page.get_by_label("API token", exact=True)).to_have_value(TOKEN)


def test_pause_resume_and_retry_dead(page: Page, servers: Servers) -> None:
    """With the token, pause and resume flip a job's paused flag, and a dead occurrence
    can be retried from the failures panel."""
    page.add_init_script(f"sessionStorage.setItem('soloist.token', {TOKEN!r})")
    open_dashboard(page, servers.admin.url)
    row = job_row(page, IMG_NAME)
    row.get_by_role("button", name="pause").click()
    expect(page.locator("#message")).to_contain_text("accepted, HTTP 200")
    expect(row.locator(".badge.paused")).to_have_text("paused")
    row.get_by_role("button", name="resume").click()
    expect(row.locator(".badge.paused")).to_have_count(0)

    dead = page.locator("#failures tbody tr").filter(has_text="always-fails").first
    expect(dead.locator(".state")).to_have_text("dead")
    dead.get_by_role("button", name=re.compile("^retry")).click()
    expect(page.locator("#message")).to_contain_text("accepted, HTTP 202")


def enqueue_later(store_url: str) -> str:
    """Enqueue a task due in an hour (planned last of all: the top row of the history)."""
    enqueuer = Scheduler(store_url, instance_id="dash-enqueuer")

    @enqueuer.task
    def later(ctx: JobContext) -> None:  # never runs: cancelled first
        pass

    try:
        return enqueuer.enqueue(later, delay="1h")
    finally:
        enqueuer.close()


def test_cancel_a_scheduled_and_a_running_occurrence(page: Page, servers: Servers) -> None:
    """The cancel button of a scheduled row ends it at once (HTTP 200: dead, cancelled);
    on a running row it asks the runner (HTTP 202), which cancels the async handler
    within a heartbeat: the row ends dead (cancelled) too."""
    # (In a thread: playwright's sync API runs an event loop in this one.)
    with ThreadPoolExecutor(1) as pool:
        later_id = pool.submit(enqueue_later, servers.admin.store_url).result()
    page.add_init_script(f"sessionStorage.setItem('soloist.token', {TOKEN!r})")
    open_dashboard(page, servers.admin.url)
    message = page.locator("#message")
    row = page.locator(f'#occurrences tbody tr[data-id="{later_id}"]')
    expect(row.locator(".state")).to_have_text("scheduled")
    row.get_by_role("button", name=re.compile("^cancel")).click()
    expect(message).to_contain_text("accepted, HTTP 200 (cancelled)")
    expect(row.locator(".state")).to_have_text("dead")
    expect(row).to_contain_text("cancelled")
    expect(row.get_by_role("button")).to_have_count(1)  # retry, no cancel any more

    status, body = servers.admin.post("api/jobs/sleepy/trigger", TOKEN)
    assert status == 202, body
    page.get_by_label("Job", exact=True).select_option("sleepy")
    row = page.locator(f'#occurrences tbody tr[data-id="{body["occurrence_id"]}"]')
    expect(row.locator(".state")).to_have_text("running")
    row.get_by_role("button", name=re.compile("^cancel")).click()
    expect(message).to_contain_text("accepted, HTTP 202 (requested)")
    expect(row.locator(".state")).to_have_text("dead")
    expect(row).to_contain_text("cancelled")


def test_job_whose_name_has_a_slash_can_be_triggered(page: Page, servers: Servers) -> None:
    """A name such as ``<script>alert(1)</script>`` (it has a "/") reaches the right job."""
    page.add_init_script(f"sessionStorage.setItem('soloist.token', {TOKEN!r})")
    open_dashboard(page, servers.admin.url)
    job_row(page, SCRIPT_NAME).get_by_role("button", name="trigger").click()
    expect(page.locator("#message")).to_contain_text("accepted, HTTP 202")


def test_server_without_token_is_read_only(page: Page, servers: Servers) -> None:
    """Without SOLOIST_TOKEN the page says it is read-only and offers no usable action."""
    open_dashboard(page, servers.viewer.url)
    expect(page.locator("#instance-id")).to_have_text("dash-viewer")
    expect(page.get_by_text("read-only: set SOLOIST_TOKEN")).to_be_visible()
    expect(page.get_by_label("API token", exact=True)).to_be_hidden()
    buttons = page.locator("#jobs button")
    expect(buttons.first).to_be_visible()
    expect(page.locator("#jobs button:enabled, #failures button:enabled")).to_have_count(0)


def test_dashboard_works_under_a_prefix(page: Page, mounted: Server) -> None:
    """Mounted under /ops in a host app, the page reads and acts through /ops/ URLs only."""
    paths: list[str] = []
    page.on("request", lambda request: paths.append(request.url.split("/", 3)[3]))
    page.add_init_script(f"sessionStorage.setItem('soloist.token', {TOKEN!r})")
    open_dashboard(page, mounted.url.removesuffix("/"))  # /ops: redirected to /ops/
    expect(page.locator("#instance-id")).to_have_text("dash-mounted")
    expect(job_row(page, "tick").locator(".state")).to_have_text("succeeded")
    page.get_by_label("Job", exact=True).select_option("monthly-report")
    page.get_by_role("button", name="trigger monthly-report", exact=True).click()
    expect(page.locator("#message")).to_contain_text("accepted, HTTP 202")
    expect(page.locator("#occurrences tbody tr[data-state]")).to_have_count(1)
    outside = [path for path in paths if not path.startswith("ops")]
    assert outside == [], f"requests outside the prefix: {outside}"


def test_csp_blocks_injected_scripts_and_the_token_stays_out_of_urls(
    page: Page, servers: Servers
) -> None:
    """Under the page's CSP an injected inline script does not run, and the token is sent
    only as a header: never in a request URL, never in localStorage."""
    urls: list[str] = []
    page.on("request", lambda request: urls.append(request.url))
    page.add_init_script(f"sessionStorage.setItem('soloist.token', {TOKEN!r})")
    open_dashboard(page, servers.admin.url)
    page.evaluate(
        """() => { const s = document.createElement("script");
                   s.textContent = "window.injected = true"; document.body.append(s); }"""
    )
    assert page.evaluate("window.injected === undefined")
    page.get_by_role("button", name="trigger monthly-report", exact=True).click()
    expect(page.locator("#message")).to_contain_text("accepted, HTTP 202")
    assert page.evaluate("localStorage.length") == 0
    assert urls and not [url for url in urls if TOKEN in url]


# -- the job list at many jobs ---------------------------------------------------------------
@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, list[str]]]:
    """A server of apps/many_jobs_app.py on a store of 120 dynamic schedules."""
    workdir = tmp_path_factory.mktemp("many")
    store = f"sqlite:///{workdir / 'soloist.db'}"
    with ThreadPoolExecutor(1) as pool:  # playwright's loop runs in this thread
        names = pool.submit(fill, store, 120).result()
    server = Server("dash-many", store, workdir, TOKEN, app=MANY_APP)
    try:
        server.wait_healthy()
        yield server, names
    finally:
        server.stop()


def job_names(page: Page) -> Locator:
    return page.locator("#jobs tbody .job-name")


def test_the_job_list_pages_and_searches(page: Page, many: tuple[Server, list[str]]) -> None:
    """120 jobs: the list shows the first 50, Next and Previous move a page at a time (the
    last one has 20 and no Next), a search narrows it to the names it starts, a filter
    keeps the paused job; every change starts from the first page again."""
    server, names = many
    open_dashboard(page, server.url)
    expect(job_names(page)).to_have_text(names[:50])
    expect(page.locator("#jobs-range")).to_have_text("1\N{EN DASH}50 of 120")
    expect(page.locator("#job-counts")).to_have_text("(120, 0 paused)")
    expect(page.locator("#jobs-prev")).to_be_disabled()
    page.get_by_role("button", name="Next", exact=True).click()
    expect(job_names(page)).to_have_text(names[50:100])
    expect(page.locator("#jobs-range")).to_have_text("51\N{EN DASH}100 of 120")
    page.get_by_role("button", name="Next", exact=True).click()
    expect(job_names(page)).to_have_text(names[100:])
    expect(page.locator("#jobs-next")).to_be_disabled()
    page.get_by_role("button", name="Previous", exact=True).click()
    expect(job_names(page)).to_have_text(names[50:100])
    page.get_by_label("Search jobs").fill("tenant-11")
    expect(job_names(page)).to_have_text(names[110:120])
    expect(page.locator("#jobs-range")).to_have_text("page 1")
    expect(page.locator("#jobs-next")).to_be_disabled()
    page.get_by_label("Search jobs").fill("nobody")
    expect(page.locator("#jobs tbody")).to_contain_text("no jobs match on this page")
    page.get_by_label("Search jobs").fill("")
    assert server.post("api/jobs/tenant-077/pause", TOKEN)[0] == 200
    page.get_by_label("Paused", exact=True).select_option("true")
    expect(job_names(page)).to_have_text(["tenant-077"])
    expect(page.locator("#job-counts")).to_have_text("(120, 1 paused)")
    page.get_by_label("Paused", exact=True).select_option("")
    expect(job_names(page)).to_have_text(names[:50])

"""`tenure ui` in a real Chromium (Debian's `chromium`, driven by Playwright through
``executable_path``): a job recovered from a SIGSTOPped worker, retry-all-matching, read-only,
both prefix modes without a failed request or a console error, and live updates (issue 24).

Screenshots of every page go to ``$TENURE_UI_SCREENSHOTS`` (``docs/ui`` to refresh the ones the
README shows), else to the test's temporary directory.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from subprocess import Popen
from typing import Any

import pytest

import tenure.flow
from support.processes import run_cli, wait_for
from tenure.core.repository import JobSpec, Repository
from ui_server import StrippingProxy, ui_process
from workflow_seed import seed_workflow

pytestmark = [pytest.mark.acceptance, pytest.mark.integration]
playwright_api = pytest.importorskip("playwright.sync_api")

LEASE, HEARTBEAT, GRACE = 1.0, 0.3, 0.5
WORKER = ["worker", "--app", "acceptance_tasks:app", "--lease", str(LEASE), "--heartbeat", str(HEARTBEAT),
          "--grace", str(GRACE), "--poll-interval", "0.1", "--concurrency", "2"]
REAPER = ["reaper", "--interval", "0.2", "--grace", str(GRACE), "--heartbeat", str(HEARTBEAT),
          "--backoff-base", "0", "--backoff-max", "0"]
PAGES = {"overview": "/", "flow": "/flow", "jobs": "/jobs", "workflows": "/workflows", "dlq": "/dlq",
         "periodic": "/periodic", "workers": "/workers"}


def chromium_path() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("Debian's chromium is not installed: run `make tools` (scripts/tools/chromium.sh)")
        pytest.skip("Debian's chromium is not installed: run `make tools`")
    return found


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


class Watched:
    """A page that records console errors and failed requests."""

    def __init__(self, browser: Any, **context: Any) -> None:
        self.context = browser.new_context(viewport={"width": 1440, "height": 900}, **context)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.failed: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        # A request cut short by navigating away (ERR_ABORTED) or the event stream closing is not a failure.
        self.page.on("requestfailed", lambda r: self.failed.append(f"{r.url} {r.failure}")
                     if "/api/v1/events" not in r.url and "ERR_ABORTED" not in str(r.failure) else None)
        self.page.on("response", lambda r: self.failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def watched(browser: Any) -> Iterator[Callable[..., Watched]]:
    pages: list[Watched] = []

    def make(**context: Any) -> Watched:
        pages.append(Watched(browser, **context))
        return pages[-1]

    yield make
    for w in pages:
        w.close()


def shots_dir(tmp_path: Path) -> Path:
    target = Path(os.environ.get("TENURE_UI_SCREENSHOTS") or tmp_path / "shots")
    target.mkdir(parents=True, exist_ok=True)
    return target


def _loaded(page: Any) -> None:
    page.wait_for_function("() => !document.querySelector('#content p.muted')?.textContent.startsWith('Loading')")


def test_a_recovered_job_shows_both_attempts_and_the_refused_late_write(
        repo: Repository, cli_env: dict[str, str], spawn: Callable[..., Popen[bytes]], tmp_path: Path,
        watched: Callable[..., Watched]) -> None:
    job_id = repo.enqueue("sleepy", {"seconds": 2.5, "marker_dir": str(tmp_path)}).id
    repo.enqueue_many([])
    a = spawn(*WORKER)
    wait_for(lambda: repo.get_job(job_id)["status"] == "running", 20, "worker A to claim")  # type: ignore[index]
    os.kill(a.pid, signal.SIGSTOP)
    try:
        spawn(*REAPER)
        spawn(*WORKER)
        wait_for(lambda: repo.get_job(job_id)["attempt_count"] == 2, 30, "worker B to claim")  # type: ignore[index]
    finally:
        os.kill(a.pid, signal.SIGCONT)
    wait_for(lambda: repo.get_job(job_id)["status"] == "completed", 30, "B to complete")  # type: ignore[index]
    wait_for(lambda: any(e["event"] in ("stale_completion_rejected", "heartbeat_lost", "stale_write_rejected")
                         for e in repo.job_events(job_id)), 20, "A's refused late write")
    with ui_process(cli_env, tmp_path / "ui.log") as url:
        w = watched()
        w.page.goto(f"{url}/jobs/{job_id}")
        w.page.wait_for_selector("tr[data-attempt]")
        attempts = w.page.locator("table[data-table=attempts] tr[data-attempt]")
        assert attempts.count() == 2
        fences = {attempts.nth(i).get_attribute("data-fence") for i in range(2)}
        assert len(fences) == 2 and "" not in fences, fences
        assert [attempts.nth(i).get_attribute("data-attempt") for i in range(2)] == ["1", "2"]
        assert "reaped_due_to_expired_lease" in attempts.nth(0).inner_text()
        assert "completed" in attempts.nth(1).inner_text()
        assert w.page.locator("table[data-table=stale-writes] tr[data-stale-write]").count() >= 1
        assert w.page.locator("table[data-table=reaps] tr[data-reap]").count() == 1
        w.page.screenshot(path=str(shots_dir(tmp_path) / "job.png"), full_page=True)
        assert not w.errors and not w.failed, (w.errors, w.failed)


def test_retry_all_matching_changes_exactly_the_matched_set(repo: Repository, cli_env: dict[str, str],
                                                            tmp_path: Path, watched: Callable[..., Watched]) -> None:
    wanted = [repo.enqueue("resize", {"image": i}, queue="images").id for i in range(4)]
    other = [repo.enqueue("email", {"to": i}, queue="mail").id for i in range(2)]
    repo.cancel(wanted + other, "test")
    with ui_process(cli_env, tmp_path / "ui.log") as url:
        w = watched()
        w.page.goto(f"{url}/jobs?task=resize&status=cancelled")
        w.page.wait_for_selector("tr[data-job-id]")
        assert w.page.locator("tr[data-job-id]").count() == 4
        w.page.click("[data-action=retry-matching]")
        w.page.wait_for_selector("dialog[open] [data-confirm-text]")
        assert "Retry 4 jobs?" in w.page.inner_text("[data-confirm-text]")
        w.page.click("[data-confirm=yes]")
        w.page.wait_for_selector("#notice.ok")
        assert "changed 4 of 4 matched" in w.page.inner_text("#notice")
        assert {repo.get_job(i)["status"] for i in wanted} == {"pending"}  # type: ignore[index]
        assert {repo.get_job(i)["status"] for i in other} == {"cancelled"}  # type: ignore[index]
        # The selected rows only: cancel two of the four, now pending again.
        w.page.goto(f"{url}/jobs?task=resize")
        w.page.wait_for_selector("tr[data-job-id]")
        for job_id in wanted[:2]:
            w.page.check(f'tr[data-job-id="{job_id}"] input[data-select]')
        w.page.click("[data-action=cancel-selected]")
        w.page.wait_for_selector("dialog[open] [data-confirm-text]")
        assert "Cancel 2 jobs?" in w.page.inner_text("[data-confirm-text]")
        w.page.click("[data-confirm=yes]")
        w.page.wait_for_selector("#notice.ok")
        assert [repo.get_job(i)["status"] for i in wanted] == ["cancelled", "cancelled", "pending", "pending"]  # type: ignore[index]
        w.page.screenshot(path=str(shots_dir(tmp_path) / "jobs.png"), full_page=True)
        assert not w.errors and not w.failed, (w.errors, w.failed)


def test_the_flow_key_filter_and_the_job_page_show_the_key(repo: Repository, cli_env: dict[str, str],
                                                          tmp_path: Path, watched: Callable[..., Watched]) -> None:
    keyed = [repo.enqueue("bill", {"n": i}, flow_key="tenant:acme").id for i in range(2)]
    repo.enqueue("bill", {"n": 9}, flow_key="tenant:other")
    repo.enqueue("bill", {"n": 10})
    with ui_process(cli_env, tmp_path / "ui.log") as url:
        w = watched()
        w.page.goto(f"{url}/jobs")
        w.page.wait_for_selector("tr[data-job-id]")
        assert w.page.locator("tr[data-job-id]").count() == 4
        w.page.fill('[data-filter="flow_key"]', "tenant:acme")
        w.page.click("form[data-filters] button[type=submit]")
        w.page.wait_for_function("() => document.querySelectorAll('tr[data-job-id]').length === 2")
        assert "flow_key=tenant%3Aacme" in w.page.url
        assert sorted(int(r.get_attribute("data-job-id")) for r in w.page.locator("tr[data-job-id]").all()) == keyed
        w.page.goto(f"{url}/jobs/{keyed[0]}")
        w.page.wait_for_selector("dl.facts dd")
        facts = dict(zip(w.page.locator("dl.facts dt").all_inner_texts(), w.page.locator("dl.facts dd").all_inner_texts()))
        assert facts["flow key"] == "tenant:acme"
        assert not w.errors and not w.failed, (w.errors, w.failed)


def test_the_flow_page_shows_a_key_and_a_rate_limit_and_an_admin_changes_a_weight(
        repo: Repository, cli_env: dict[str, str], tmp_path: Path, watched: Callable[..., Watched]) -> None:
    repo.enqueue_many([JobSpec("bill", queue="tenants", flow_key="tenant:acme") for _ in range(3)]
                      + [JobSpec("bill", queue="tenants", flow_key="tenant:b")])
    tenure.flow.set_per_key_running(repo.conn, "tenants", 1, schema=repo.schema, requested_by="test")
    tenure.flow.set_rate_limit(repo.conn, "smtp", 5, burst=10, schema=repo.schema, requested_by="test")
    with ui_process(cli_env, tmp_path / "ui.log") as url:
        w = watched()
        w.page.goto(f"{url}/")
        w.page.click("[data-nav=flow]")
        row = w.page.locator('section[data-flow-queue=tenants] tr[data-flow-key="tenant:acme"]')
        row.wait_for()
        cells = row.locator("td").all_inner_texts()
        assert cells[:6] == ["tenant:acme", "0", "1 queue", "1", "3", "2"], cells
        rate = w.page.locator("tr[data-rate-limit=smtp] td").all_inner_texts()
        assert rate[:4] == ["smtp", "5", "10", "no"], rate
        row.locator("[data-action=flow-key-edit]").click()
        form = w.page.locator("form[data-flow-form=key]")
        assert (form.locator("[data-field=queue]").input_value(), form.locator("[data-field=key]").input_value()) == (
            "tenants", "tenant:acme")
        form.locator("[data-field=weight]").fill("3")
        form.locator("[data-action=flow-key-set]").click()
        w.page.wait_for_selector("#notice.ok")
        assert "tenant:acme: weight 3" in w.page.inner_text("#notice")
        w.page.wait_for_selector('tr[data-flow-key="tenant:acme"] td[data-weight="3"]')
        (tenants,) = tenure.flow.flow_status(repo.conn, schema=repo.schema)
        assert {k["flow_key"]: k.get("weight") for k in tenants.keys}["tenant:acme"] == 3
        (change, *_) = tenure.flow.flow_changes(repo.conn, schema=repo.schema)
        assert (change["changed_by"], change["flow_key"], change["setting"]) == ("ui:anonymous", "tenant:acme", "weight")
        assert not w.errors and not w.failed, (w.errors, w.failed)
        # Bad input: the server's one message in the notice (a 400, which the console reports), and nothing changes.
        form.locator("[data-field=weight]").fill("5000")
        form.locator("[data-field=weight]").evaluate("e => e.removeAttribute('max')")
        form.locator("[data-action=flow-key-set]").click()
        w.page.wait_for_selector("#notice.error")
        assert "weight" in w.page.inner_text("#notice")
        assert tenure.flow.flow_changes(repo.conn, schema=repo.schema)[0]["id"] == change["id"]
        assert [f.split()[0] for f in w.failed] == ["400"] and len(w.errors) == 1 and "400" in w.errors[0]
        # A rate limit: Edit fills its form, Save changes it, Delete asks first.
        w.page.click("tr[data-rate-limit=smtp] [data-action=rate-limit-edit]")
        rate_form = w.page.locator("form[data-flow-form=rate]")
        assert rate_form.locator("[data-field=name]").input_value() == "smtp"
        rate_form.locator("[data-field=per_second]").fill("7")
        rate_form.locator("[data-action=rate-limit-set]").click()
        w.page.wait_for_selector("tr[data-rate-limit=smtp] td[data-per-second='7']")
        assert [(r["per_second"], r["burst"]) for r in tenure.flow.rate_status(repo.conn, schema=repo.schema)] == [(7, 10)]
        w.page.click("tr[data-rate-limit=smtp] [data-action=rate-limit-delete]")
        w.page.click("dialog[open] [data-confirm=yes]")
        w.page.wait_for_selector("[data-empty=rate-limits]")
        assert tenure.flow.rate_status(repo.conn, schema=repo.schema) == []


def test_read_only_renders_no_action_and_a_direct_post_gets_403(repo: Repository, cli_env: dict[str, str],
                                                                 tmp_path: Path, watched: Callable[..., Watched]) -> None:
    job_id = repo.enqueue("email", {}).id
    repo.cancel([repo.enqueue("email", {}).id], "test")
    with ui_process(cli_env, tmp_path / "ui.log", "--read-only") as url:
        w = watched()
        for path in [*PAGES.values(), f"/jobs/{job_id}"]:
            w.page.goto(url + path)
            _loaded(w.page)
            w.page.wait_for_timeout(300)
            assert w.page.locator("[data-action]").count() == 0, path
            assert w.page.locator("[data-read-only]").count() == 1
        response = w.page.request.post(f"{url}/api/v1/jobs/{job_id}/cancel", data={})
        assert response.status == 403 and "read-only" in response.json()["error"]
        assert repo.get_job(job_id)["status"] == "pending"  # type: ignore[index]
        assert not w.errors, w.errors


def _visit_every_page(w: Watched, base: str, job_id: int) -> None:
    for path in [*PAGES.values(), f"/jobs/{job_id}"]:
        w.page.goto(base + path)
        _loaded(w.page)
        w.page.wait_for_timeout(400)
        for href in w.page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))"):
            assert href.startswith("/tenure/") or href.startswith("data:"), (path, href)


def test_under_a_prefix_in_both_proxy_modes_no_request_fails(repo: Repository, cli_env: dict[str, str],
                                                             tmp_path: Path, watched: Callable[..., Watched]) -> None:
    job_id = repo.enqueue("email", {"n": 1}).id
    with ui_process(cli_env, tmp_path / "prefixed.log", "--prefix", "/tenure") as url:
        w = watched()
        _visit_every_page(w, url, job_id)
        w.page.click("[data-nav=jobs]")
        w.page.wait_for_selector(f'tr[data-job-id="{job_id}"]')
        assert not w.errors and not w.failed, (w.errors, w.failed)
    with ui_process(cli_env, tmp_path / "plain.log") as url, StrippingProxy(url, "/tenure") as proxy:
        w = watched()
        _visit_every_page(w, proxy.url, job_id)
        w.page.click(f'a[href="/tenure/jobs/{job_id}"]') if w.page.locator(f'a[href="/tenure/jobs/{job_id}"]').count() \
            else w.page.goto(f"{proxy.url}/jobs/{job_id}")
        w.page.click("[data-action=cancel]")
        w.page.wait_for_selector("#notice.ok")
        assert repo.get_job(job_id)["status"] == "cancelled", "a mutation through the proxy (CSRF, origin) works"  # type: ignore[index]
        assert proxy.requests > 5
        assert not w.errors and not w.failed, (w.errors, w.failed)


def test_a_job_enqueued_from_the_cli_appears_without_a_reload(repo: Repository, cli_env: dict[str, str],
                                                              tmp_path: Path, watched: Callable[..., Watched]) -> None:
    repo.enqueue("email", {"n": 0})
    with ui_process(cli_env, tmp_path / "ui.log") as url:
        w = watched()
        w.page.goto(f"{url}/jobs")
        w.page.wait_for_selector("[data-live-state]:has-text('streaming')")
        w.page.evaluate("window.__noReload = true")
        r = run_cli(cli_env, "enqueue", "email", "--payload", '{"n": 1}')
        enqueued_at = time.monotonic()
        job_id = int(r.stdout.strip().split()[-1])
        w.page.wait_for_selector(f'tr[data-job-id="{job_id}"]', timeout=5000)
        appeared_after = time.monotonic() - enqueued_at
        assert w.page.evaluate("window.__noReload") is True, "the page was not reloaded"
        print(f"job {job_id} appeared {appeared_after * 1000:.0f} ms after `tenure enqueue` returned")
        # Paused: a new job stays off the page until live updates resume.
        w.page.click("[data-live-toggle]")
        paused_id = int(run_cli(cli_env, "enqueue", "email", "--payload", '{"n": 2}').stdout.strip().split()[-1])
        w.page.wait_for_timeout(1500)
        assert w.page.locator(f'tr[data-job-id="{paused_id}"]').count() == 0
        w.page.click("[data-live-toggle]")
        w.page.wait_for_selector(f'tr[data-job-id="{paused_id}"]', timeout=5000)
        assert not w.errors and not w.failed, (w.errors, w.failed)


CHARTS = ["throughput", "failures", "wait", "depth"]


def test_the_charts_show_and_grow_when_a_job_completes_without_a_reload(
        repo: Repository, cli_env: dict[str, str], tmp_path: Path, watched: Callable[..., Watched]) -> None:
    repo.enqueue("email", {"n": 0}, queue="mail")
    with ui_process(cli_env, tmp_path / "ui.log") as url:
        w = watched()
        w.page.goto(f"{url}/")
        w.page.wait_for_selector("[data-live-state]:has-text('streaming')")
        w.page.wait_for_selector("figure[data-chart=throughput] svg[data-chart=throughput]")
        assert w.page.eval_on_selector_all("figure[data-chart]", "els => els.map(e => e.dataset.chart)") == CHARTS
        assert w.page.eval_on_selector_all("svg[data-chart]", "els => els.map(e => e.dataset.chart)") == CHARTS
        assert w.page.get_attribute("figure[data-chart=throughput]", "data-total") == "0"
        assert w.page.locator("figure[data-chart=throughput] rect[data-bucket]").count() == 0
        w.page.evaluate("window.__noReload = true")
        claimed = repo.claim("w", ["mail"], 1, 30)
        assert repo.complete_many("w", [(j.id, j.lock_token) for j in claimed]) == {claimed[0].id: True}
        done_at = time.monotonic()
        w.page.wait_for_selector("figure[data-chart=throughput][data-total='1']", timeout=8000)
        print(f"the throughput chart grew {(time.monotonic() - done_at) * 1000:.0f} ms after the completion")
        assert w.page.locator("figure[data-chart=throughput] rect[data-bucket]").count() == 1
        assert w.page.evaluate("window.__noReload") is True, "the page was not reloaded"
        # The queue's own page: the same four charts, of that queue; the window can change.
        w.page.click("a[data-queue-link=mail]")
        w.page.wait_for_selector("figure[data-chart=throughput][data-total='1']")
        assert w.page.locator("dl[data-queue-facts=mail]").count() == 1
        assert w.page.eval_on_selector_all("figure[data-chart]", "els => els.map(e => e.dataset.chart)") == CHARTS
        w.page.select_option("select[data-window]", "7d")
        w.page.wait_for_selector("[data-chart-caption]:has-text('buckets of 1 h')")
        assert "window=7d" in w.page.url
        assert w.page.get_attribute("figure[data-chart=throughput]", "data-total") == "1"
        assert not w.errors and not w.failed, (w.errors, w.failed)


def _chart_history(repo: Repository) -> None:
    """An hour of history for the screenshots: completions, failures, waits and depth samples."""
    import math
    ids = [repo.enqueue("send_invoice_email", {"invoice_id": 5000 + i}, queue="emails").id for i in range(240)]
    claimed = repo.claim("w-demo-1", ["emails"], len(ids), 30)
    repo.complete_many("w-demo-1", [(j.id, j.lock_token) for j in claimed])
    s = f'"{repo.schema}"'
    with repo.conn.cursor() as cur:
        for i, job_id in enumerate(ids):
            ago = 3540 * (i / len(ids)) ** 0.8 + 20
            wait = 0.05 + 0.4 * (1 + math.sin(i / 9)) + (6.0 if i % 23 == 0 else 0.0)
            cur.execute(f"UPDATE {s}.job_history SET completed_at = now() - make_interval(secs => %(a)s), "
                        "started_at = now() - make_interval(secs => %(a)s + 0.8), "
                        "available_at = now() - make_interval(secs => %(a)s + 0.8 + %(w)s) WHERE id = %(id)s",
                        {"a": ago, "w": wait, "id": job_id})
        for k in range(18):
            cur.execute(f"INSERT INTO {s}.job_events (job_id, queue_name, event, created_at) VALUES "
                        "(%s, 'billing', %s, now() - make_interval(secs => %s))",
                        (ids[k], "dead_lettered" if k % 6 == 0 else "retry_scheduled", 3400 - k * 170 - (k % 3) * 40))
        cur.execute(f"INSERT INTO {s}.queue_depth_samples SELECT date_trunc('minute', now()) - make_interval(mins => m), q, "
                    "round(40 + 30 * sin(m / 8.0) + (CASE WHEN q = 'emails' THEN 25 ELSE 0 END))::bigint, "
                    "CASE WHEN m BETWEEN 20 AND 32 THEN 6 ELSE 0 END, (4 + m % 5)::bigint "
                    "FROM generate_series(1, 59) m, unnest(ARRAY['emails', 'billing']) q")


def _flow_settings(repo: Repository) -> None:
    """Keys with a queue limit, one key's own limit and weight, and two rate limits, for the Flow page."""
    repo.enqueue_many([JobSpec("send_invoice_email", {"invoice_id": 4300 + i}, queue="emails",
                               flow_key=f"tenant:{('acme', 'acme', 'acme', 'globex', 'initech')[i % 5]}")
                       for i in range(14)])
    schema = repo.schema
    tenure.flow.set_per_key_running(repo.conn, "emails", 2, schema=schema, requested_by="ui:ada")
    tenure.flow.set_key_running(repo.conn, "emails", "tenant:globex", 4, schema=schema, requested_by="ui:ada")
    tenure.flow.set_key_weight(repo.conn, "emails", "tenant:acme", 3, schema=schema, requested_by="ui:ada")
    tenure.flow.set_rate_limit(repo.conn, "smtp", 20, burst=40, schema=schema, requested_by="cli:ops@node-a")
    tenure.flow.set_rate_limit(repo.conn, "partner-api", 0.5, per_key=True, schema=schema, requested_by="ui:ada")


def test_a_workflow_page_draws_every_step_and_links_steps_and_jobs(repo: Repository, cli_env: dict[str, str],
                                                                   tmp_path: Path, watched: Callable[..., Watched]) -> None:
    """A diamond and a fan-out of 8 in every status: one node per step with its job's status; a
    node opens the step's job page, whose workflow link leads back."""
    wid, ids = seed_workflow(repo)
    with ui_process(cli_env, tmp_path / "ui.log") as url:
        w = watched()
        w.page.goto(f"{url}/workflows/{wid}")
        w.page.wait_for_selector("[data-workflow-graph] svg a[data-step-id]")
        nodes = w.page.locator("[data-workflow-graph] a[data-step-id]")
        drawn = {int(nodes.nth(i).get_attribute("data-step-id")): nodes.nth(i).get_attribute("data-status")
                 for i in range(nodes.count())}
        assert drawn == {i: repo.get_job(i)["status"] for i in ids.values()}  # type: ignore[index]
        w.page.screenshot(path=str(shots_dir(tmp_path) / "workflow.png"), full_page=True)
        w.page.click(f"[data-workflow-graph] a[data-step-id='{ids['load']}']")
        w.page.wait_for_selector("[data-workflow-link]")
        assert w.page.url.endswith(f"/jobs/{ids['load']}")
        w.page.click("[data-workflow-link]")
        w.page.wait_for_selector("[data-workflow-graph] svg")
        assert w.page.url.endswith(f"/workflows/{wid}")
        assert not w.errors and not w.failed, (w.errors, w.failed)


def test_screenshots_of_every_page(repo: Repository, cli_env: dict[str, str], tmp_path: Path,
                                   watched: Callable[..., Watched]) -> None:
    from datetime import datetime, timezone
    for i in range(6):
        repo.enqueue("send_invoice_email", {"invoice_id": 4180 + i}, queue="emails", priority=i % 3)
    dead = [repo.enqueue("charge_card", {"invoice_id": 4200 + i, "card_number": "4111"}, queue="billing").id
            for i in range(3)]
    with repo.conn.cursor() as cur:
        cur.execute(f'UPDATE "{repo.schema}".jobs SET status = \'failed\', failed_at = now(), attempt_count = 5, '
                    "last_error_code = 'card_declined' WHERE id = ANY(%s)", (dead,))
    repo.periodic_init(name="nightly-report", task="report", queue="default", cron="0 3 * * *", timezone="Europe/Paris",
                       slot=datetime(2026, 12, 1, 2, 0, tzinfo=timezone.utc))
    repo.worker_register("w-demo-1", host="node-a", pid=4242, queues=["emails", "billing"], concurrency=8,
                         heartbeat_seconds=5, version="0.1.0", lease_seconds=30)
    _chart_history(repo)
    _flow_settings(repo)
    target = shots_dir(tmp_path)
    shots = {**PAGES, "queue": "/queues/emails"}
    with ui_process(cli_env, tmp_path / "ui.log") as url:
        w = watched()
        for name, path in shots.items():
            w.page.goto(url + path)
            _loaded(w.page)
            if name in ("overview", "queue"):
                w.page.wait_for_selector("figure[data-chart=depth] svg")
            w.page.wait_for_timeout(500)
            w.page.screenshot(path=str(target / f"{name}.png"), full_page=True)
        assert all((target / f"{name}.png").stat().st_size > 10_000 for name in shots)
        assert not w.errors and not w.failed, (w.errors, w.failed)

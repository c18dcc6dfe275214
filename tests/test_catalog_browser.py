"""The catalog in a real browser: Debian's chromium driven by Selenium against a running Airflow
(api-server, scheduler, dag-processor, triggerer on SQLite) with SimpleAuthManager users admin,
user and viewer (not all-admins). Saves the screenshot README shows: docs/catalog.png under
`make screenshot`, .cache/catalog.png under `make test` (which leaves the tree clean)."""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.request
from datetime import date

import pytest

from devtools.sample_data import seed_day
from devtools.servers import ServerStartError
from helpers import LOG_TEMPLATE, ROOT, airflow_with_log_job, engine_clients

JOB = "web"
DAG = f"s3_archive__{JOB}"
PASSWORDS = {"admin": "admin-pw", "user": "user-pw", "viewer": "viewer-pw"}
ARCHIVED = [date(2026, 3, 2), date(2026, 3, 3), date(2026, 3, 5)]
MISSING = date(2026, 3, 4)
SCREENSHOT = ROOT / ("docs" if os.environ.get("S3ARCH_WRITE_SCREENSHOT") == "1" else ".cache") / "catalog.png"


def _chromium():
    chrome = shutil.which("chromium")
    driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    if not chrome or not shutil.which(driver):
        pytest.fail("chromium and chromium-driver are needed (apt-get install chromium chromium-driver)",
                    pytrace=False)
    return chrome, driver


@pytest.fixture(scope="module")
def stack(minio, tmp_path_factory):
    home = tmp_path_factory.mktemp("airflow-catalog-ui")
    airflow, s3, src, dst = airflow_with_log_job(minio, home, JOB, start_date="2026-03-01",
                                                 schedule=None, retries=0)
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps(PASSWORDS))
    airflow.env.update({"AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
                        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,user:user,viewer:viewer",
                        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
                        # no scheduled scrub competing for this loaded machine's two cores
                        "S3ARCH_SCRUB_SCHEDULE": "none"})
    from s3arch.archive import archive_prefix
    from s3arch.jobs import load_jobs

    job = load_jobs(airflow.env["S3ARCH_JOBS_FILE"])[JOB]
    clients = engine_clients(minio)
    for day in [*ARCHIVED, MISSING]:
        seed_day(s3, src, LOG_TEMPLATE, day, files_per_hour=1, lines_per_file=5)
    for day in ARCHIVED:
        archive_prefix(job.spec_for(job.prefix_for(day)), clients)
    try:
        airflow.start()
    except ServerStartError as exc:
        pytest.fail(f"Airflow could not start: {exc}", pytrace=False)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not _dags_ready(airflow):
            time.sleep(1)
        yield airflow
    finally:
        airflow.stop()


def _token(airflow, role: str) -> str:
    request = urllib.request.Request(f"{airflow.api_url}/auth/token", method="POST",
                                     data=json.dumps({"username": role, "password": PASSWORDS[role]}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["access_token"]


def _dags_ready(airflow) -> bool:
    try:
        token = _token(airflow, "admin")
        request = urllib.request.Request(f"{airflow.api_url}/api/v2/dags/s3_restore__{JOB}",
                                         headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=10):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chrome, driver = _chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = chrome
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1500,1000"):
        options.add_argument(arg)
    session = webdriver.Chrome(service=Service(driver), options=options)
    yield session
    session.quit()


def _login(browser, airflow, role):
    browser.get(f"{airflow.api_url}/api/v2/monitor/health")
    browser.delete_all_cookies()
    browser.add_cookie({"name": "_token", "value": _token(airflow, role), "path": "/"})


def _open_catalog(browser, airflow, via_nav: bool = False):
    """The catalog as the UI shows it: the plugin's page in Airflow's frame, entered from the
    navigation (Browse > Archive catalog) or by its route."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    if via_nav:
        browser.get(f"{airflow.api_url}/")
        # On a loaded machine the UI's menu can swallow a click made while it still renders:
        # open it again until the navigation happened (the page must be reached through it).
        deadline = time.monotonic() + 180
        while not browser.current_url.rstrip("/").endswith("/plugin/s3arch-catalog"):
            assert time.monotonic() < deadline, f"the navigation did not open the catalog: {browser.current_url}"
            WebDriverWait(browser, 60).until(EC.element_to_be_clickable(
                (By.XPATH, "//nav//button[normalize-space()='Browse'] | //button[normalize-space()='Browse']"))).click()
            try:
                WebDriverWait(browser, 30).until(EC.element_to_be_clickable(
                    (By.XPATH, "//*[@role='menuitem'][normalize-space()='Archive catalog'] | "
                               "//a[normalize-space()='Archive catalog']"))).click()
                WebDriverWait(browser, 30).until(
                    lambda b: b.current_url.rstrip("/").endswith("/plugin/s3arch-catalog"))
            except TimeoutException:
                continue
    else:
        browser.get(f"{airflow.api_url}/plugin/s3arch-catalog")
    frame = WebDriverWait(browser, 60).until(EC.presence_of_element_located((By.CSS_SELECTOR, "iframe")))
    browser.switch_to.frame(frame)
    WebDriverWait(browser, 60).until(lambda b: b.execute_script("return document.body.dataset.loaded === 'true'"))


def _cell(browser, day: date):
    from selenium.webdriver.common.by import By

    return browser.find_element(By.CSS_SELECTOR, f'button[data-day="{day.isoformat()}"]')


def test_user_sees_days_and_restores_one(stack, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _login(browser, stack, "user")
    started = time.monotonic()
    _open_catalog(browser, stack, via_nav=True)
    print(f"\n[catalog-ui] page with data in {time.monotonic() - started:.1f}s")
    for day in ARCHIVED:
        assert "s-archived" in _cell(browser, day).get_attribute("class")
    assert "s-missing" in _cell(browser, MISSING).get_attribute("class")
    _cell(browser, ARCHIVED[0]).click()
    assert "logs/2026/03/02/" in browser.find_element(By.ID, "detail").text
    restore = browser.find_element(By.ID, "restore")
    assert restore.is_enabled()
    restore.click()
    state = WebDriverWait(browser, 240, poll_frequency=2).until(
        lambda b: (lambda e: e and e[0].get_attribute("data-run-state") in ("success", "failed") and e[0])(
            b.find_elements(By.CSS_SELECTOR, "#runs [data-run-state]")))
    assert state.get_attribute("data-run-state") == "success", browser.find_element(By.ID, "runs").text
    print(f"[catalog-ui] restore run green {time.monotonic() - started:.1f}s after opening the page")
    _cell(browser, MISSING).click()  # the missing day selected, for the picture
    browser.switch_to.default_content()
    SCREENSHOT.parent.mkdir(exist_ok=True)
    browser.save_screenshot(str(SCREENSHOT))


def test_viewer_buttons_are_disabled_and_the_api_says_403(stack, browser):
    from selenium.webdriver.common.by import By

    _login(browser, stack, "viewer")
    _open_catalog(browser, stack)
    _cell(browser, ARCHIVED[0]).click()
    assert not browser.find_element(By.ID, "restore").is_enabled()
    _cell(browser, MISSING).click()
    assert not browser.find_element(By.ID, "archive").is_enabled()
    assert not browser.find_element(By.ID, "dryrun").is_enabled()
    status = browser.execute_async_script("""
        const done = arguments[arguments.length - 1];
        fetch('/api/v2/dags/s3_archive__web/dagRuns', {method: 'POST', credentials: 'same-origin',
              headers: {'Content-Type': 'application/json'},
              body: JSON.stringify({logical_date: null, conf: {prefixes: ['logs/2026/03/04/']}})})
          .then((r) => done(r.status), (e) => done(String(e)));""")
    assert status == 403


def test_a_dags_catalog_tab_opens_its_job_or_says_the_dag_is_not_an_archive_jobs(stack, browser):
    """The tab's page (``?dag_id={DAG_ID}``): the scrub DAG's opens its job; another DAG's
    says so instead of showing the first job."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _login(browser, stack, "viewer")
    browser.get(f"{stack.api_url}/s3arch-catalog/?dag_id=s3_scrub__{JOB}")
    WebDriverWait(browser, 60).until(lambda b: b.execute_script("return document.body.dataset.loaded === 'true'"))
    assert "s-archived" in _cell(browser, ARCHIVED[0]).get_attribute("class")
    browser.get(f"{stack.api_url}/s3arch-catalog/?dag_id=some_other_dag")
    note = WebDriverWait(browser, 60).until(lambda b: b.find_elements(By.ID, "not-ours"))[0]
    assert note.text == "some_other_dag is not an archive job's DAG; choose a job above."
    assert not browser.find_elements(By.CSS_SELECTOR, "button.cell")

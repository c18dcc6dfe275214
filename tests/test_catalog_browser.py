"""The catalog in a real browser: Debian's chromium driven by Selenium against a running Airflow
(api-server, scheduler, dag-processor, triggerer on SQLite) with SimpleAuthManager users admin,
user and viewer (not all-admins), each signed in through SimpleAuthManager's sign-in page with
the password the stack's passwords file holds. Keyboard and the UI's dark mode are tried in the
same browser on the same stack. Saves the screenshot README shows: docs/catalog.png under
`make screenshot`, .cache/catalog.png under `make test` (which leaves the tree clean)."""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.request
from datetime import date, datetime, timezone

import pytest

from devtools.inventory_reports import write_report
from devtools.sample_data import seed_day
from devtools.servers import ServerStartError
from helpers import LOG_TEMPLATE, ROOT, airflow_with_log_job, engine_clients


pytestmark = pytest.mark.slow  # chromium driven by Selenium


JOB = "web"
DAG = f"s3_archive__{JOB}"
PASSWORDS = {"admin": "admin-pw", "user": "user-pw", "viewer": "viewer-pw"}
ARCHIVED = [date(2026, 3, 2), date(2026, 3, 3), date(2026, 3, 5)]
MISSING = date(2026, 3, 4)
# Days the job's S3 Inventory report holds objects of that are not archived: the missing day,
# and one before the job's start (outside the calendar: only the inventory knows it).
INVENTORY_ONLY = date(2026, 2, 27)
# A button of the UI's navigation bar, by its label ("Browse", "User").
_NAV_BUTTON = "//nav//button[normalize-space()='{0}'] | //button[normalize-space()='{0}']"
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
    from s3arch.ops.jobs import load_jobs

    job = load_jobs(airflow.env["S3ARCH_JOBS_FILE"])[JOB]
    clients = engine_clients(minio)
    for day in [*ARCHIVED, MISSING]:
        seed_day(s3, src, LOG_TEMPLATE, day, files_per_hour=1, lines_per_file=5)
    for day in ARCHIVED:
        archive_prefix(job.spec_for(job.prefix_for(day)), clients)
    _add_inventory(s3, airflow.env["S3ARCH_JOBS_FILE"], src, [*ARCHIVED, MISSING, INVENTORY_ONLY])
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


def _add_inventory(s3, jobs_file: str, src: str, days: list[date]) -> None:
    """An S3 Inventory report of the source made now, two objects a day (the report's rows, not
    the source's), named by the job as its ``inventory``."""
    import uuid

    import yaml

    inv = f"{JOB}-inv-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=inv)
    location = f"inventories/{src}/daily/"
    write_report(s3, inv, location, src, [(f"{d:logs/%Y/%m/%d}/{n}.log", 1024) for d in days for n in (1, 2)],
                 created=datetime.now(timezone.utc))
    jobs = yaml.safe_load(open(jobs_file))
    jobs["jobs"][JOB]["inventory"] = f"s3://{inv}/{location}"
    open(jobs_file, "w").write(yaml.safe_dump(jobs, sort_keys=False))


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
    """Sign in as a person does: open Airflow with no session, get SimpleAuthManager's sign-in
    page (its React app under /auth/), type the user name and the password the stack's passwords
    file holds, press "Sign in", and land back in the UI with the session cookie it set."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{airflow.api_url}/api/v2/monitor/health")  # on the origin, to drop its cookies
    browser.delete_all_cookies()
    browser.get(f"{airflow.api_url}/")
    name = WebDriverWait(browser, 120).until(EC.element_to_be_clickable((By.NAME, "username")))
    assert "/auth/login" in browser.current_url, browser.current_url
    assert "Sign into Airflow" in browser.find_element(By.TAG_NAME, "body").text
    name.send_keys(role)
    browser.find_element(By.NAME, "password").send_keys(PASSWORDS[role])
    WebDriverWait(browser, 30).until(EC.element_to_be_clickable(
        (By.XPATH, "//button[@type='submit'][normalize-space()='Sign in']"))).click()
    WebDriverWait(browser, 120).until(
        lambda b: "/auth/login" not in b.current_url and b.get_cookie("_token"),
        f"signing in as {role} did not leave the sign-in page")
    # The UI came up (its navigation) for that user (who the UI's user menu names, from /ui/auth/me).
    WebDriverWait(browser, 120).until(EC.presence_of_element_located((By.XPATH, _NAV_BUTTON.format("Browse"))))
    me = browser.execute_async_script("""
        const done = arguments[arguments.length - 1];
        fetch('/ui/auth/me', {credentials: 'same-origin'}).then((r) => r.ok ? r.json() : {status: r.status})
          .then(done, (e) => done({error: String(e)}));""")
    assert me.get("username") == role, me


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
                (By.XPATH, _NAV_BUTTON.format("Browse")))).click()
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


def test_the_days_the_inventory_knows_that_are_not_archived_are_listed_and_marked(stack, browser):
    from selenium.webdriver.common.by import By

    _login(browser, stack, "viewer")
    _open_catalog(browser, stack)
    panel = browser.find_element(By.ID, "inventory")
    assert panel.is_displayed()
    assert browser.find_element(By.ID, "inventory-summary").text == "2 day(s) not archived, 4 objects"
    listed = [li.get_attribute("data-inventory-day") for li in panel.find_elements(By.CSS_SELECTOR, "li")]
    assert listed == [INVENTORY_ONLY.isoformat(), MISSING.isoformat()]
    assert "inv" in _cell(browser, MISSING).get_attribute("class").split()
    assert "inv" not in _cell(browser, ARCHIVED[0]).get_attribute("class").split()  # in the report, but archived
    _cell(browser, MISSING).click()
    assert "2 objects, 2.0 KiB: not archived" in browser.find_element(By.ID, "detail").text


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


def _keyboard_state(browser) -> dict:
    """What a keyboard user sees: the focused day, the day the details panel shows, the selection."""
    return browser.execute_script("""
        const a = document.activeElement, b = document.querySelector('#detail b');
        return {focused: a && a.dataset ? (a.dataset.day || a.tagName) : null, detail: b ? b.textContent : null,
                detail_text: document.getElementById('detail').innerText,
                selected: [...document.querySelectorAll('button.cell.sel')].map((c) => c.dataset.day),
                selinfo: document.getElementById('selinfo').textContent};""")


def _press(browser, key, expect_focus: str, shift: bool = False) -> dict:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    chain = ActionChains(browser)
    if shift:
        chain.key_down(Keys.SHIFT).send_keys(key).key_up(Keys.SHIFT)
    else:
        chain.send_keys(key)
    chain.perform()
    state = _keyboard_state(browser)
    assert state["focused"] == expect_focus, (key, state)
    return state


def _colours(browser) -> dict:
    """The page's computed colours: its background and text, a panel's, an empty day's."""
    return browser.execute_script("""
        const c = (el, p) => getComputedStyle(el)[p];
        const empty = document.querySelector('button.cell.s-empty') || document.querySelector('i.sw.s-empty');
        return {dark_class: document.documentElement.classList.contains('dark'),
                background: c(document.body, 'backgroundColor'), text: c(document.body, 'color'),
                panel: c(document.getElementById('detail'), 'backgroundColor'), empty: c(empty, 'backgroundColor')};""")


# The catalog's palettes (catalog_page.py's :root and html.dark), as computed colours.
LIGHT = {"dark_class": False, "background": "rgb(255, 255, 255)", "text": "rgb(26, 32, 44)",
         "panel": "rgb(246, 248, 250)", "empty": "rgb(229, 231, 235)"}
DARK = {"dark_class": True, "background": "rgb(17, 20, 24)", "text": "rgb(230, 233, 238)",
        "panel": "rgb(26, 31, 38)", "empty": "rgb(42, 47, 55)"}


def _set_appearance(browser, mode: str):
    """Choose the UI's appearance the way a person does: User menu > Appearance > ``mode`` (the
    UI then sets next-themes' ``dark`` class on its <html>, which the catalog's frame follows)."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    browser.switch_to.default_content()
    want_dark = mode == "Dark Mode"
    deadline = time.monotonic() + 180
    while browser.execute_script("return document.documentElement.classList.contains('dark')") != want_dark:
        assert time.monotonic() < deadline, f"the user menu did not switch the UI to {mode}"
        try:  # a menu clicked while the UI still renders can close again: retry until the theme changed
            WebDriverWait(browser, 30).until(EC.element_to_be_clickable((By.XPATH, _NAV_BUTTON.format("User")))).click()
            WebDriverWait(browser, 30).until(EC.element_to_be_clickable(
                (By.XPATH, "//*[@role='menuitem'][normalize-space()='Appearance']"))).click()
            WebDriverWait(browser, 30).until(EC.element_to_be_clickable(
                (By.XPATH, f"//*[@role='menuitemradio'][normalize-space()='{mode}']"))).click()
            WebDriverWait(browser, 10).until(
                lambda b: b.execute_script("return document.documentElement.classList.contains('dark')") == want_dark)
        except TimeoutException:
            continue
    browser.switch_to.frame(browser.find_element(By.CSS_SELECTOR, "iframe"))


def test_keyboard_moves_between_days_and_the_page_follows_the_uis_dark_mode(stack, browser):
    """In the same browser: Tab reaches the calendar, the arrow keys move a day (left/right) or
    a month (up/down) and the details follow the focus, Enter selects a day, Shift+arrow extends
    the selection, Escape clears it; then the UI's dark mode turns the page dark, and light again."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    _login(browser, stack, "viewer")
    _open_catalog(browser, stack)
    assert _colours(browser) == LIGHT
    # Into the page, then Tab: past the job menu and Refresh, to the calendar's one tab stop.
    browser.find_element(By.TAG_NAME, "h1").click()
    for _ in range(6):
        ActionChains(browser).send_keys(Keys.TAB).perform()
        state = _keyboard_state(browser)
        if state["focused"] and state["focused"][:1].isdigit():
            break
    else:
        raise AssertionError(f"Tab never reached a day: {state}")
    stop = browser.find_element(By.CSS_SELECTOR, "button.cell[tabindex='0']").get_attribute("data-day")
    assert state["focused"] == stop and state["detail"] == stop, state
    here = date.fromisoformat(stop)
    assert here > ARCHIVED[0], stop  # the newest day of the job: the way to 2 March is left and up
    # To 2 March 2026: left to a day every month has, up a month at a time, then left/right to the 2nd.
    while here.day > 28:
        here = here.replace(day=here.day - 1)
        _press(browser, Keys.ARROW_LEFT, here.isoformat())
    while (here.year, here.month) != (2026, 3):
        here = here.replace(year=here.year - 1, month=12) if here.month == 1 else here.replace(month=here.month - 1)
        state = _press(browser, Keys.ARROW_UP, here.isoformat())
        assert state["detail"] == here.isoformat(), state
    while here.day != 2:
        key = Keys.ARROW_LEFT if here.day > 2 else Keys.ARROW_RIGHT
        here = here.replace(day=here.day - 1 if here.day > 2 else here.day + 1)
        state = _press(browser, key, here.isoformat())
    assert state["detail"] == "2026-03-02" and "Archived and verified" in state["detail_text"], state
    assert state["selected"] == [], state  # focus shows a day; it does not select it
    # Down a month and back up: April's 2nd, then March's again.
    assert _press(browser, Keys.ARROW_DOWN, "2026-04-02")["detail"] == "2026-04-02"
    _press(browser, Keys.ARROW_UP, "2026-03-02")
    state = _press(browser, Keys.ENTER, "2026-03-02")
    assert state["selected"] == ["2026-03-02"] and state["selinfo"] == "2026-03-02", state
    assert "logs/2026/03/02/" in state["detail_text"], state
    # Right twice: the details follow the focus to the missing day; the selection stays.
    _press(browser, Keys.ARROW_RIGHT, "2026-03-03")
    state = _press(browser, Keys.ARROW_RIGHT, MISSING.isoformat())
    assert state["detail"] == MISSING.isoformat() and "Missing (source has data)" in state["detail_text"], state
    assert state["selected"] == ["2026-03-02"], state
    state = _press(browser, Keys.ENTER, MISSING.isoformat())
    assert state["selected"] == [MISSING.isoformat()], state
    _press(browser, Keys.ARROW_LEFT, "2026-03-03", shift=True)
    state = _press(browser, Keys.ARROW_LEFT, "2026-03-02", shift=True)
    assert state["selected"] == ["2026-03-02", "2026-03-03", "2026-03-04"], state
    assert state["selinfo"] == "2026-03-02 … 2026-03-04 (3 days, 1 to archive)", state
    assert _press(browser, Keys.ESCAPE, "2026-03-02")["selected"] == []

    # Dark mode, chosen in the UI around the page: the page's own colours turn to its dark palette.
    _set_appearance(browser, "Dark Mode")
    WebDriverWait(browser, 30).until(lambda b: _colours(b)["dark_class"])
    assert _colours(browser) == DARK
    _set_appearance(browser, "Light Mode")
    WebDriverWait(browser, 30).until(lambda b: not _colours(b)["dark_class"])
    assert _colours(browser) == LIGHT

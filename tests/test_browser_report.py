"""The demo's Snakemake report (`snakemake --report`) as a reader uses it, in headless
Chromium: it opens without a console error, its menu holds a category for every stage of the
output map (docs/outputs.md) that has report entries, and from the menu the first figure, the first
table and the first page of each category open (the figure decoded, the table's rows in what its
button saves: the report offers tables as downloads; the page, the leaderboard, in a frame).

The report is a single-page app whose markup has no ids: the tests find the menu's entries by
their text, a result's view button by the icon name Snakemake gives it, and what each category
holds in the app's own index of the results (its globals `categories` and `results`)."""

from __future__ import annotations

import base64
import csv
import io
from pathlib import Path
from urllib.parse import unquote_to_bytes

import pytest
from headless_browser import console_errors, downloaded, headless_chromium, save_downloads_to
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait

from conftest import REPOSITORY, demo_screen, snakemake, warning_lines

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

# The report's categories of each stage of the output map (docs/outputs.md); a stage whose files
# are not in the report maps to none.
REPORT_CATEGORIES = {
    "levels": {"Levels"},
    "levels: level sets": {"Level sets"},
    "splits": {"Splits"},
    "splits: real data": set(),
    "demo": {"Demo world"},
    "features": set(),
    "probes": set(),
    "results": {"Tables", "Figures", "Timings"},
    "analyses": {"Analyses"},
    "variants": {"Class-balanced variant", "IN-1K-blurred"},
    "variants: audit": {"Label-noise audit"},
    "fine-tuning": {"Fine-tuning control"},
    "series": {"Checkpoint series"},
    "report": set(),
}
TABLE_TYPES = {"text/csv": ",", "text/tab-separated-values": "\t"}
# a page of its own (the leaderboard), which the report shows in a frame
PAGE_TYPE = "text/html"
SHOWN_PAGE = ("const frame = document.querySelector('#app iframe');"
              "return frame && frame.src.startsWith('data:text/html') ? frame.src : null;")


def output_map_stages() -> set[str]:
    """The stage column of the output map, the table whose header starts `| stage | output`."""
    lines = (REPOSITORY / "docs" / "outputs.md").read_text().splitlines()
    starts = [number for number, line in enumerate(lines) if line.startswith("| stage | output")]
    assert starts, "docs/outputs.md has no output map (a table headed '| stage | output')"
    rows = lines[starts[0] + 2:]
    rows = rows[:next((number for number, line in enumerate(rows) if not line.startswith("|")), len(rows))]
    return {row.split("|")[1].strip() for row in rows} - {""}


@pytest.fixture(scope="module")
def report(demo_run, tmp_path_factory) -> Path:
    """The demo's report, built once (the suite's only report build); what the build printed is
    kept beside it (``report_screen``)."""
    path = tmp_path_factory.mktemp("report") / "report.html"
    result = snakemake(demo_run, "--report", str(path))
    report_screen(path).write_text(result.stdout + result.stderr)
    return path


def report_screen(report: Path) -> Path:
    return report.with_name("screen.txt")


def test_the_demo_and_its_report_print_no_warning(demo_run, report):
    """`make demo`'s screen (the run, then the report: docutils reads the captions, matplotlib,
    pandas and torch work in the jobs) holds no warning a user would have to judge."""
    for what, screen in (("the demo's run", demo_screen(demo_run)), ("its report", report_screen(report))):
        assert warning_lines(screen.read_text()) == [], f"{what} printed a warning"


@pytest.fixture(scope="module")
def browser(report, tmp_path_factory):
    """Chromium on the report, opened once: the tests that follow navigate its menu."""
    with headless_chromium(tmp_path_factory.mktemp("chromium")) as driver:
        driver.get(report.as_uri())
        yield driver


def menu_entries(driver) -> list[str]:
    """The texts of the navigation's current menu entries (categories or subcategories)."""
    return [item.text for item in driver.find_elements(By.CSS_SELECTOR, "nav ul > li > a > span")]


def open_menu_entry(driver, text: str) -> None:
    driver.find_element(By.XPATH, f"//nav//ul/li/a[normalize-space(span)='{text}']").click()


def go_home(driver) -> None:
    """Back to the report's first menu, through the breadcrumbs' first link."""
    driver.find_element(By.CSS_SELECTOR, "nav ol > li:first-child > a").click()


def open_category(driver, category: str, subcategory: str | None = None) -> None:
    """From the report's first menu to ``category`` and its ``subcategory``."""
    go_home(driver)
    open_menu_entry(driver, category)
    if subcategory:
        open_menu_entry(driver, subcategory)


def view_buttons(driver) -> list:
    """The view button of each result in the menu's results table."""
    return driver.find_elements(By.CSS_SELECTOR, "nav table tbody a[iconname='eye']")


def kinds_by_subcategory(driver, category: str) -> dict[str, set[str]]:
    """subcategory -> the media types of its results, from the report's own index of them."""
    return {subcategory: set(types) for subcategory, types in driver.execute_script(
        "const subcategories = categories[arguments[0]], kinds = {};"
        "for (const name in subcategories) kinds[name] = subcategories[name].map(path => results[path].mime_type);"
        "return kinds;", category).items()}


def kind_of(mime: str) -> str:
    if mime.startswith("image/"):
        return "figure"
    if mime == PAGE_TYPE:
        return "page"
    assert mime in TABLE_TYPES, f"a result of type {mime}, which these tests neither show nor save"
    return "table"


def row_text(button) -> str:
    """The labels of the results table's row that holds ``button``."""
    return button.find_element(By.XPATH, "./ancestor::tr").text


def data_uri(href: str) -> tuple[str, bytes]:
    """The media type and bytes of a data URI."""
    header, _, payload = href.partition(",")
    return header[len("data:"):].split(";")[0], (
        base64.b64decode(payload) if header.endswith(";base64") else unquote_to_bytes(payload))


SHOWN_IMAGE = ("const shown = document.querySelector('#app > div > div.grow img');"
               "return shown && shown.complete && shown.naturalWidth > 0 ? shown.src : null;")


def check_table(button, folder: Path) -> None:
    """The table's rows are in the data URI its button holds, and the button saves them."""
    mime, data = data_uri(button.get_attribute("href"))
    rows = list(csv.reader(io.StringIO(data.decode("utf-8")), delimiter=TABLE_TYPES[mime]))
    assert len(rows) >= 2 and {len(row) for row in rows} == {len(rows[0])}, (row_text(button), rows[:3])
    button.click()
    assert downloaded(folder, button.get_attribute("download")).read_bytes() == data


def check_figure(driver, button) -> None:
    """The figure its button shows is decoded in the report's content pane."""
    before = driver.execute_script(SHOWN_IMAGE)
    button.click()
    WebDriverWait(driver, 20).until(lambda driver: driver.execute_script(SHOWN_IMAGE) not in (None, before),
                                    f"the figure of the row '{row_text(button)}' is not shown decoded")


def check_page(driver, button) -> None:
    """The page its button shows is framed in the report's content pane."""
    button.click()
    WebDriverWait(driver, 20).until(lambda driver: driver.execute_script(SHOWN_PAGE),
                                    f"the page of the row '{row_text(button)}' is not shown")


def test_the_report_builds_and_opens_without_a_console_error(report, browser):
    html = report.read_text(errors="replace")
    assert len(html) > 10_000 and "ImageNet-CoG" in html
    assert {"Workflow", "Statistics", "About"} <= set(menu_entries(browser))
    assert console_errors(browser) == []


def test_its_categories_are_those_of_the_output_map(browser):
    assert output_map_stages() == set(REPORT_CATEGORIES), "a stage of the output map has no entry in REPORT_CATEGORIES"
    go_home(browser)
    shown = set(menu_entries(browser)) - {"Workflow", "Statistics", "About"}
    assert shown == set().union(*REPORT_CATEGORIES.values())


@pytest.mark.parametrize("category", sorted(set().union(*REPORT_CATEGORIES.values())))
def test_a_figure_and_a_table_of_each_category_open_from_the_menu(category, browser, tmp_path):
    """Of each kind of result the category holds (figure, table, page), the first subcategory's first one."""
    save_downloads_to(browser, tmp_path)
    subcategories = kinds_by_subcategory(browser, category)
    first = {}
    for subcategory in sorted(subcategories, reverse=True):
        first.update({kind_of(mime): subcategory for mime in subcategories[subcategory]})
    assert first, f"{category}: no result"
    for kind, subcategory in sorted(first.items()):
        open_category(browser, category, subcategory if len(subcategories) > 1 else None)
        buttons = [button for button in view_buttons(browser)
                   if (kind == "table") == button.get_attribute("href").startswith("data:")]
        assert buttons, f"{category}, {subcategory}: no {kind} in the menu's results table"
        {"table": lambda: check_table(buttons[0], tmp_path), "figure": lambda: check_figure(browser, buttons[0]),
         "page": lambda: check_page(browser, buttons[0])}[kind]()
    assert console_errors(browser) == []

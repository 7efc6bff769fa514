"""The demo's leaderboard page (results/leaderboard.html) as a reader uses it, in headless
Chromium: it opens without a console error with the demo's three models beside the paper's 31,
a click on a header sorts the rows by that column within each exposure class, the control ranks
every class together, a category filter hides the other rows, the ticked rows are drawn with their
intervals, the CSV it saves holds the rows shown; and its numbers are those of the tables it is
built from."""

from __future__ import annotations

import csv
import json
import math
import re

import pandas as pd
import pytest
from headless_browser import console_errors, downloaded, headless_chromium, save_downloads_to
from selenium.webdriver.common.by import By

from imagenet_cog.core.layout import Layout
from imagenet_cog.results.leaderboard_cells import PUBLISHED_PREFIX

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

L5 = "top1|l5|all"


@pytest.fixture(scope="module")
def page_data(demo_run) -> dict:
    """The data the page renders, read from its inline JSON."""
    text = (demo_run / Layout().leaderboard_page()).read_text()
    found = re.search(r'<script type="application/json" id="leaderboard-data">(.*?)</script>', text, re.S)
    return json.loads(found.group(1).replace("<\\/", "</"))


@pytest.fixture(scope="module")
def browser(demo_run, tmp_path_factory):
    with headless_chromium(tmp_path_factory.mktemp("chromium")) as driver:
        driver.get((demo_run / Layout().leaderboard_page()).resolve().as_uri())
        yield driver


def shown_models(driver) -> list[str]:
    return [row.get_attribute("data-model") for row in driver.find_elements(By.CSS_SELECTOR, "#leaderboard tr[data-model]")]


def shown_exposures(driver) -> list[str]:
    return [row.get_attribute("data-exposure") for row in driver.find_elements(By.CSS_SELECTOR, "#leaderboard tr[data-model]")]


def column_values(driver, key: str) -> list[float | None]:
    data = driver.execute_script("return data.rows.map(r => [r.model, r.cells[arguments[0]] ? r.cells[arguments[0]].v : null]);", key)
    values = dict(data)
    return [values[model] for model in shown_models(driver)]


def test_the_page_opens_with_the_runs_models_beside_the_papers_31(browser, page_data):
    assert console_errors(browser) == []
    models = shown_models(browser)
    assert len(models) == 34 and sum(model.startswith(PUBLISHED_PREFIX) for model in models) == 31
    assert {"demo_cnn", "demo_cnn_random", "demo_clip"} <= set(models)
    assert "http" not in "".join(e.get_attribute("src") or "" for e in browser.find_elements(By.CSS_SELECTOR, "script"))


def test_a_header_click_sorts_the_rows_by_its_column_within_each_exposure_class_empty_cells_last(browser):
    """The demo's three models and the paper's 27 IN-1K models (exposure none) first, then the
    paper's four web-data models; each class sorted on its own."""
    header = browser.find_element(By.CSS_SELECTOR, f'#leaderboard th[data-key="{L5}"]')
    header.click()  # the page opens sorted by its first column; this one sorts descending
    exposures = shown_exposures(browser)
    assert exposures == ["none"] * 30 + ["web"] * 4
    for descending in (True, False):
        values = column_values(browser, L5)
        for group in (values[:30], values[30:]):
            present = [value for value in group if value is not None]
            assert present == sorted(present, reverse=descending) and group[:len(present)] == present
        if descending:
            browser.find_element(By.CSS_SELECTOR, f'#leaderboard th[data-key="{L5}"]').click()
    assert console_errors(browser) == []


def test_the_papers_web_models_are_ranked_in_their_class_and_the_control_ranks_all_together(browser, page_data):
    """d-CLIP & co. are web, as the paper sets them apart (Sec. 4.1): ranked 1 to 4 among
    themselves; ticked, the control ranks and sorts the paper's 31 together (rank_all)."""
    web = {row["model"] for row in page_data["rows"] if row["exposure"] == "web"}
    assert web == {PUBLISHED_PREFIX + name for name in ("d-Semi-Sup.", "d-Semi-Weakly-Sup.", "d-CLIP", "d-MoPro")}
    cells = {row["model"]: row["cells"][L5] for row in page_data["rows"]}

    def shown_l5_texts():
        return {row.get_attribute("data-model"): row.find_element(By.CSS_SELECTOR, f'td[data-key="{L5}"]').text
                for row in browser.find_elements(By.CSS_SELECTOR, "#leaderboard tr[data-model]")}

    texts = shown_l5_texts()
    assert sorted(cells[model]["rank"] for model in web) == [1, 2, 3, 4]
    assert all(texts[model] == cells[model]["text"] for model in cells)
    clip = browser.find_element(By.CSS_SELECTOR, f'tr[data-model="{PUBLISHED_PREFIX}d-CLIP"] td.exposure')
    assert clip.text == "web" and "exposure-web" in clip.get_attribute("class") and "wit400m" in clip.get_attribute("title")
    browser.find_element(By.ID, "rank-all").click()
    texts = shown_l5_texts()
    assert all(texts[model] == cells[model]["text_all"] for model in cells)
    paper = [model for model in cells if model.startswith(PUBLISHED_PREFIX)]
    assert sorted(cells[model]["rank_all"] for model in paper) == list(range(1, 32))
    assert any(cells[model]["rank_all"] != cells[model]["rank"] for model in web)
    order = [model for model in shown_models(browser) if model in paper]
    values = [cells[model]["v"] for model in order]
    assert values == sorted(values, reverse=values[0] >= values[-1])  # one order, classes mixed
    browser.find_element(By.ID, "rank-all").click()
    assert shown_exposures(browser)[-4:] == ["web"] * 4 and console_errors(browser) == []


def test_a_category_filter_hides_the_other_rows_and_the_csv_saved_holds_the_rows_shown(browser, page_data, tmp_path):
    categories = {row["model"]: row["category"] for row in page_data["rows"]}
    for box in browser.find_elements(By.CSS_SELECTOR, "input.category"):
        if (box.get_attribute("value") in {"architecture", "baseline"}) != box.is_selected():
            box.click()
    shown = shown_models(browser)
    assert shown and {categories[model] for model in shown} == {"architecture", "baseline"}
    assert len(shown) == sum(category in {"architecture", "baseline"} for category in categories.values())
    save_downloads_to(browser, tmp_path)
    browser.find_element(By.ID, "export").click()
    with downloaded(tmp_path, "leaderboard_shown.csv").open(newline="") as stream:
        saved = list(csv.DictReader(stream))
    assert [row["model"] for row in saved] == shown
    title = next(column["title"] for column in page_data["columns"] if column["key"] == L5)
    cells = {row["model"]: row["cells"] for row in page_data["rows"]}
    for row in saved:
        expected = cells[row["model"]].get(L5)
        assert (row[title] == "") if expected is None else math.isclose(float(row[title]), expected["v"])
    for box in browser.find_elements(By.CSS_SELECTOR, "input.category:not(:checked)"):
        box.click()
    assert len(shown_models(browser)) == 34 and console_errors(browser) == []


def test_the_ticked_rows_are_drawn_with_their_intervals(browser, page_data):
    for model in ("demo_cnn", PUBLISHED_PREFIX + "ResNet50"):
        browser.find_element(By.CSS_SELECTOR, f'tr[data-model="{model}"] input.pick').click()
    figure = browser.find_element(By.ID, "figure")
    assert len(figure.find_elements(By.CSS_SELECTOR, "polyline")) == 2
    points = len(page_data["figure"])
    assert len(figure.find_elements(By.CSS_SELECTOR, "circle.point")) == 2 * points
    assert len(figure.find_elements(By.CSS_SELECTOR, "line.interval")) == 2 * points
    assert console_errors(browser) == []


def test_the_pages_numbers_are_the_tables_it_is_built_from(demo_run, page_data):
    layout = Layout(str(demo_run / "results"))
    cells = {row["model"]: row["cells"] for row in page_data["rows"]}
    summary = pd.read_csv(layout.results_summary(), dtype={"shots": str})
    summary = summary[(summary["probe"] == "linear") & (summary["level_set"] == "lin") & (summary["shots"] == "all")]
    for row in summary.itertuples():
        cell = cells[row.model][f"top1|{row.dataset}|all"]
        assert (cell["v"], cell["lo"], cell["hi"]) == pytest.approx((row.mean, row.ci95_low, row.ci95_high))
    published = pd.read_csv(demo_run / "resources" / "published_top1.tsv", sep="\t", comment="#", dtype={"shots": str})
    for row in published[published["shots"] == "all"].itertuples():
        assert cells[PUBLISHED_PREFIX + row.model][f"top1|{row.dataset}|all"]["v"] == pytest.approx(row.mean)
    resnet = published[(published["model"] == "ResNet50") & (published["shots"] == "all") & (published["dataset"] == "l5")]
    assert cells["demo_cnn"][L5]["pub"] == pytest.approx(resnet["mean"].item())
    curve = pd.read_csv(layout.table("concept_curve", "csv"))
    slope = curve[(curve["statistic"] == "slope") & (curve["model"] == "demo_cnn")].iloc[0]
    assert cells["demo_cnn"]["concept_slope|levels|all"]["v"] == pytest.approx(slope["value"])
    detection = pd.read_csv(layout.table("detection_msp", "csv"))
    auroc = detection[(detection["model"] == "demo_cnn") & (detection["dataset"] == "L5")].iloc[0]
    cell = cells["demo_cnn"]["detection_auroc|l5|all"]
    assert (cell["v"], cell["lo"], cell["hi"]) == pytest.approx(
        (auroc["auroc_mean"], auroc["auroc_ci95_low"], auroc["auroc_ci95_high"]))
    protocols = {row["protocol"] for row in page_data["rows"] if row["model"].startswith(PUBLISHED_PREFIX)}
    assert protocols != {page_data["reference"]} and all(row["other"] for row in page_data["rows"]
                                                         if row["model"].startswith(PUBLISHED_PREFIX))

"""The demo's rater sheets as a rater uses them, in headless Chromium: one sheet of each kind
(coherence and describability, random and hard negatives) shows every image, counts the
choices clicked, asks before leaving a task out, refuses to save without a rater ID, and
saves a CSV that score-raters scores against the key."""

from __future__ import annotations

import csv

import pytest
import yaml
from headless_browser import console_errors, downloaded, headless_chromium, save_downloads_to, undecoded_images
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.wait import WebDriverWait

from imagenet_cog.analyses.raters import NEGATIVE_KINDS, VARIANTS, page_name, score_raters_command
from imagenet_cog.core.io import read_tsv
from imagenet_cog.core.layout import Layout

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

DATASET = "l1"
RATER = "rater 1"  # the file name gets "rater_1": the page keeps a name to letters, digits and _.-
SHEETS = [page_name(variant, negatives, 1) for variant in VARIANTS for negatives in NEGATIVE_KINDS]


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    folder = tmp_path_factory.mktemp("chromium")
    with headless_chromium(folder) as driver:
        yield driver


@pytest.fixture(scope="module")
def raters_config(demo_run) -> dict:
    """The demo's rater settings, ``concepts`` the tasks of a sheet (the sampled concepts)."""
    config = yaml.safe_load((demo_run / "config.yaml").read_text())
    raters = config["analyses"]["raters"]
    return {**raters, "concepts": min(raters["concepts_per_dataset"], config["demo"]["concepts_per_dataset"])}


def answer_prompt(driver, accept: bool) -> str:
    """The text of the alert or confirm the page opened, answered OK (``accept``) or Cancel."""
    prompt = WebDriverWait(driver, 10).until(expected_conditions.alert_is_present())
    text = prompt.text
    prompt.accept() if accept else prompt.dismiss()
    return text


def choose(section, choice: str) -> None:
    """Click query image ``choice`` (A or B) of a task, as a rater does: its label holds the radio."""
    section.find_element(By.CSS_SELECTOR, f'img[alt="image {choice}"]').click()


@pytest.mark.parametrize("sheet", SHEETS)
def test_a_rater_answers_a_sheet_and_score_raters_scores_the_download(sheet, browser, raters_config, demo_run, tmp_path):
    driver, layout = browser, Layout()
    save_downloads_to(driver, tmp_path / "downloads")
    key = {row["task"]: row for row in read_tsv(demo_run / layout.rater_key(DATASET))}
    driver.get((demo_run / layout.rater_sheets(DATASET) / f"{sheet}.html").as_uri())
    sections = driver.find_elements(By.CSS_SELECTOR, "section.task")
    assert len(sections) == raters_config["concepts"]
    shown = raters_config["references"] + 2 if sheet.startswith("coherence") else 2
    assert len(driver.find_elements(By.TAG_NAME, "img")) == len(sections) * shown
    assert undecoded_images(driver) == []

    driver.find_element(By.ID, "export").click()
    assert answer_prompt(driver, accept=True) == "Enter your rater ID at the top first."
    driver.find_element(By.ID, "rater").send_keys(RATER)

    tasks = [section.get_attribute("data-task") for section in sections]
    right = {task: key[task]["answer"] for task in tasks}
    wrong = {task: "B" if answer == "A" else "A" for task, answer in right.items()}
    choose(sections[0], wrong[tasks[0]])  # a change of mind: the last click counts
    choose(sections[0], right[tasks[0]])
    choose(sections[1], wrong[tasks[1]])
    choose(sections[2], right[tasks[2]])  # the rest left out
    clicked = {tasks[0]: right[tasks[0]], tasks[1]: wrong[tasks[1]], tasks[2]: right[tasks[2]]}
    assert driver.find_element(By.ID, "progress").text == f"{len(clicked)} of {len(tasks)} answered"

    driver.find_element(By.ID, "export").click()
    left_out = len(tasks) - len(clicked)
    assert answer_prompt(driver, accept=False) == f"{left_out} task(s) have no answer. Download the others?"
    driver.find_element(By.ID, "export").click()
    answer_prompt(driver, accept=True)
    saved = downloaded(tmp_path / "downloads", f"{sheet}-rater_1.csv")
    assert sorted(path.name for path in saved.parent.iterdir()) == [saved.name]  # none on Cancel or without an ID
    with saved.open(newline="") as stream:
        assert list(csv.reader(stream)) == [["rater", "task", "choice"], *([RATER, task, clicked[task]] for task in clicked)]
    assert console_errors(driver) == []

    variant, negatives = sheet.split("-")[:2]
    assert score_raters_command(["--answers", str(saved), "--key", str(demo_run / layout.rater_key(DATASET)),
                                 "--output", str(tmp_path / "scores.tsv")]) == 0
    (score,) = read_tsv(tmp_path / "scores.tsv")
    assert (score["dataset"], score["variant"], score["negatives"]) == (DATASET, variant, negatives)
    assert (score["answers"], score["correct"], score["tasks_answered"], score["raters"]) == ("3", "2", "3", "1")
    assert float(score["accuracy"]) == pytest.approx(2 / 3, abs=1e-6)

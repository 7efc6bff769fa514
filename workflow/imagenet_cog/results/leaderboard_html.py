"""The leaderboard page's markup, style and script: one HTML file that needs no network.

The data (:func:`imagenet_cog.results.leaderboard_page.page_data`) is inline JSON; the script
draws the table from it, sorts it by a clicked header (the column's better values first, names
from A; again: the other way; an empty cell last either way), filters it by category and by provenance, draws the chosen rows' top-1 over
IN-1K and the levels at N = all with their intervals (inline SVG), and saves the rows shown
as CSV. By default the rows are grouped by exposure class (the premise's first) and each cell
shows its rank within its class; the control "rank every exposure class together" sorts and
ranks them as one.
"""

from __future__ import annotations

import json

PAGE_STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.45em; vertical-align: top; }
th { background: #f2f2f2; cursor: pointer; position: sticky; top: 0; }
th.sorted-desc::after { content: " \\25BC"; } th.sorted-asc::after { content: " \\25B2"; }
tr.other td { color: #666; background: #fafafa; }
tr.published td.label { font-style: italic; }
td.exposure { font-weight: bold; } td.exposure-web { color: #1a7f37; } td.exposure-images, td.exposure-labels { color: #b35900; }
td.exposure-undeclared { color: #888; }
.controls { margin: 0.6em 0; display: flex; flex-wrap: wrap; gap: 1.2em; align-items: center; }
.tie { color: #666; font-size: 0.85em; } .paper { color: #555; font-size: 0.85em; display: block; }
#figure { border: 1px solid #ccc; margin-top: 0.8em; } .notes li { margin: 0.3em 0; }
pre { background: #f6f6f6; padding: 0.5em; font-size: 0.8em; }
"""

PAGE_SCRIPT = r"""
const data = JSON.parse(document.getElementById("leaderboard-data").textContent);
const colours = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666"];
const fixed = [["label", "Model"], ["exposure", "Exposure"], ["category", "Category"], ["provenance", "Provenance"],
               ["protocol", "Protocol"]];
let sortKey = data.columns.length ? data.columns[0].key : "label", descending = true;
const picked = new Set();
// ranked within each exposure class (the paper: models on more data are not directly comparable) unless ticked
function together() { return document.getElementById("rank-all").checked; }

function valueOf(row, key) {
  if (fixed.some(([name]) => name === key)) return row[key];
  const cell = row.cells[key];
  return cell ? cell.v : null;
}
function ordered(rows) {
  const grouped = !together();
  return rows.slice().sort((a, b) => {
    const kinds = grouped ? data.exposures.indexOf(a.exposure) - data.exposures.indexOf(b.exposure) : 0;
    if (kinds) return kinds;
    const x = valueOf(a, sortKey), y = valueOf(b, sortKey);
    if (x === null && y === null) return a.label.localeCompare(b.label);
    if (x === null) return 1;
    if (y === null) return -1;
    const order = typeof x === "number" ? x - y : String(x).localeCompare(String(y));
    return (descending ? -order : order) || a.label.localeCompare(b.label);
  });
}
function visibleRows() {
  const categories = new Set([...document.querySelectorAll("input.category:checked")].map(box => box.value));
  const provenance = document.getElementById("provenance").value;
  return ordered(data.rows.filter(row => categories.has(row.category) && (provenance === "all"
    || (provenance === "today" ? row.today : row.provenance === provenance))));
}
function header() {
  const cells = fixed.concat(data.columns.map(c => [c.key, c.title]));
  const row = document.createElement("tr");
  row.appendChild(document.createElement("th")).textContent = "compare";
  for (const [key, title] of cells) {
    const th = document.createElement("th");
    th.textContent = title;
    th.dataset.key = key;
    if (key === sortKey) th.className = descending ? "sorted-desc" : "sorted-asc";
    const column = data.columns.find(c => c.key === key);
    th.addEventListener("click", () => {
      descending = key === sortKey ? !descending : (column ? column.higher_first : false);
      sortKey = key;
      render();
    });
    row.appendChild(th);
  }
  return row;
}
function bodyRow(row) {
  const tr = document.createElement("tr");
  tr.dataset.model = row.model;
  tr.className = (row.other ? "other " : "") + row.provenance;
  const box = document.createElement("input");
  box.type = "checkbox"; box.className = "pick"; box.checked = picked.has(row.model);
  box.addEventListener("change", () => { box.checked ? picked.add(row.model) : picked.delete(row.model); drawFigure(); });
  tr.appendChild(document.createElement("td")).appendChild(box);
  tr.dataset.exposure = row.exposure;
  for (const [key] of fixed) {
    const td = tr.appendChild(document.createElement("td"));
    td.textContent = row[key] + (key === "label" && row.other ? data.mark : "");
    if (key === "label") td.className = "label";
    if (key === "exposure") {
      td.className = "exposure exposure-" + row.exposure;
      td.title = data.meanings[row.exposure] + "; pretrained on " + row.pretraining_data;
    }
  }
  const all = together();
  for (const column of data.columns) {
    const td = tr.appendChild(document.createElement("td"));
    const cell = row.cells[column.key];
    td.dataset.key = column.key;
    if (!cell) continue;
    td.textContent = all ? cell.text_all : cell.text;
    const by = all ? cell.by_all : cell.by;
    td.title = (cell.n ? cell.n + " seeds; " : "") + (all ? "ranked with every exposure class" :
      "ranked within exposure " + row.exposure) + (by ? "; tie tested by " + by : "");
  }
  return tr;
}
function render() {
  const table = document.getElementById("leaderboard");
  table.replaceChildren(header());
  for (const row of visibleRows()) table.appendChild(bodyRow(row));
  document.getElementById("shown").textContent = visibleRows().length + " of " + data.rows.length + " rows shown";
}
function csvField(value) {
  const text = value === null || value === undefined ? "" : String(value);
  return /[",\n]/.test(text) ? '"' + text.replace(/"/g, '""') + '"' : text;
}
function visibleCsv() {
  const all = together();
  const head = ["model", "label", "exposure", "pretraining_data", "category", "provenance", "protocol", "ranked"];
  for (const c of data.columns) head.push(c.title, c.title + " low", c.title + " high", c.title + " rank");
  const lines = [head.map(csvField).join(",")];
  for (const row of visibleRows()) {
    const fields = [row.model, row.label, row.exposure, row.pretraining_data, row.category, row.provenance,
                    row.protocol, all ? "every exposure class together" : "within its exposure class"];
    for (const c of data.columns) {
      const cell = row.cells[c.key];
      fields.push(...(cell ? [cell.v, cell.lo, cell.hi, all ? cell.rank_all : cell.rank] : [null, null, null, null]));
    }
    lines.push(fields.map(csvField).join(","));
  }
  return lines.join("\n") + "\n";
}
function exportCsv() {
  const link = document.createElement("a");
  link.href = URL.createObjectURL(new Blob([visibleCsv()], {type: "text/csv"}));
  link.download = "leaderboard_shown.csv";
  document.body.appendChild(link);
  link.click();
  link.remove();
}
function svg(name, attributes, parent) {
  const element = document.createElementNS("http://www.w3.org/2000/svg", name);
  for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, value);
  return parent ? parent.appendChild(element) : element;
}
function drawFigure() {
  const figure = document.getElementById("figure");
  figure.replaceChildren();
  const rows = data.rows.filter(row => picked.has(row.model));
  const keys = data.figure.map(point => point.key), width = 640, height = 320, left = 50, right = 200, top = 15, bottom = 35;
  const values = rows.flatMap(row => keys.flatMap(k => row.cells[k] ? [row.cells[k].lo ?? row.cells[k].v, row.cells[k].hi ?? row.cells[k].v] : []));
  const low = values.length ? Math.max(0, Math.floor(Math.min(...values) / 10) * 10) : 0;
  const high = values.length ? Math.min(100, Math.ceil(Math.max(...values) / 10) * 10) : 100;
  const x = i => left + (keys.length > 1 ? i * (width - left - right) / (keys.length - 1) : 0);
  const y = v => top + (high - v) * (height - top - bottom) / Math.max(high - low, 1);
  svg("line", {x1: left, x2: width - right, y1: height - bottom, y2: height - bottom, stroke: "#888"}, figure);
  data.figure.forEach((point, i) => svg("text", {x: x(i), y: height - 12, "text-anchor": "middle", "font-size": 11},
                                       figure).textContent = point.title);
  for (let v = low; v <= high; v += 10)
    svg("text", {x: left - 6, y: y(v) + 4, "text-anchor": "end", "font-size": 10}, figure).textContent = v;
  svg("text", {x: 12, y: top + 10, "font-size": 11}, figure).textContent = "top-1 (%)";
  rows.forEach((row, n) => {
    const colour = colours[n % colours.length];
    const points = keys.map((k, i) => [i, row.cells[k]]).filter(([, c]) => c);
    svg("polyline", {points: points.map(([i, c]) => x(i) + "," + y(c.v)).join(" "), fill: "none", stroke: colour,
                     "stroke-dasharray": row.provenance === "published" ? "4 3" : ""}, figure);
    for (const [i, c] of points) {
      svg("circle", {cx: x(i), cy: y(c.v), r: 3, fill: colour, class: "point"}, figure);
      if (c.lo !== null) svg("line", {x1: x(i), x2: x(i), y1: y(c.lo), y2: y(c.hi), stroke: colour, class: "interval"}, figure);
    }
    svg("text", {x: width - right + 10, y: top + 14 * (n + 1), fill: colour, "font-size": 11}, figure).textContent = row.label;
  });
}
function controls() {
  const categories = [...new Set(data.rows.map(row => row.category))].sort();
  const box = document.getElementById("categories");
  for (const category of categories) {
    const label = box.appendChild(document.createElement("label"));
    const input = label.appendChild(document.createElement("input"));
    input.type = "checkbox"; input.className = "category"; input.value = category; input.checked = true;
    input.id = "category-" + category;
    input.addEventListener("change", render);
    label.appendChild(document.createTextNode(" " + category + " "));
  }
  document.getElementById("provenance").addEventListener("change", render);
  document.getElementById("rank-all").addEventListener("change", render);
  document.getElementById("export").addEventListener("click", exportCsv);
  document.getElementById("notes").replaceChildren(...data.notes.map(note => {
    const item = document.createElement("li"); item.textContent = note; return item; }));
  document.getElementById("protocols").textContent = JSON.stringify(data.protocols, null, 1);
  document.getElementById("stacks").textContent = JSON.stringify(data.stacks, null, 1);
}
controls();
render();
drawFigure();
"""

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>ImageNet-CoG leaderboard</title>
<style>{style}</style></head><body>
<h1>ImageNet-CoG leaderboard</h1>
<p>{caption} Click a header to sort by it; tick rows to compare them on the figure below. Rows are grouped
by exposure, what a model's pretraining saw of the levels' concepts, and ranked within it: only models of
exposure none keep the benchmark's premise (the notes below).</p>
<div class="controls"><span id="categories">Category: </span>
<label>Rows: <select id="provenance"><option value="all">all</option><option value="reproduced">reproduced</option>
<option value="published">published</option><option value="today">today's models (not in the paper)</option></select></label>
<label title="The paper ranks models pretrained on more than IN-1K apart: 'not directly comparable' (Sec. 4.1)">
<input type="checkbox" id="rank-all"> Rank every exposure class together</label>
<button id="export" type="button">Save the rows shown as CSV</button> <span id="shown"></span></div>
<table id="leaderboard"></table>
<h2>Top-1 at N = all of the ticked rows, with 95% intervals</h2>
<svg id="figure" width="640" height="320" role="img" aria-label="top-1 over IN-1K and the levels"></svg>
<h2>Notes</h2><ul class="notes" id="notes"></ul>
<h2>Protocols (digest: what defines a number)</h2><pre id="protocols"></pre>
<h2>Stacks (each protocol's probe results by the releases they were computed with)</h2><pre id="stacks"></pre>
<script type="application/json" id="leaderboard-data">{data}</script>
<script>{script}</script>
</body></html>
"""


def page(caption: str, data: dict) -> str:
    """The page of ``data``; ``caption`` already HTML-escaped."""
    inline = json.dumps(data, allow_nan=False).replace("</", "<\\/")
    return PAGE.format(style=PAGE_STYLE, caption=caption, data=inline, script=PAGE_SCRIPT)

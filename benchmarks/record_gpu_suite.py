"""Turn a ``gpu_suite.sh`` results folder into the README's "GPU suite" section.

Reads ``OUT/environment.txt``, ``OUT/summary.txt`` and each benchmark's log, keeps the
lines each benchmark prints as its figures (not its log messages), and writes
``OUT/gpu_suite.md``: the device, each benchmark's exit status and seconds, and its figures.
With ``--readme benchmarks/README.md`` the section also replaces the one between the
``gpu-suite`` markers of that file (appended, with its markers, where it has none), so a
run's figures are recorded where the rest are.

    python3 benchmarks/record_gpu_suite.py /path/to/OUT --readme benchmarks/README.md
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

BEGIN, END = "<!-- gpu-suite:begin -->", "<!-- gpu-suite:end -->"
# what loggers and libraries print, not a benchmark's figures
LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d[ T]\d\d:\d\d|[WIE]\d{4} |\s*warnings\.warn|.*(Warning|INFO|DEBUG)\b)")
SUMMARY_LINE = re.compile(r"^(?P<name>[\w-]+): exit (?P<status>-?\d+) after (?P<seconds>\d+) s \(limit (?P<limit>\d+) s\)$")


def figures(log: Path) -> list[str]:
    if not log.is_file():
        return []
    return [line.rstrip() for line in log.read_text(errors="replace").splitlines()
            if line.strip() and not LOG_LINE.match(line)]


def section(out: Path) -> str:
    environment = (out / "environment.txt").read_text().strip().splitlines() if (out / "environment.txt").is_file() else []
    runs = [match.groupdict() for line in (out / "summary.txt").read_text().splitlines()
            if (match := SUMMARY_LINE.match(line.strip()))]
    if not runs:
        raise SystemExit(f"{out / 'summary.txt'}: no benchmark recorded; run benchmarks/gpu_suite.sh with OUT={out}")
    lines = [BEGIN, "### Measured by `gpu_suite.sh`", "", "```", *environment, "```", "",
             "| benchmark | exit | seconds (limit) |", "|---|---|---|"]
    lines += [f"| {run['name']} | {run['status']} | {run['seconds']} ({run['limit']}) |" for run in runs]
    for run in runs:
        printed = figures(out / f"{run['name']}.log")
        lines += ["", f"`{run['name']}`:", "", "```", *(printed[-40:] or ["(nothing printed)"]), "```"]
    return "\n".join([*lines, END]) + "\n"


def record(readme: Path, text: str) -> None:
    """Replace the marked section of ``readme`` with ``text`` (append it where there is none)."""
    current = readme.read_text()
    if BEGIN in current and END in current:
        before, rest = current.split(BEGIN, 1)
        after = rest.split(END, 1)[1]
        updated = before + text.rstrip("\n") + after
    else:
        updated = current.rstrip("\n") + "\n\n" + text
    readme.write_text(updated)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the OUT folder of a gpu_suite.sh run")
    parser.add_argument("--readme", type=Path, help="also record the section into this Markdown file")
    args = parser.parse_args()
    text = section(args.out)
    (args.out / "gpu_suite.md").write_text(text)
    if args.readme:
        record(args.readme, text)
    print(f"wrote {args.out / 'gpu_suite.md'}" + (f" and recorded it in {args.readme}" if args.readme else ""))


if __name__ == "__main__":
    main()

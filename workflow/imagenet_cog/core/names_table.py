"""The concept names table: the names a zero-shot classifier is built from, one row a concept.

A TSV with the header ``label wnid name lemmas rule`` (and ``dataset`` in the open-set table
of every dataset's concepts together, labelled dataset after dataset): ``label`` numbers the concepts 0, 1,
... in the order the split tables do (sorted wnids), ``name`` is what the prompt templates
are filled with, ``lemmas`` the synset's WordNet lemmas (for the reader who edits a name)
and ``rule`` which rule gave the name (docs/probes.md, "Zero-shot"). Users may edit names
(and add columns); the classifier reads ``label``, ``wnid`` and ``name``. The levels stage
writes the table, the text classifier reads it: the format lives here, between them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Sequence

from imagenet_cog.core.failures import ExplainedError
from imagenet_cog.core.io import read_tsv, write_tsv

COLUMNS = ("label", "wnid", "name", "lemmas", "rule")
# what the classifier needs; the other columns are for the people who edit the names
READ_COLUMNS = ("label", "wnid", "name")
DATASET_COLUMN = "dataset"
WNID = re.compile(r"^n[0-9]{8}$")


class NamesTableError(ExplainedError, ValueError):
    """A names table that cannot give one name per concept."""


@dataclass(frozen=True)
class ConceptName:
    label: int
    wnid: str
    name: str
    lemmas: str
    rule: str
    # the open-set table's: which dataset the concept belongs to
    dataset: str = ""


def write_names_table(path: str | os.PathLike, names: Sequence[ConceptName]) -> None:
    if any(n.dataset for n in names):
        write_tsv(path, (*COLUMNS, DATASET_COLUMN), [(n.label, n.wnid, n.name, n.lemmas, n.rule, n.dataset) for n in names])
    else:
        write_tsv(path, COLUMNS, [(n.label, n.wnid, n.name, n.lemmas, n.rule) for n in names])


def read_names_table(path: str | os.PathLike) -> list[ConceptName]:
    """The rows of a names table, checked: labels 0..n-1 in order, wnids once each, no empty name."""
    try:
        rows = read_tsv(path)
    except FileNotFoundError:
        raise NamesTableError(f"names table {path} does not exist; write it with "
                              f"python -m imagenet_cog concept-names.") from None
    missing = [column for column in READ_COLUMNS if not rows or column not in rows[0]]
    if missing:
        raise NamesTableError(f"{path}: no column {', '.join(missing)}; a names table has the header "
                              f"{' '.join(COLUMNS)} (tab-separated) and one row per concept.")
    names = []
    for number, row in enumerate(rows, 2):
        if row["label"] != str(number - 2) or not WNID.match(row["wnid"] or "") or not (row["name"] or "").strip():
            raise NamesTableError(
                f"{path}, line {number}: expected label {number - 2}, a wnid and a non-empty name, got "
                f"{row['label']!r}, {row['wnid']!r}, {row['name']!r}. Labels number the rows from 0 in the "
                f"split tables' order; edit only the names (or write the table again with concept-names)."
            )
        names.append(ConceptName(int(row["label"]), row["wnid"], row["name"].strip(),
                                 row.get("lemmas") or "", row.get("rule") or "", row.get(DATASET_COLUMN) or ""))
    wnids = [n.wnid for n in names]
    if len(set(wnids)) != len(wnids):
        raise NamesTableError(f"{path}: lists some wnids twice; each concept has one row.")
    return names


# open_clip's curated IN-1K list itself calls two pairs of classes alike (missile; sunglasses)
CURATED_SHARED_WNIDS = (frozenset({"n03773504", "n04008634"}), frozenset({"n04355933", "n04356056"}))


def duplicate_names(path: str | os.PathLike, names: Sequence[ConceptName]) -> str | None:
    """What is wrong with a table whose concepts share a name (case aside), naming the file,
    its lines and the fix; None when none do but open_clip's two curated IN-1K pairs."""
    by_label = {concept.label: concept for concept in names}
    shared = {name: labels for name, labels in shared_names(names).items()
              if frozenset(by_label[label].wnid for label in labels) not in CURATED_SHARED_WNIDS}
    if not shared:
        return None
    listed = "; ".join(f"'{name}' on lines {', '.join(str(label + 2) for label in labels)}"
                       for name, labels in list(shared.items())[:5])
    more = f" and {len(shared) - 5} more" if len(shared) > 5 else ""
    return (f"{path}: {len(shared)} name{'s' if len(shared) > 1 else ''} given to several concepts ({listed}{more}): "
            f"a zero-shot classifier cannot tell them apart; edit the names so that each differs (case aside), "
            f"e.g. with a word of the concept's lemmas or gloss.")


def shared_names(names: Sequence[ConceptName]) -> dict[str, list[int]]:
    """Names that several concepts share, case aside (CLIP's tokenizer lowercases) -> their
    labels: a classifier cannot tell such concepts apart."""
    labels: dict[str, list[int]] = {}
    for concept in names:
        labels.setdefault(concept.name.casefold(), []).append(concept.label)
    return {name: found for name, found in labels.items() if len(found) > 1}



def foreign_concepts(path: str | os.PathLike, names: Sequence[ConceptName], named: str, concepts: Sequence[str],
                     others: dict[str, Sequence[str]] | None = None) -> str | None:
    """What is wrong with a table that does not name ``named``'s concepts (``concepts``, its
    concept list), naming the file, how many of its wnids are not the dataset's, whose they
    are among ``others`` (dataset -> its concept list) and the fix; None when it names them."""
    own = set(concepts)
    foreign = {n.wnid for n in names} - own
    left_out = own - {n.wnid for n in names}
    if not foreign and not left_out:
        return None
    owners = [(other, len(foreign & set(wnids))) for other, wnids in (others or {}).items() if other != named]
    owners = [f"{count} of them {other}'s" for other, count in owners if count]
    problem = (f"{len(foreign)} of its {len(names)} wnids are not concepts of {named}"
               f"{' (' + ', '.join(owners) + ')' if owners else ''}" if foreign else "")
    if left_out:
        problem += f"{'; it' if problem else 'it'} leaves out {len(left_out)} of the {len(own)} concepts of {named}"
    return (f"{path}: {problem}. A zero-shot classifier of {named} is built from a table of its own concepts: point "
            f"probes.zeroshot.names.{named} at one (write it with python -m imagenet_cog concept-names and edit the "
            f"names), or remove the entry and the concept_names rule writes it.")

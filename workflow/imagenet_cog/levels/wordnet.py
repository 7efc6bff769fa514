"""WordNet 3.0 nouns: finding a copy, making it readable by NLTK, and its hypernym graph.

ImageNet wnids are ``n`` + the 8-digit byte offset of a WordNet 3.0 noun synset in
``data.noun``. The workflow reads the graph straight from ``data.noun`` (a fraction of a
second) and keeps an NLTK-readable copy of the dictionary in ``results/`` so that NLTK,
the reference the tests compare against, reads exactly the same files.

Where WordNet comes from, first match wins:

1. config ``wordnet.dict_dir`` (any WordNet 3.0 ``dict`` folder);
2. NLTK's own data (``nltk.download("wordnet")``, folder or zip);
3. ``/usr/share/wordnet`` (Debian's ``wordnet-base`` + ``wordnet-sense-index``).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from imagenet_cog.core.failures import ExplainedError
from imagenet_cog.core.io import atomic_directory

DEBIAN_DICT_DIR = Path("/usr/share/wordnet")

# What NLTK's WordNetCorpusReader opens when it starts (plus index.sense, read lazily).
READER_FILES = [
    *(f"{kind}.{pos}" for kind in ("data", "index") for pos in ("noun", "verb", "adj", "adv")),
    *(f"{pos}.exc" for pos in ("noun", "verb", "adj", "adv")),
    "index.sense",
]
# Copied when present; NLTK uses them for lemma counts only.
OPTIONAL_FILES = ["cntlist.rev", "cntlist"]

# Lexicographer file numbers, names and syntactic categories (1 noun, 2 verb, 3 adjective,
# 4 adverb) as documented in WordNet's lexnames(5WN). Debian ships no ``lexnames`` file,
# yet NLTK's reader will not start without one.
LEXNAMES = [
    ("adj.all", 3), ("adj.pert", 3), ("adv.all", 4), ("noun.Tops", 1), ("noun.act", 1),
    ("noun.animal", 1), ("noun.artifact", 1), ("noun.attribute", 1), ("noun.body", 1),
    ("noun.cognition", 1), ("noun.communication", 1), ("noun.event", 1), ("noun.feeling", 1),
    ("noun.food", 1), ("noun.group", 1), ("noun.location", 1), ("noun.motive", 1),
    ("noun.object", 1), ("noun.person", 1), ("noun.phenomenon", 1), ("noun.plant", 1),
    ("noun.possession", 1), ("noun.process", 1), ("noun.quantity", 1), ("noun.relation", 1),
    ("noun.shape", 1), ("noun.state", 1), ("noun.substance", 1), ("noun.time", 1),
    ("verb.body", 2), ("verb.change", 2), ("verb.cognition", 2), ("verb.communication", 2),
    ("verb.competition", 2), ("verb.consumption", 2), ("verb.contact", 2), ("verb.creation", 2),
    ("verb.emotion", 2), ("verb.motion", 2), ("verb.perception", 2), ("verb.possession", 2),
    ("verb.social", 2), ("verb.stative", 2), ("verb.weather", 2), ("adj.ppl", 3),
]

# Synsets whose offsets differ between WordNet versions: at these offsets WordNet 3.0 has
# exactly these first lemmas (tench is IN-1K's first class; entity is the root).
VERSION_MARKERS = {"n01440764": "tench", "n00001740": "entity"}

MISSING_WORDNET_HELP = (
    "WordNet 3.0 was not found. Either\n"
    "  * with internet: python -c \"import nltk; nltk.download('wordnet')\", or\n"
    "  * offline: install Debian's packages (apt-get install wordnet-base wordnet-sense-index,\n"
    "    which fill /usr/share/wordnet) or set wordnet.dict_dir in config.yaml to a WordNet 3.0\n"
    "    dict folder (one holding data.noun, index.noun, index.sense, ...)."
)


class WordNetError(ExplainedError, RuntimeError):
    """WordNet is missing, incomplete or not version 3.0."""


def wnid(offset: int) -> str:
    return f"n{offset:08d}"


# Finding WordNet ------------------------------------------------------------------


class WordNetSource:
    """A WordNet dict folder, or NLTK's (possibly zipped) copy, as readable files."""

    def __init__(self, description: str, folder: Path | None = None, nltk_pointer=None):
        self.description = description
        self._folder = folder
        self._pointer = nltk_pointer

    def exists(self, name: str) -> bool:
        if self._folder is not None:
            return (self._folder / name).is_file()
        try:
            self._pointer.join(name)
        except (IOError, OSError):
            return False
        return True

    def copy(self, name: str, destination: Path) -> None:
        if self._folder is not None:
            # copyfile follows symlinks: NLTK refuses symlinked corpus files.
            shutil.copyfile(self._folder / name, destination)
            return
        with self._pointer.join(name).open() as source, open(destination, "wb") as target:
            shutil.copyfileobj(source, target)


def _nltk_wordnet():
    """NLTK's downloaded WordNet as a path pointer, or None."""
    # nltk takes ~3 s to import: only the commands that read NLTK's corpus pay for it
    import nltk

    try:
        # The trailing slash also finds corpora/wordnet.zip, as the downloader leaves it.
        return nltk.data.find("corpora/wordnet/")
    except LookupError:
        return None


def locate_wordnet(dict_dir: str | None) -> WordNetSource:
    """The WordNet to use: ``dict_dir`` if given, else NLTK's data, else Debian's folder."""
    if dict_dir:
        folder = Path(dict_dir)
        if not (folder / "data.noun").is_file():
            raise WordNetError(
                f"wordnet.dict_dir = {dict_dir!r} holds no data.noun; point it at a WordNet 3.0 "
                f"dict folder (e.g. /usr/share/wordnet) or set it to null.\n{MISSING_WORDNET_HELP}"
            )
        return WordNetSource(f"dict folder {folder}", folder=folder)
    pointer = _nltk_wordnet()
    if pointer is not None:
        return WordNetSource(f"NLTK data {pointer}", nltk_pointer=pointer)
    if (DEBIAN_DICT_DIR / "data.noun").is_file():
        return WordNetSource(f"dict folder {DEBIAN_DICT_DIR}", folder=DEBIAN_DICT_DIR)
    raise WordNetError(MISSING_WORDNET_HELP)


def build_nltk_corpus(source: WordNetSource, nltk_data: Path) -> Path:
    """Copy ``source`` into ``<nltk_data>/corpora/wordnet`` in the layout NLTK reads.

    Returns the corpus folder. Raises :class:`WordNetError` if files are missing or the
    dictionary is not WordNet 3.0.
    """
    missing = [name for name in READER_FILES if not source.exists(name)]
    if missing:
        hint = " (Debian: apt-get install wordnet-sense-index)" if missing == ["index.sense"] else ""
        raise WordNetError(
            f"{source.description} lacks {', '.join(missing)}{hint}; NLTK needs all of "
            f"{', '.join(READER_FILES)}.\n{MISSING_WORDNET_HELP}"
        )
    # Built under a temporary name and renamed, so a killed job leaves no complete-looking corpus.
    with atomic_directory(nltk_data) as staging:
        corpus = staging / "corpora" / "wordnet"
        corpus.mkdir(parents=True)
        for name in READER_FILES + [n for n in OPTIONAL_FILES if source.exists(n)]:
            source.copy(name, corpus / name)
        if source.exists("lexnames"):
            source.copy("lexnames", corpus / "lexnames")
        else:
            (corpus / "lexnames").write_text(
                "".join(f"{number:02d}\t{name}\t{category}\n" for number, (name, category) in enumerate(LEXNAMES))
            )
        check_version(corpus / "data.noun", source.description)
    return nltk_data / "corpora" / "wordnet"


def check_version(data_noun: Path, description: str) -> None:
    """Fail unless the synsets at WordNet 3.0's offsets of tench and entity are those."""
    with open(data_noun, "rb") as stream:
        for marker, lemma in VERSION_MARKERS.items():
            stream.seek(int(marker[1:]))
            fields = stream.readline().split(b" ", 5)
            if len(fields) < 5 or fields[0] != marker[1:].encode() or fields[4].decode().lower() != lemma:
                raise WordNetError(
                    f"{description} is not WordNet 3.0: data.noun has no '{lemma}' synset at offset "
                    f"{marker[1:]}. ImageNet wnids are WordNet 3.0 offsets; use a WordNet 3.0 dict "
                    f"folder (wordnet.dict_dir) or NLTK's 'wordnet' corpus."
                )


def nltk_reader(nltk_data: str | Path):
    """An NLTK WordNet reader over a corpus built by :func:`build_nltk_corpus`."""
    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    root = Path(nltk_data).resolve()
    if str(root) not in nltk.data.path:
        # NLTK only opens corpus files that lie under a folder of its data path.
        nltk.data.path.insert(0, str(root))
    with warnings.catch_warnings():
        # Without the Open Multilingual Wordnet NLTK warns; only English nouns are used here.
        warnings.filterwarnings("ignore", message="The multilingual functions")
        return WordNetCorpusReader(nltk.data.find("corpora/wordnet", paths=[str(root)]), None)


def nltk_synset_names(nltk_data: str | Path, wnids: Iterable[str]) -> dict[str, str]:
    """NLTK's synset names (``dog.n.01``) of noun wnids: the order NLTK sorts synsets by."""
    reader = nltk_reader(nltk_data)
    return {w: reader.synset_from_pos_and_offset("n", int(w[1:])).name() for w in wnids}


# The noun graph ---------------------------------------------------------------------


@dataclass
class Synset:
    lemmas: tuple[str, ...]
    gloss: str
    # Hypernyms and instance hypernyms: ImageNet's tree and the paper's similarity use both.
    parents: tuple[str, ...]


class NounGraph:
    """WordNet's noun synsets by wnid, with memoised ancestor sets."""

    def __init__(self, synsets: dict[str, Synset]):
        self.synsets = synsets
        self._ancestors: dict[str, frozenset[str]] = {}

    def __contains__(self, node: str) -> bool:
        return node in self.synsets

    def parents(self, node: str) -> tuple[str, ...]:
        return self.synsets[node].parents

    def ancestors(self, node: str) -> frozenset[str]:
        """Every synset above ``node`` on any hypernym path, ``node`` itself included."""
        known = self._ancestors.get(node)
        if known is not None:
            return known
        # Iterative post-order so that deep chains never hit the recursion limit.
        stack = [node]
        while stack:
            current = stack[-1]
            pending = [p for p in self.synsets[current].parents if p not in self._ancestors]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            if current not in self._ancestors:
                closure = {current}
                for parent in self.synsets[current].parents:
                    closure |= self._ancestors[parent]
                self._ancestors[current] = frozenset(closure)
        return self._ancestors[node]

    def closure(self, nodes: Iterable[str]) -> set[str]:
        """``nodes`` and all their ancestors."""
        result: set[str] = set()
        for node in nodes:
            result |= self.ancestors(node)
        return result

    def name(self, node: str) -> str:
        return ", ".join(lemma.replace("_", " ") for lemma in self.synsets[node].lemmas)


def parse_data_noun(lines: Iterable[str]) -> dict[str, Synset]:
    """Synsets of a WordNet ``data.noun`` file (format: wndb(5WN))."""
    synsets: dict[str, Synset] = {}
    for line in lines:
        if line.startswith("  "):  # license header
            continue
        fields, _, gloss = line.partition(" | ")
        tokens = fields.split()
        word_count = int(tokens[3], 16)
        lemmas = tuple(tokens[4 : 4 + 2 * word_count : 2])
        position = 4 + 2 * word_count
        pointer_count = int(tokens[position])
        parents = []
        for index in range(pointer_count):
            symbol, offset, pos = tokens[position + 1 + 4 * index : position + 4 + 4 * index]
            if symbol in ("@", "@i") and pos == "n":
                parents.append("n" + offset)
        synsets["n" + tokens[0]] = Synset(lemmas, gloss.strip(), tuple(parents))
    return synsets


def load_noun_graph(corpus: str | Path) -> NounGraph:
    """The noun graph of a WordNet folder (``corpora/wordnet`` of the built corpus)."""
    path = Path(corpus)
    if (path / "corpora" / "wordnet").is_dir():
        path = path / "corpora" / "wordnet"
    data_noun = path / "data.noun"
    if not data_noun.is_file():
        raise WordNetError(f"{data_noun} does not exist; build the corpus first (rule wordnet_corpus).")
    with open(data_noun, encoding="utf-8") as stream:
        return NounGraph(parse_data_noun(stream))


# Command ----------------------------------------------------------------------------


def wordnet_corpus_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m imagenet_cog wordnet-corpus",
        description="Copy WordNet 3.0 into an NLTK data folder (corpora/wordnet) and check its version.",
    )
    parser.add_argument("--dict-dir", default=None, help="a WordNet 3.0 dict folder; default: NLTK's data, then /usr/share/wordnet")
    parser.add_argument("--output", required=True, help="the NLTK data folder to create")
    args = parser.parse_args(argv)
    try:
        source = locate_wordnet(args.dict_dir)
        corpus = build_nltk_corpus(source, Path(args.output))
    except WordNetError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"WordNet 3.0 from {source.description} copied to {corpus}")
    return 0

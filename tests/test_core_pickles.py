"""The authors' data pickles are read without running code: their real shapes load (numpy
1.x and 2.x arrays, every pickle protocol), and a file that would build anything else is
refused at both readers, the file it would have made never made."""

from __future__ import annotations

import pathlib
import pickle

import numpy as np
import pytest

from imagenet_cog.core.pickles import UnsafePickleError, read_data_pickle
from imagenet_cog.levels.cut import LevelError, load_published_levels
from imagenet_cog.splits.image_splits import SplitError, load_published_splits

# Written by numpy 1.26.4 (pickle protocol 4), as the authors' files were: a list of
# numpy string arrays, a numpy string scalar, and the split dict with train paths with
# and without a leading slash and an object array of names. numpy 1.x names its rebuild
# functions numpy.core.multiarray._reconstruct / .scalar; numpy 2.x writes numpy._core.
NUMPY1_PICKLE = bytes.fromhex(
    "80049592020000000000005d94288c156e756d70792e636f72652e6d756c74696172726179948c0c5f7265636f6e7374727563749493"
    "948c056e756d7079948c076e6461727261799493944b0085944301629487945294284b014b02859468048c0564747970659493948c02"
    "553994898887945294284b038c013c944e4e4e4b244b044b087494628943486e00000030000000310000003400000034000000300000"
    "003700000036000000340000006e00000030000000310000003400000034000000330000003500000033000000370000009474946268"
    "018c067363616c6172949394680d8c02553294898887945294284b0368114e4e4e4b084b044b0874946243086e000000300000009486"
    "9452947d948c096e3031343430373634947d94288c05747261696e94680368064b008594680887945294284b014b028594680d8c0355"
    "323794898887945294284b0368114e4e4e4b6c4b044b087494628943d82f0000006e0000003000000031000000340000003400000030"
    "0000003700000036000000340000002f0000006e00000030000000310000003400000034000000300000003700000036000000340000"
    "005f000000310000002e0000004a0000005000000045000000470000006e000000300000003100000034000000340000003000000037"
    "00000036000000340000002f0000006e00000030000000310000003400000034000000300000003700000036000000340000005f0000"
    "00320000002e0000004a00000050000000450000004700000000000000947494628c047465737494680368064b008594680887945294"
    "284b014b018594680d8c024f3894898887945294284b038c017c944e4e4e4affffffff4affffffff4b3f749462895d948c106e303134"
    "34303736345f332e4a50454794617494627573652e"
)


def test_a_numpy1_pickle_of_the_authors_shapes_loads(tmp_path):
    path = tmp_path / "numpy1.pkl"
    path.write_bytes(NUMPY1_PICKLE)
    levels, wnid, splits = read_data_pickle(path)
    assert levels.tolist() == ["n01440764", "n01443537"] and wnid == "n0"
    assert splits["n01440764"]["train"].tolist() == ["/n01440764/n01440764_1.JPEG", "n01440764/n01440764_2.JPEG"]
    assert splits["n01440764"]["test"].tolist() == ["n01440764_3.JPEG"]


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_the_readers_take_the_authors_files_written_by_this_numpy(tmp_path, protocol):
    wnids = [f"n{index:08d}" for index in range(10)]
    levels = [np.array(wnids[k * 2:k * 2 + 2]) for k in range(5)]
    (tmp_path / "levels.pkl").write_bytes(pickle.dumps(levels, protocol=protocol))
    splits = {wnid: {"train": np.array([f"/{wnid}/{wnid}_1.JPEG", f"{wnid}/{wnid}_2.JPEG"]),
                     "test": np.array([f"{wnid}_3.JPEG"], dtype=object)} for wnid in wnids}
    (tmp_path / "splits.pkl").write_bytes(pickle.dumps(splits, protocol=protocol))

    assert load_published_levels(tmp_path / "levels.pkl", 5, 2) == [wnids[k * 2:k * 2 + 2] for k in range(5)]
    published = load_published_splits(tmp_path / "splits.pkl")
    assert published["n00000003"] == {"train": ["/n00000003/n00000003_1.JPEG", "n00000003/n00000003_2.JPEG"],
                                      "test": ["n00000003_3.JPEG"]}


class CreatesAFile:
    """What a replaced file could hold: an object whose unpickling creates a file."""

    def __init__(self, path: pathlib.Path):
        self.path = path

    def __reduce__(self):
        return pathlib.Path.touch, (self.path,)


def test_a_pickle_that_would_create_a_file_is_refused_by_both_readers(tmp_path):
    created = tmp_path / "created-by-the-pickle"
    levels = tmp_path / "levels.pkl"
    levels.write_bytes(pickle.dumps([["n00000001"], CreatesAFile(created)]))
    splits = tmp_path / "splits.pkl"
    splits.write_bytes(pickle.dumps({"n00000001": {"train": ["a.JPEG"], "test": CreatesAFile(created)}}))

    with pytest.raises(LevelError) as level_error:
        load_published_levels(levels, 2, 1)
    with pytest.raises(SplitError) as split_error:
        load_published_splits(splits)
    for error, path in ((level_error, levels), (split_error, splits)):
        message = str(error.value)
        assert str(path) in message and "pathlib.Path.touch" in message and "Download the authors' file again" in message
    assert not created.exists()


@pytest.mark.parametrize("attack", ["numpy.ndarray called", "os.system", "latin1 only"])
def test_numpy_and_codec_names_cannot_be_turned_into_calls(tmp_path, attack):
    """An ndarray built straight from a buffer with an object dtype would read bytes as
    pointers; _codecs.encode with another codec is not what pickles use for bytes."""
    payloads = {
        # protocol 0 text: numpy.ndarray((1,), 'O', buffer) through REDUCE
        "numpy.ndarray called": b"cnumpy\nndarray\n((I1\ntS'O'\nC\x08AAAAAAAAtR.",
        "os.system": f"cos\nsystem\n(S'touch {tmp_path / 'x'}'\ntR.".encode(),
        "latin1 only": b"c_codecs\nencode\n(Vabc\nVrot13\ntR.",
    }
    path = tmp_path / "crafted.pkl"
    path.write_bytes(payloads[attack])
    with pytest.raises(UnsafePickleError, match="which was refused"):
        read_data_pickle(path)
    assert not (tmp_path / "x").exists()

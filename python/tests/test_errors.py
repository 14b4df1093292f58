"""Bad input: a ds41.Error (a ValueError) with ds41's message, never a crash, and the sequence as
it was."""
import pathlib

import numpy as np
import pytest

import ds41


def test_error_is_a_value_error():
    assert issubclass(ds41.Error, ValueError)


def test_missing_and_bad_files(tmp_path):
    with pytest.raises(ds41.Error, match="cannot open"):
        ds41.Model.from_golden(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    with pytest.raises(ds41.Error):
        ds41.Model.from_golden(bad)
    with pytest.raises(ds41.Error):
        ds41.Model.from_gguf(bad)
    with pytest.raises(ds41.Error):
        ds41.Model.from_checkpoint(tmp_path)
    with pytest.raises(ds41.Error):
        ds41.Model.from_gguf(tmp_path / "none.gguf", cache_experts=-1)


def test_bad_tokens(tiny):
    V = tiny.config["vocab_size"]
    with tiny.new_sequence() as s:
        for bad, msg in [([V], "outside the model's vocab"), ([-1], "outside"), ([], "no tokens"),
                         ([[1, 2], [3, 4]], "1-D"), ([1.5], "integer"), (np.array([True]), "integer"),
                         (np.array([2**63], dtype=np.uint64), "outside"), (["a"], "integer")]:
            with pytest.raises(ds41.Error, match=msg):
                s.extend(bad)
            assert s.length == 0 and not s.broken
        s.extend(np.array([1, 2, 3], dtype=np.uint8))  # any integer dtype
        assert s.length == 3


def test_sequence_too_long(tiny):
    n = tiny.config["max_seq_len"]
    with tiny.new_sequence() as s:
        s.extend([1] * (n - 1))
        with pytest.raises(ds41.Error, match="max_seq_len"):
            s.extend([1, 2])
        assert s.length == n - 1 and not s.broken
        s.extend([1])
        assert s.length == n


def test_closed_sequence(tiny):
    s = tiny.new_sequence()
    s.close()
    assert s.closed
    for call in (lambda: s.extend([1]), s.checkpoint, s.snapshot, lambda: s.length,
                 lambda: tiny.step([(s, [1])])):
        with pytest.raises(ds41.Error, match="closed"):
            call()


def test_rewind_misuse(tiny):
    with tiny.new_sequence() as s:
        with pytest.raises(ds41.Error, match="no open checkpoint"):
            s.rollback()
        s.extend([1, 2, 3])
        s.extend([4])
        with pytest.raises(ds41.Error, match="cannot be restored exactly"):
            s.truncate(2)
        with pytest.raises(ds41.Error, match="outside"):
            s.truncate(99)
        s.checkpoint()
        with pytest.raises(ds41.Error, match="still open"):
            s.checkpoint()
        assert s.length == 4


def test_bad_batches(tiny, goldens):
    a, b = tiny.new_sequence(), tiny.new_sequence()
    a.extend([1, 2])
    with pytest.raises(ds41.Error, match="same sequence"):
        tiny.step([(a, [3]), (a, [4])])
    with pytest.raises(ds41.Error, match="outside"):
        tiny.step([(b, [1]), (a, [10**6])])
    assert a.length == 2 and b.length == 0  # nothing ran
    with pytest.raises(ds41.Error, match="pair"):
        tiny.step([a])
    with pytest.raises(ds41.Error, match="ds41.Sequence"):
        tiny.step([("x", [1])])
    other = ds41.Model.from_golden(goldens / "ds41_tiny_fp8_golden.json")
    with pytest.raises(ds41.Error, match="another model"):
        other.step([(a, [1])])
    with pytest.raises(ds41.Error, match="another model"):
        other._m.snapshot(a._s)


def test_bad_snapshot_bytes(tiny):
    with pytest.raises(ds41.Error):
        tiny.restore(b"not a snapshot")
    with tiny.new_sequence() as s:
        s.extend([1, 2, 3])
        data = s.snapshot()
    with pytest.raises(ds41.Error):
        tiny.restore(data[:-7])


def test_bad_force(tiny):
    with tiny.new_sequence() as s:
        s.extend([1, 2, 3])
        before = s.snapshot()
        with pytest.raises(ds41.Error, match="no capture named 'layers.0.nonesuch'"):
            s.extend([4], force={"layers.0.nonesuch": [0.0]})
        assert s.length == 3 and not s.broken and s.snapshot() == before
        with pytest.raises(ds41.Error, match="values in this step"):
            s.extend([4], force={"head_in": [0.0, 1.0]})
        assert s.length == 3 and not s.broken and s.snapshot() == before
        s.extend([4])
        assert s.length == 4


def test_capture_empty_list_refused(tiny):
    with tiny.new_sequence() as s:
        with pytest.raises(ds41.Error, match="selects nothing"):
            s.extend([1], capture=[])

"""The goldens through the Python module, every capture of every step compared in Python with the
golden's own numbers (golden_check.py): the public goldens and the extra ones, from regenerated
weights, from their safetensors checkpoints (resident and streamed), and from GGUF."""
import os
import pathlib
import re
import subprocess

import numpy as np
import pytest

import ds41
import golden_check as gc
from conftest import golden_dir

# Goldens at the released attention shapes (dim >= 2048: the public mid golden and extra ones) or
# with prompts of 1000+ tokens take 20-50 s each to regenerate and run here, through the same
# compiled Model as the tiny ones; the C++ suite runs them on every build (ds41-golden); here they
# run with DS41_PY_ALL_GOLDENS=1. (The mid golden was 48 of pytest's 63 s in the README's test
# command, session 42.)
ALL = os.environ.get("DS41_PY_ALL_GOLDENS") == "1"


def _goldens():
    d = golden_dir()
    files = sorted(d.glob("*.json")) + sorted((d / "extra").glob("*.json"))
    out = []
    for f in files:
        with open(f) as fh:  # the fixture block comes first: its size decides
            head = fh.read(1 << 16)
        dim = re.search(r'"dim"\s*:\s*(\d+)', head)
        prompt = re.search(r'"prompt_len"\s*:\s*(\d+)', head)
        large = (dim is not None and int(dim.group(1)) >= 2048) or (prompt is not None and int(prompt.group(1)) >= 1000)
        out.append(pytest.param(f, id=f.name, marks=[] if (ALL or not large) else pytest.mark.skip("large: DS41_PY_ALL_GOLDENS=1")))
    return out


@pytest.mark.parametrize("path", _goldens())
def test_golden_bit_for_bit(path):
    g = gc.load(path)
    model = ds41.Model.from_golden(path)
    problems, compared = gc.run_golden(model, g)
    assert compared > 0
    assert problems == [], "\n".join(problems[:20])


def test_golden_in_chunks(goldens):
    """Decode tokens fed three, one, two at a time: every row's captures as its own step's."""
    path = goldens / "ds41_tiny_golden.json"
    problems, compared = gc.run_golden(ds41.Model.from_golden(path), gc.load(path), chunks=[3, 1, 2])
    assert compared > 0 and problems == [], "\n".join(problems[:20])


def _checkpoints():
    d = golden_dir()
    out = []
    dirs = (d, d / "extra", d / "extra" / "dspark")  # extra/dspark: the stages stream with the backbone
    for ck in sorted(ck for p in dirs for ck in p.glob("*_ckpt")):
        name = ck.name[: -len("_ckpt")]
        for cand in (ck.parent / f"{name}.json", ck.parent / f"{name}_golden.json"):
            if cand.exists():
                out.append(pytest.param(ck, cand, id=ck.name))
    return out


@pytest.mark.parametrize("ckpt,path", _checkpoints())
@pytest.mark.parametrize("cache", [0, 3])
def test_checkpoint_bit_for_bit(ckpt, path, cache):
    """Weights from the official-format checkpoint; experts resident (0) or through a 3-expert cache
    (a DSpark checkpoint's stages' experts through the same cache)."""
    g = gc.load(path)
    model = ds41.Model.from_checkpoint(ckpt, golden=path, cache_experts=cache)
    assert "checkpoint" in model.source
    problems, compared = gc.run_golden(model, g)
    assert compared > 0 and problems == [], "\n".join(problems[:20])


def test_gguf_bit_for_bit(goldens, tmp_path):
    """The tiny golden's model written as GGUF shards by ds41-gguf-write, read back by from_gguf."""
    writer = os.environ.get("DS41_GGUF_WRITE")
    if not writer:
        pytest.skip("DS41_GGUF_WRITE (the ds41-gguf-write binary) not given; CTest gives it")
    path = goldens / "ds41_tiny_golden.json"
    subprocess.run([writer, str(path), str(tmp_path / "tiny"), "--shards", "2"], check=True, capture_output=True)
    first = sorted(tmp_path.glob("tiny-*.gguf"))[0]
    g = gc.load(path)
    for cache in (0, 3):
        problems, compared = gc.run_golden(ds41.Model.from_gguf(first, cache_experts=cache), g)
        assert compared > 0 and problems == [], "\n".join(problems[:20])


def test_gguf_with_draft_file_bit_for_bit(goldens, tmp_path):
    """The public DSpark golden's model as GGUF + a dflash draft file (ds41-gguf-write --draft),
    read back by from_gguf(draft=): every capture, the draft calls' included."""
    writer = os.environ.get("DS41_GGUF_WRITE")
    if not writer:
        pytest.skip("DS41_GGUF_WRITE (the ds41-gguf-write binary) not given; CTest gives it")
    path = goldens / "ds41_tiny_dspark_golden.json"
    draft = tmp_path / "draft.gguf"
    subprocess.run([writer, str(path), str(tmp_path / "tiny"), "--draft", str(draft)], check=True, capture_output=True)
    first = sorted(tmp_path.glob("tiny*.gguf"))[0]
    model = ds41.Model.from_gguf(first, draft=draft)
    assert model.has_draft_head
    problems, compared = gc.run_golden(model, gc.load(path))
    assert compared > 0 and problems == [], "\n".join(problems[:20])
    assert not ds41.Model.from_gguf(first).has_draft_head


def test_checker_catches_a_difference(goldens):
    """The comparison can fail: one element of one capture changed by one ulp, a missing capture,
    a wrong argmax."""
    path = goldens / "ds41_tiny_golden.json"
    g = gc.load(path)
    model = ds41.Model.from_golden(path)
    with model.new_sequence() as seq:
        logits, caps = seq.extend(g["steps"][0]["tokens"], capture=True)
    caps = dict(caps[0])
    argmax = int(np.argmax(logits))
    assert gc.compare_step(g["steps"][0], caps, argmax) == []
    bumped = dict(caps)
    a = bumped["layers.0.attn_in"].copy()
    a.reshape(-1)[0] = np.nextafter(a.reshape(-1)[0], np.float32(np.inf))
    bumped["layers.0.attn_in"] = a
    assert any("attn_in" in p for p in gc.compare_step(g["steps"][0], bumped, argmax))
    missing = {k: v for k, v in caps.items() if k != "embed"}
    assert any("'embed' missing" in p for p in gc.compare_step(g["steps"][0], missing, argmax))
    assert any("argmax" in p for p in gc.compare_step(g["steps"][0], caps, argmax + 1))

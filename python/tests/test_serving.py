"""Serving through the module: batches, chunks, rewind and snapshots give the bits of one sequence
fed token by token; values forced into a tap are what the rest of the model runs on."""
import numpy as np
import pytest

import ds41
import golden_check as gc

PROMPTS = [[5, 17, 3, 99, 4, 250, 1], [7, 7, 7], [200, 13, 54, 8, 8, 8, 31, 90, 2, 11]]
DECODE = [[12, 40, 3, 3, 77], [9, 1, 255, 0, 5], [60, 61, 62, 63, 64]]


def same_bits(a, b):
    a, b = np.ascontiguousarray(a, np.float32), np.ascontiguousarray(b, np.float32)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def alone(model, prompt, decode):
    """Each step's logits of one sequence fed its prompt, then one token per step."""
    with model.new_sequence() as s:
        out = [s.extend(prompt)]
        out += [s.extend([t]) for t in decode]
    return out


def test_batch_equals_alone(tiny):
    want = [alone(tiny, p, d) for p, d in zip(PROMPTS, DECODE)]
    seqs = [tiny.new_sequence() for _ in PROMPTS]
    got = [[] for _ in PROMPTS]
    for i, l in enumerate(tiny.step(list(zip(seqs, PROMPTS)))):
        got[i].append(l)
    for k in range(len(DECODE[0])):
        for i, l in enumerate(tiny.step([(s, [d[k]]) for s, d in zip(seqs, DECODE)])):
            got[i].append(l)
    for w, g in zip(want, got):
        assert len(w) == len(g) and all(same_bits(a, b) for a, b in zip(w, g))


def test_chunks_equal_one_token_per_step(tiny):
    want = alone(tiny, PROMPTS[0], DECODE[0])
    with tiny.new_sequence() as s:
        assert same_bits(s.extend(PROMPTS[0]), want[0])
        rows = s.extend(DECODE[0], all_logits=True)
        assert rows.shape == (len(DECODE[0]), tiny.config["vocab_size"])
        assert all(same_bits(rows[i], want[i + 1]) for i in range(len(DECODE[0])))
        assert s.length == len(PROMPTS[0]) + len(DECODE[0])


def test_prompt_all_logits_last_row(tiny):
    with tiny.new_sequence() as s:
        rows = s.extend(PROMPTS[2], all_logits=True)
    assert rows.shape == (len(PROMPTS[2]), tiny.config["vocab_size"])
    assert same_bits(rows[-1], alone(tiny, PROMPTS[2], [])[0])


def test_rollback_leaves_no_trace(tiny):
    with tiny.new_sequence() as s:
        s.extend(PROMPTS[0])
        s.extend(DECODE[0][:2])
        before = s.snapshot()
        s.checkpoint()
        assert s.checkpoint_length == s.length
        s.extend([1, 2, 3, 4])
        s.rollback()
        assert s.checkpoint_length == -1
        assert s.snapshot() == before
        after = s.extend(DECODE[0][2:3])
    want = alone(tiny, PROMPTS[0], DECODE[0][:3])[-1]
    assert same_bits(after, want)


def test_truncate_within_checkpoint(tiny):
    with tiny.new_sequence() as s:
        s.extend(PROMPTS[1])
        s.checkpoint()
        s.extend([4, 5])
        mid = s.snapshot()
        s.extend([6, 7, 8])
        s.truncate(len(PROMPTS[1]) + 2)
        assert s.length == len(PROMPTS[1]) + 2
        assert s.snapshot() == mid
        s.commit()


def test_snapshot_restore_continues_with_same_bits(tiny):
    with tiny.new_sequence() as s:
        s.extend(PROMPTS[2])
        data = s.snapshot()
        assert isinstance(data, bytes)
        a = s.extend(DECODE[2], all_logits=True)
    with tiny.restore(data) as r:
        assert r.length == len(PROMPTS[2])
        b = r.extend(DECODE[2], all_logits=True)
    assert same_bits(a, b)


def test_captures_per_step_and_selection(tiny):
    with tiny.new_sequence() as s:
        _, caps = s.extend(PROMPTS[0], capture="layers.0.")
        assert len(caps) == 1 and caps[0] and all(k.startswith("layers.0.") for k in caps[0])
        assert caps[0]["layers.0.attn_in"].shape == (len(PROMPTS[0]), tiny.config["dim"])
        _, caps = s.extend([1, 2, 3], capture=["embed", "logits"])
        assert len(caps) == 3 and set(caps[0]) == {"embed", "logits"}
        assert caps[1]["embed"].shape == (1, tiny.config["dim"])
        assert caps[2].dtypes["embed"] == "bf16" and caps[2].dtypes["logits"] == "f32"
        bits = caps[2].bf16("embed")
        assert bits.dtype == np.uint16 and np.array_equal((bits.astype(np.uint32) << 16).view(np.float32), caps[2]["embed"])
        with pytest.raises(ds41.Error):
            caps[2].bf16("logits")


def test_force_runs_the_rest_on_given_values(tiny):
    """head_in of token b forced into token a's step gives token b's logits, bit for bit; the last
    layer's ffn_in forced likewise gives b's ffn_out (the MoE is stateless). The capture of a forced
    tap shows ds41's own value."""
    last = tiny.config["n_layers"] - 1
    names = ["head_in", f"layers.{last}.ffn_in", f"layers.{last}.ffn_out"]
    with tiny.new_sequence() as s:
        s.extend(PROMPTS[0])
        base = s.snapshot()
        lb, cb = s.extend([42], capture=names)
    with tiny.restore(base) as s:
        la, ca = s.extend([43], capture=names)
    assert not same_bits(la, lb)
    with tiny.restore(base) as s:
        lf, cf = s.extend([43], capture=names, force={"head_in": cb[0]["head_in"]})
        assert same_bits(lf, lb)
        assert same_bits(cf[0]["head_in"], ca[0]["head_in"])  # ds41's value, before the replacement
    with tiny.restore(base) as s:
        _, cf = s.extend([43], capture=names, force={f"layers.{last}.ffn_in": cb[0][f"layers.{last}.ffn_in"]})
        assert same_bits(cf[0][f"layers.{last}.ffn_out"], cb[0][f"layers.{last}.ffn_out"])


def test_force_with_a_torch_like_array(tiny):
    """Force values may be any array-like of the tap's size (a list here), any shape."""
    with tiny.new_sequence() as s:
        s.extend(PROMPTS[1])
        dim = tiny.config["dim"]
        logits = s.extend([3], force={"head_in": [0.0] * dim})
    assert np.all(logits == 0.0)  # the head of a zero row


def test_force_applies_to_every_row(tiny):
    dim = tiny.config["dim"]
    with tiny.new_sequence() as s:
        s.extend(PROMPTS[1])
        rows = s.extend([3, 4, 5], all_logits=True, force={"head_in": np.zeros(dim, np.float32)})
        assert rows.shape[0] == 3 and np.all(rows == 0.0)
        last = s.extend([6, 7], force={"head_in": np.zeros(dim, np.float32)})
        assert last.shape == (tiny.config["vocab_size"],) and np.all(last == 0.0)


def test_threads_on_one_model(tiny):
    """Python threads may share a model: calls take turns (the GIL is released while a step runs)."""
    import threading

    want = [alone(tiny, p, d) for p, d in zip(PROMPTS, DECODE)]
    got = [None] * len(PROMPTS)

    def work(i):
        got[i] = alone(tiny, PROMPTS[i], DECODE[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for w, g in zip(want, got):
        assert g is not None and all(same_bits(a, b) for a, b in zip(w, g))


# ------------------------------------------------------------------ DSpark (SCHEMA §11, docs/DSPARK.md)
def _dspark_model(goldens):
    return ds41.Model.from_golden(goldens / "ds41_tiny_dspark_golden.json")


def test_dspark_draft_and_greedy_speculation_equal_plain_decoding(goldens):
    """Greedy speculation gives plain greedy decoding's tokens and the same logits bit for bit;
    the sequence's bytes afterwards are plain decoding's (rejected drafts leave no trace)."""
    m = _dspark_model(goldens)
    assert m.has_draft_head
    g = gc.load(goldens / "ds41_tiny_dspark_golden.json")
    prompt = g["fixture"]["prompt_tokens"]
    n = 14
    with m.new_sequence() as plain:
        logits = plain.extend(prompt)
        toks, rows = [], []
        for _ in range(n):
            toks.append(int(np.argmax(logits)))
            logits = plain.extend([toks[-1]])
            rows.append(logits)
        spec = m.speculator(draft_len=3)
        with m.new_sequence() as s:
            anchor = spec.choose(s.extend(prompt))
            got, got_rows = [], []
            while len(got) < n:
                tokens, dlogits, conf = s.draft(anchor)
                assert tokens.shape == (g["fixture"]["config"]["dspark_block_size"] + 1,) and tokens[0] == anchor
                assert dlogits.shape == (tokens.size - 1, m.config["vocab_size"]) and conf.shape == (tokens.size - 1,)
                r = spec.round(s, anchor)
                assert r["accepted"] <= r["drafted"] <= 3 and r["tokens"].size == r["accepted"] + 1
                got += [int(t) for t in r["tokens"]]
                got_rows += list(r["logits"])
                anchor = r["next"]
            assert got[:n] == toks
            for a, b in zip(got_rows[:n], rows):
                assert np.array_equal(a, b)
            with m.new_sequence() as ref:  # the same tokens decoded plainly: the same bytes
                ref.extend(prompt)
                for t in got:
                    ref.extend([t])
                assert ref.snapshot() == s.snapshot()
        st = spec.stats
        assert st["rounds"] >= 1 and st["tokens_per_round"] >= 1


def test_dspark_batch_and_errors(goldens):
    m = _dspark_model(goldens)
    g = gc.load(goldens / "ds41_tiny_dspark_golden.json")
    prompt = g["fixture"]["prompt_tokens"]
    spec = m.speculator(temperature=0.9, seed=3)
    a, b = m.new_sequence(), m.new_sequence()
    anchors = [spec.choose(a.extend(prompt)), spec.choose(b.extend(prompt[:-2]))]
    rounds = spec.round_batch([(a, anchors[0]), (b, anchors[1])])
    assert len(rounds) == 2
    assert a.length == len(prompt) + rounds[0]["tokens"].size
    assert b.length == len(prompt) - 2 + rounds[1]["tokens"].size
    with pytest.raises(ds41.Error, match="same sequence"):
        spec.round_batch([(a, 1), (a, 2)])
    with pytest.raises(ds41.Error, match="vocab"):
        a.draft(10**6)
    with pytest.raises(ds41.Error, match="draft_len"):
        m.speculator(draft_len=99)
    plain = ds41.Model.from_golden(goldens / "ds41_tiny_golden.json")
    assert not plain.has_draft_head
    with plain.new_sequence() as s:
        s.extend(prompt)
        with pytest.raises(ds41.Error, match="no draft head"):
            s.draft(1)
    with pytest.raises(ds41.Error, match="no draft head"):
        plain.speculator()

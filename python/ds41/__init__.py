"""ds41 — DeepSeek-V4.1-Flash, bit for bit with DeepSeek's reference, from Python.

Load a model, serve sequences, and check an engine's layer against ds41 tensor by tensor::

    import ds41
    model = ds41.Model.from_golden("golden/ds41_tiny_golden.json")   # or from_gguf / from_checkpoint
    seq = model.new_sequence()
    logits, caps = seq.extend([5, 17, 3], capture=["layers.0."])   # caps[0]["layers.0.attn_in"]
    logits = seq.extend([int(logits.argmax())])                     # one decode step

Arrays come back as numpy arrays (float32 logits; captures float32, or int32 for integer ones) that
own ds41's buffers; ``torch.from_numpy`` shares them without a copy. Inputs take anything
``numpy.asarray`` takes (lists, numpy arrays, CPU torch tensors, DLPack producers). Errors are
:class:`ds41.Error` (a ``ValueError``) with ds41's message. docs/PYTHON.md has the worked example.
"""
from __future__ import annotations

import os
from typing import Iterable, Mapping, Optional, Sequence as _Seq, Union

import numpy as np

from . import _ds41
from ._ds41 import Error

__all__ = ["Model", "Sequence", "Speculator", "Captures", "Error", "bf16_bits"]


def bf16_bits(values) -> np.ndarray:
    """The bf16 encodings (uint16) of float32 values that are bf16 values (ds41's bf16 captures
    are: they come back as the float32 of each bf16 element, exactly). Raises where a value is not
    a bf16 value (its low 16 bits are not zero)."""
    a = np.ascontiguousarray(np.asarray(values, dtype=np.float32))
    bits = a.view(np.uint32)
    if np.any(bits & 0xFFFF):
        raise Error("bf16_bits: the values are not all bf16 values (low 16 bits set)")
    return (bits >> 16).astype(np.uint16)


def _as_array(x, dtype=None) -> np.ndarray:
    """numpy view of an array-like; torch bf16 tensors (which numpy cannot hold) as float32."""
    if type(x).__module__.startswith("torch") and str(getattr(x, "dtype", "")) == "torch.bfloat16":
        x = x.float()
    try:
        a = np.asarray(x)
    except (TypeError, RuntimeError):
        a = np.from_dlpack(x)  # a DLPack producer numpy.asarray does not know
    return a if dtype is None else a.astype(dtype, copy=False)


def _tokens(tokens, what: str) -> np.ndarray:
    a = _as_array(tokens)
    if a.ndim == 0:
        a = a.reshape(1)
    if a.ndim != 1:
        raise Error(f"{what}: tokens must be a 1-D sequence of ids, got shape {tuple(a.shape)}")
    if a.size == 0:
        raise Error(f"{what}: no tokens")
    if a.dtype == np.bool_ or a.dtype.kind not in "iu":
        raise Error(f"{what}: tokens must be integer ids, got dtype {a.dtype}")
    if a.dtype == np.uint64 and a.max() > np.iinfo(np.int64).max:
        raise Error(f"{what}: token {int(a.max())} is outside the model's vocab")
    return np.ascontiguousarray(a, dtype=np.int64)


def _selection(capture, what: str):
    """capture= as the module takes it: None (no captures), [] (all), or name prefixes."""
    if capture is True:
        return []
    if isinstance(capture, str):
        return [capture]
    if capture in (None, False):
        return None
    sel = [str(c) for c in capture]
    if not sel:
        raise Error(f"{what}: capture=[] selects nothing (True captures every tap)")
    return sel


class Speculator:
    """Speculative decoding with the model's DSpark draft head (Model.speculator): each round
    drafts at the end of each sequence, verifies [anchor, d1..dk] in one batched step and keeps
    what the target agrees with. Greedy (temperature 0) gives exactly plain greedy decoding;
    sampled acceptance is lossless rejection sampling (docs/DSPARK.md)."""

    def __init__(self, model: "Model", handle):
        self._model = model
        self._h = handle

    def round(self, sequence: "Sequence", anchor: int) -> dict:
        """One round on one sequence: a dict with ``tokens`` (appended: the anchor and the
        accepted drafts), ``logits`` [len(tokens), vocab] (the target's at each appended
        position), ``drafted``, ``accepted`` and ``next`` (the next anchor)."""
        return self.round_batch([(sequence, anchor)])[0]

    def round_batch(self, items) -> list:
        """One round on each (sequence, anchor) at once: one verify step for all (ragged accepts)."""
        out = []
        for i, it in enumerate(items):
            try:
                seq, anchor = it
            except (TypeError, ValueError):
                raise Error(f"speculator: item {i} is not a (sequence, anchor) pair") from None
            if not isinstance(seq, Sequence):
                raise Error(f"speculator: item {i}'s first item is not a ds41.Sequence")
            out.append((seq._s, int(anchor)))
        return self._h.round(out)

    def choose(self, logits) -> int:
        """The target's choice from a logits row (argmax, or a draw with the sampling options):
        the first anchor after a prompt."""
        return self._h.choose(np.ascontiguousarray(_as_array(logits, np.float32)).reshape(-1))

    @property
    def stats(self) -> dict:
        """rounds, drafted, accepted, tokens_per_round, draft_s, verify_s, rewind_s."""
        return self._h.stats


class Captures(dict):
    """One step's captures, name -> numpy array, as the golden names them ("embed",
    "layers.3.attn_in", "logits", ...). Float captures (bf16 and f32) are float32 arrays, integer
    and bool captures int32. ``dtypes[name]`` is the reference's dtype ('bf16', 'f32', 'i32',
    'bool'); ``bf16(name)`` the bf16 encodings of a bf16 capture."""

    def __init__(self, values: dict, dtypes: dict):
        super().__init__(values)
        self.dtypes = dict(dtypes)

    def bf16(self, name: str) -> np.ndarray:
        if self.dtypes.get(name) != "bf16":
            raise Error(f"captures: '{name}' is not a bf16 capture ({self.dtypes.get(name, 'absent')})")
        return bf16_bits(self[name])


class Sequence:
    """One sequence of a model (Model.new_sequence / Model.restore): its state lives in ds41.
    Usable as a context manager (closed on exit)."""

    def __init__(self, model: "Model", handle):
        self._model = model
        self._s = handle

    # ------------------------------------------------------------------ state
    @property
    def model(self) -> "Model":
        return self._model

    @property
    def length(self) -> int:
        """Tokens in the sequence: the next token goes to this position."""
        return self._s.length

    @property
    def broken(self) -> bool:
        """A step failed half-way on it: reset() it (or rollback() to an open checkpoint)."""
        return self._s.broken

    @property
    def closed(self) -> bool:
        return self._s.closed

    @property
    def checkpoint_length(self) -> int:
        """Length at the open checkpoint, -1 when none is open."""
        return self._s.checkpoint_length

    # ------------------------------------------------------------------ serving
    def extend(self, tokens, all_logits: bool = False, capture: Union[None, bool, str, Iterable[str]] = None,
               force: Optional[Mapping[str, object]] = None):
        """Continue the sequence by ``tokens`` (its prompt when it is empty; later, exactly what one
        decode step per token gives).

        Returns the logits (float32 [vocab] of the last row, or [T, vocab] of every row with
        ``all_logits``). With ``capture`` (True: every tap; a name prefix or a list of them, e.g.
        "layers.2." or ["embed", "layers.0.attn"]) returns ``(logits, captures)``: a list of
        :class:`Captures`, one per step (a prompt is one step holding all its positions; each
        continuation token is one step of shape [1, ...]).

        ``force``: name -> values put into that tap in place of what ds41 computed (every step of
        the call), so the rest of the model runs on the caller's tensor: a component on the
        caller's inputs at this position and state. A captured tap that is forced shows ds41's own
        value (taken before the replacement). A name that no capture of the step has is refused
        and the step taken back."""
        ids = _tokens(tokens, "extend")
        sel = _selection(capture, "extend")
        forced = {}
        for name, v in (force or {}).items():
            forced[str(name)] = np.ascontiguousarray(_as_array(v, np.float32)).reshape(-1)
        logits, values, dtypes = self._s.extend(ids, all_logits, sel, forced)
        if sel is None:
            return logits
        return logits, [Captures(v, t) for v, t in zip(values, dtypes)]

    def draft(self, anchor: int, capture: Union[None, bool, str, Iterable[str]] = None):
        """DSpark's draft at the end of the sequence (a model with the draft head): ``anchor`` is
        the token for the next position (the target's own choice there). Returns ``(tokens,
        logits, confidence)``: tokens [B+1] (the anchor, then the B drafted), the draft logits
        [B, vocab] with the Markov bias, the raw confidences [B]; with ``capture`` also the
        draft's Captures ("dspark.mtp.0.q", ...). Changes nothing in the sequence."""
        sel = _selection(capture, "draft")
        tokens, logits, conf, values, dtypes = self._s.draft(int(anchor), sel)
        if sel is None:
            return tokens, logits, conf
        return tokens, logits, conf, Captures(values, dtypes)

    def checkpoint(self) -> None:
        """Open an undo record at the current length (one at a time)."""
        self._s.checkpoint()

    def rollback(self) -> None:
        """Back to the open checkpoint's length, exactly as it was; the checkpoint closes."""
        self._s.rollback()

    def commit(self) -> None:
        """Keep what was decoded since the checkpoint; the checkpoint closes."""
        self._s.commit()

    def truncate(self, n: int) -> None:
        """Back to length n: 0, the length now, or at/after the open checkpoint's length."""
        self._s.truncate(int(n))

    def reset(self) -> None:
        """Empty the sequence (length 0)."""
        self._s.reset()

    def snapshot(self) -> bytes:
        """The whole state as bytes; Model.restore() continues it with the same bits."""
        return self._model._m.snapshot(self._s)

    def close(self) -> None:
        """Free the sequence's state now; later calls on it raise ds41.Error."""
        self._s.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self) -> str:
        if self.closed:
            return "<ds41.Sequence closed>"
        return f"<ds41.Sequence length={self.length}>"


class Model:
    """A DeepSeek-V4.1 model on ds41's host backend."""

    def __init__(self, handle):
        self._m = handle

    @classmethod
    def from_golden(cls, path: Union[str, os.PathLike]) -> "Model":
        """The model of a golden file (SCHEMA.md), its weights regenerated by the golden's filler."""
        return cls(_ds41.Model.from_golden(os.fspath(path)))

    @classmethod
    def from_gguf(cls, path: Union[str, os.PathLike], cache_experts: int = 0, draft=None) -> "Model":
        """A GGUF model (path of its first shard). cache_experts > 0: routed experts streamed from
        the file through a cache of that many experts (else all resident). draft: a DSpark draft
        file (llama.cpp's dflash or ds4's support GGUF) giving the model its draft head."""
        return cls(_ds41.Model.from_gguf(os.fspath(path), int(cache_experts), os.fspath(draft) if draft else ""))

    @classmethod
    def from_checkpoint(cls, dir: Union[str, os.PathLike], max_seq_len: int = 4096, golden=None, tokenizer=None,
                        cache_experts: int = 0) -> "Model":
        """A safetensors checkpoint in DeepSeek's release layout (config.json, shards). Engram hash
        parameters come from ``golden`` (a golden file of this model; its max_seq_len too) or are
        derived from the tokenizer (``tokenizer`` or DIR/tokenizer.json)."""
        return cls(_ds41.Model.from_checkpoint(os.fspath(dir), int(max_seq_len),
                                               os.fspath(golden) if golden else "",
                                               os.fspath(tokenizer) if tokenizer else "", int(cache_experts)))

    @property
    def config(self) -> dict:
        return self._m.config

    @property
    def source(self) -> str:
        return self._m.source

    @property
    def has_draft_head(self) -> bool:
        """Whether the model has DSpark's draft head (Sequence.draft, Model.speculator)."""
        return self._m.has_draft_head

    def speculator(self, draft_len: int = 0, confidence: Optional[float] = None, temperature: float = 0.0,
                   top_k: int = 0, top_p: float = 1.0, seed: int = 0) -> Speculator:
        """A speculative decoder: ``draft_len`` drafts verified per round (0: the block size);
        ``confidence``: cut a draft before the first position whose sigmoid(confidence) is below
        it; sampling options as the sampler's (temperature 0: greedy)."""
        return Speculator(self, self._m.speculator(int(draft_len), -1.0 if confidence is None else float(confidence),
                                                   float(temperature), int(top_k), float(top_p), int(seed)))

    def new_sequence(self) -> Sequence:
        """A new, empty sequence (any number may be alive at once)."""
        return Sequence(self, self._m.new_sequence())

    def restore(self, data: Union[bytes, bytearray, memoryview]) -> Sequence:
        """A sequence made of Sequence.snapshot() bytes."""
        return Sequence(self, self._m.restore(bytes(data)))

    def step(self, segments: _Seq, all_logits: bool = False) -> list:
        """One batched step: ``segments`` is a list of (sequence, tokens); each sequence is
        continued by its tokens with the bits it would get alone. Every segment is checked before
        any work (nothing changes when one is bad). Returns each segment's logits ([vocab], or
        [T, vocab] with all_logits)."""
        segs = []
        for i, seg in enumerate(segments):
            try:
                seq, toks = seg
            except (TypeError, ValueError):
                raise Error(f"step: segment {i} is not a (sequence, tokens) pair") from None
            if not isinstance(seq, Sequence):
                raise Error(f"step: segment {i}'s first item is not a ds41.Sequence")
            segs.append((seq._s, _tokens(toks, "step")))
        return self._m.step(segs, all_logits)

    def __repr__(self) -> str:
        c = self.config
        return (f"<ds41.Model {self.source}: {c['n_layers']} layers, dim {c['dim']}, vocab {c['vocab_size']}, "
                f"{c['n_routed_experts']} experts top-{c['n_activated_experts']}>")

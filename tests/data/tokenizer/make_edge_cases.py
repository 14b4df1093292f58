#!/usr/bin/env python3
"""Prints the HF tokenizers results that tests/test_tokenizer.cpp ("Split behaviors, ... follow HF")
checks: tiny tokenizer.json documents (no byte level) with each Split behavior, invert, empty
matches, ^, dropped characters, added-token flags and ids, and decode without / with ByteLevel.
    VENV/bin/python make_edge_cases.py      (used: tokenizers 0.23.3)
"""
from tokenizers import Tokenizer
import json
vocab={"a": 0, "b": 1, "-": 2, " ": 3, "ab": 4, "X": 5}
def tok(pre=None, added=[], decoder=None):
    d={"version":"1.0","added_tokens":added,"normalizer":None,"pre_tokenizer":pre,"post_processor":None,"decoder":decoder,
       "model":{"type":"BPE","vocab":vocab,"merges":["a b"]}}
    return Tokenizer.from_str(json.dumps(d))
def sp(pat, beh, inv=False, kind="Regex"): return {"type":"Split","pattern":{kind:pat},"behavior":beh,"invert":inv}
cases=[("removed",sp("-","Removed",kind="String"),"ab-ab"),("isolated",sp("b","Isolated"),"ab"),("prev",sp("b","MergedWithPrevious"),"abab"),
 ("next",sp("a","MergedWithNext"),"abab"),("inv",sp("a","Removed",True),"abXa"),("none",None,"aZb"),("contig",sp("a","Contiguous"),"aabXab"),
 ("empty", sp("X*","Isolated"), "abXXab"), ("anchor", sp("^a","Isolated"), "ab\nab")]
for name,p,text in cases: print(name, text.encode(), tok(p).encode(text).ids)
F={"single_word":False,"lstrip":False,"rstrip":False}
def add(flags): return [{"id":6,"content":"ab","special":True,"normalized":False,**{**F,**flags}},{"id":7,"content":"abX","special":False,"normalized":True,**F}]
for flags,text in [({}, "abXab"),({"single_word":True},"aab b"),({"single_word":True},"- ab -"),({"lstrip":True,"rstrip":True},"a  ab  b")]:
    print(flags, text, tok(None, add(flags)).encode(text).ids)
print(tok(None, [{"id":9,"content":"abX","special":False,"normalized":True,**F}]).encode("abXab").ids)

print("sw2", tok(None, add({"single_word":True})).encode("ab- xab ab").ids)
print("ls", tok(None, add({"lstrip":True})).encode("a   ab b").ids)
print("dec", repr(tok(None, add({}), {"type":"ByteLevel","add_prefix_space":True,"trim_offsets":True,"use_regex":True}).decode([0,6,3,7])), repr(tok(None, add({})).decode([0,6,3,7])))

# A minimal byte-level BPE tokenizer.json (256 byte tokens + one merge "t h" -> 256), for tests
# of models with small vocabularies. usage: make_byte_tokenizer.py OUT
import json, sys
def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~")+1))+list(range(ord("¡"), ord("¬")+1))+list(range(ord("®"), ord("ÿ")+1))
    cs = bs[:]; n = 0
    for b in range(256):
        if b not in bs: bs.append(b); cs.append(256+n); n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}
m = bytes_to_unicode()
vocab = {m[b]: b for b in range(256)}
vocab[m[ord('t')] + m[ord('h')]] = 256
tok = {"version": "1.0", "added_tokens": [], "normalizer": None,
       "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
       "post_processor": None, "decoder": {"type": "ByteLevel"},
       "model": {"type": "BPE", "vocab": vocab, "merges": [[m[ord('t')], m[ord('h')]]]}}
json.dump(tok, open(sys.argv[1], "w"))

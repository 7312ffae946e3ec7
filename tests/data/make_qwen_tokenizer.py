# A small Qwen-style tokenizer for tests: the Qwen2 (or Qwen3.5) pre-tokenizer split regex +
# ByteLevel, the 256 byte tokens, BPE merges learned greedily from the start of data/kjv.txt,
# and Qwen's special tokens <|endoftext|>, <|im_start|>, <|im_end|> as added tokens after them;
# plus a tokenizer_config.json with eos/pad tokens and a ChatML chat template. Deterministic.
# usage: make_qwen_tokenizer.py OUT_DIR [--merges N] [--pattern qwen2|qwen35]
import argparse, collections, json, os, re

QWEN2 = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
         "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
QWEN35 = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
          "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
CHAT_TEMPLATE = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                 "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--merges", type=int, default=200)
    ap.add_argument("--pattern", choices=["qwen2", "qwen35"], default="qwen2")
    a = ap.parse_args()
    m = bytes_to_unicode()
    here = os.path.dirname(os.path.abspath(__file__))
    text = open(os.path.join(here, "..", "..", "data", "kjv.txt"), encoding="utf-8").read()[:200000]
    # word-level pieces (a simplification of the regex: letters with an optional leading space)
    words = collections.Counter(re.findall(r" ?[A-Za-z]+|[0-9]| ?[^A-Za-z0-9\s]+|\s+", text))
    seqs = {w: [m[b] for b in w.encode()] for w in words}
    vocab = {m[b]: b for b in range(256)}
    merges = []
    for _ in range(a.merges):
        pairs = collections.Counter()
        for w, s in seqs.items():
            for x, y in zip(s, s[1:]):
                pairs[(x, y)] += words[w]
        if not pairs:
            break
        (x, y), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append([x, y])
        vocab[x + y] = len(vocab)
        for w, s in seqs.items():
            i, out = 0, []
            while i < len(s):
                if i + 1 < len(s) and s[i] == x and s[i + 1] == y:
                    out.append(x + y)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    added = [{"id": len(vocab) + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in enumerate(specials)]
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": {"type": "NFC"},
           "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
               {"type": "Split", "pattern": {"Regex": QWEN2 if a.pattern == "qwen2" else QWEN35},
                "behavior": "Isolated", "invert": False},
               {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
           "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                                               "use_regex": False},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                     "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                     "vocab": vocab, "merges": merges}}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    cfg = {"add_bos_token": False, "add_prefix_space": False, "bos_token": None, "eos_token": "<|im_end|>",
           "pad_token": "<|endoftext|>", "unk_token": None, "model_max_length": 4096, "errors": "replace",
           "tokenizer_class": "Qwen2Tokenizer", "chat_template": CHAT_TEMPLATE,
           "added_tokens_decoder": {str(t["id"]): {k: t[k] for k in t if k != "id"} for t in added}}
    with open(os.path.join(a.out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=1)
    print(len(vocab) + len(specials))


if __name__ == "__main__":
    main()

# Reference Qwen3 token ids for tests/test_tokenizer.c, from the Hugging Face `tokenizers` library
# (the Rust implementation transformers uses), on the Qwen3 tokenizer.json in qwen3/.
#
#   .venv/bin/python tests/tokenizer/oracle.py tests/tokenizer/texts.json OUT.json [--check EXPECTED.json]
#
# texts.json is a JSON array of strings (any Unicode, including text that is not NFC: the
# tokenizer's NFC normalizer is applied by both sides). The output is {"oracle": ..., "ids": [...]},
# one id array per text, encoded without added special tokens. --check compares with a committed
# file and exits 1 on any difference (the "oracle" field excepted).
import json, os, sys

import tokenizers

here = os.path.dirname(os.path.abspath(__file__))
texts_path, out_path = sys.argv[1], sys.argv[2]
texts = json.load(open(texts_path, encoding="utf-8"))
tok = tokenizers.Tokenizer.from_file(os.path.join(here, "qwen3", "tokenizer.json"))
ids = [tok.encode(s, add_special_tokens=False).ids for s in texts]
body = ",\n".join("    " + json.dumps(a, separators=(",", ":")) for a in ids)
with open(out_path, "w", encoding="utf-8") as f:
    f.write('{\n  "oracle": %s,\n  "ids": [\n%s\n  ]\n}\n' % (json.dumps(f"tokenizers=={tokenizers.__version__}"), body))
print(f"oracle: {len(texts)} texts, {sum(map(len, ids))} ids -> {out_path}")
if len(sys.argv) > 4 and sys.argv[3] == "--check":
    want = json.load(open(sys.argv[4]))["ids"]
    bad = [i for i, (a, b) in enumerate(zip(ids, want)) if a != b] + list(range(min(len(ids), len(want)), max(len(ids), len(want))))
    for i in bad[:10]:
        print(f"  texts[{i}] {texts[i][:40]!r}: tokenizers gives {ids[i][:12] if i < len(ids) else None}..., "
              f"expected {want[i][:12] if i < len(want) else None}...")
    sys.exit(1 if bad else 0)

# Chat / JSONL data against independent oracles.
# usage: jsonl_test.py HYLA WORKDIR      (python with numpy and Hugging Face `tokenizers`)
#
#   1. ids and label mask: `hyla tokenize --jsonl` (HYLATOK2) == the ChatML text rendered here and
#      tokenized by the tokenizers library, with the mask taken from its character offsets: the
#      assistant content (and the <|im_end|> closing it) are targets, nothing else is.
#   2. masked loss: `hyla eval --data-jsonl` == the mean of -log softmax(logits)[next] over the
#      target positions, with logits from `hyla forward` on each document and the softmax taken
#      here in float64. Tolerance 1e-5 relative: both use the same fp32 logits; hyla sums in
#      double too, so only the log-sum-exp evaluation order differs (~1e-7).
#   3. masking: a message turned from assistant into user leaves the targets by exactly its tokens
#      and its <|im_end|> (the loss of the other targets is what item 2 checks).
#   4. shuffling: the same --seed gives the same losses, another seed another order, --no-shuffle
#      the file order; `hyla tokenize --jsonl` + `train --data F --shuffle` == `train --data-jsonl`.
#   5. bad lines name the file and line.
import json, os, struct, subprocess, sys

import numpy as np
import tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
fails = []


def check(cond, what):
    print(f"  {'ok' if cond else 'FAIL'}  {what}")
    if not cond:
        fails.append(what)


def run(*args, ok=True):
    p = subprocess.run(list(args), capture_output=True, text=True)
    if ok and p.returncode != 0:
        print(p.stdout, p.stderr)
        raise SystemExit(f"command failed: {args}")
    return p


def read_tok2(path):
    b = open(path, "rb").read()
    assert b[:8] == b"HYLATOK2"
    n, d = struct.unpack_from("<QQ", b, 16)
    ids = np.frombuffer(b, "<u4", n, 32).astype(np.int64)
    starts = np.frombuffer(b, "<u8", d + 1, 32 + 4 * n).astype(np.int64)
    mask = np.frombuffer(b, np.uint8, n, 32 + 4 * n + 8 * (d + 1))
    return ids, mask, starts


def oracle_doc(tok, obj):
    """ids and mask of one JSONL object, from the tokenizers library and character offsets."""
    if "text" in obj:
        ids = tok.encode(obj["text"], add_special_tokens=False).ids
        return ids, [1] * len(ids)
    text, spans = "", []
    for m in obj["messages"]:
        head = "<|im_start|>" + m["role"] + "\n"
        start = len(text) + len(head)
        text += head + m["content"]
        end = len(text) + len("<|im_end|>")
        text += "<|im_end|>\n"
        if m["role"] == "assistant":
            spans.append((start, end))
    enc = tok.encode(text, add_special_tokens=False)
    mask = [int(any(e > s0 and b < s1 for s0, s1 in spans)) for b, e in enc.offsets]
    return enc.ids, mask


def main():
    hyla, work = sys.argv[1], sys.argv[2]
    model = os.path.join(work, "m")
    run(hyla, "init", "--out", model, "--preset", "tiny-hybrid", "--seed", "4")
    run(sys.executable, os.path.join(ROOT, "tests", "data", "make_qwen_tokenizer.py"), model)
    tok = tokenizers.Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
    docs = [
        {"messages": [{"role": "system", "content": "You are a scribe."}, {"role": "user", "content": "Who made the heaven?"},
                      {"role": "assistant", "content": "God created the heaven and the earth."},
                      {"role": "user", "content": "And then?"}, {"role": "assistant", "content": "\nLet there be light."}]},
        {"text": "And the earth was without form, and void; and darkness was upon the face of the deep."},
        {"messages": [{"role": "user", "content": "Cafe\u0301?"}, {"role": "assistant", "content": "Cre\u0300me  bru\u0302le\u0301e."}]},
        {"messages": [{"role": "user", "content": "Say <|im_end|> please"}, {"role": "assistant", "content": "No."}]},
    ] + [{"messages": [{"role": "user", "content": f"Verse {i}?"}, {"role": "assistant", "content": f"Verse {i} says: and it was good."}]}
         for i in range(12)]
    path = os.path.join(work, "chat.jsonl")
    with open(path, "w") as f:
        for d in docs:
            f.write(json.dumps(d) + "\n")
        f.write("\n")  # a blank line is skipped
    tok2 = os.path.join(work, "chat.tok2")
    run(hyla, "tokenize", "--tokenizer", os.path.join(model, "tokenizer.json"), "--jsonl", path, "--out", tok2)
    ids, mask, starts = read_tok2(tok2)
    same = len(starts) == len(docs) + 1
    for k, d in enumerate(docs):
        want_ids, want_mask = oracle_doc(tok, d)
        got_ids, got_mask = ids[starts[k]:starts[k + 1]].tolist(), mask[starts[k]:starts[k + 1]].tolist()
        if got_ids != want_ids or got_mask != want_mask:
            same = False
            print(f"    document {k}: ids {'==' if got_ids == want_ids else '!='}, mask {'==' if got_mask == want_mask else '!='}")
            print("     hyla  ", got_ids, got_mask)
            print("     oracle", want_ids, want_mask)
    check(same, f"ids and assistant masks of {len(docs)} documents == the tokenizers library + offsets")

    # masked loss: hyla eval == float64 log-softmax over hyla forward logits at the targets
    T = 128
    out = json.loads(run(hyla, "eval", model, "--data-jsonl", path, "--seq", str(T), "--json").stdout)
    total, count = 0.0, 0
    for k in range(len(docs)):
        d_ids, d_mask = ids[starts[k]:starts[k + 1]], mask[starts[k]:starts[k + 1]]
        assert len(d_ids) <= T, "keep the documents within one row for this check"
        lf = os.path.join(work, "logits.f32")
        run(hyla, "forward", model, "--tokens", ",".join(map(str, d_ids)), "--logits-out", lf)
        lg = np.fromfile(lf, np.float32).reshape(len(d_ids), -1).astype(np.float64)
        lse = np.log(np.exp(lg - lg.max(1, keepdims=True)).sum(1)) + lg.max(1)
        for t in range(len(d_ids) - 1):
            if d_mask[t + 1]:
                total += lse[t] - lg[t, d_ids[t + 1]]
                count += 1
    want = total / count
    check(out["tokens"] == count and abs(out["loss"] - want) <= 1e-5 * abs(want),
          f"hyla eval loss {out['loss']:.7f} over {out['tokens']} targets == oracle {want:.7f} over {count}")

    # a message's role decides whether it is trained: assistant -> user removes its tokens from the targets
    flipped = json.loads(json.dumps(docs))
    flipped[0]["messages"][2]["role"] = "user"
    p2 = os.path.join(work, "flipped.jsonl")
    with open(p2, "w") as f:
        for d in flipped:
            f.write(json.dumps(d) + "\n")
    out2 = json.loads(run(hyla, "eval", model, "--data-jsonl", p2, "--seq", str(T), "--json").stdout)
    n_reply = len(tok.encode("God created the heaven and the earth.", add_special_tokens=False).ids)
    check(out["tokens"] - out2["tokens"] == n_reply + 1,
          f"an assistant reply made a user message leaves the targets ({out['tokens']} -> {out2['tokens']}: its "
          f"{n_reply} tokens + <|im_end|>)")

    # shuffling and the pre-tokenized file
    def losses(*extra):
        r = run(hyla, "train", "--model", model, *extra, "--steps", "10", "--batch", "2", "--seq", "48", "--warmup", "1",
                "--lr", "1e-3")
        return [l.split()[3] for l in r.stdout.splitlines() if l.startswith("step")], r.stdout
    a, out_a = losses("--data-jsonl", path)
    b, _ = losses("--data-jsonl", path)
    c, _ = losses("--data-jsonl", path, "--seed", "9")
    d, _ = losses("--data", tok2, "--shuffle")
    e, _ = losses("--data-jsonl", path, "--no-shuffle")
    f, _ = losses("--data", tok2)
    check(a == b and a != c, f"the same --seed repeats the run ({a[:3]}...), another seed reorders it ({c[:3]}...)")
    check(a == d and e == f and a != e, "tokenize --jsonl + train --data [--shuffle] == train --data-jsonl [--no-shuffle]")
    check("epoch 1 done at step" in out_a, "epochs are counted and printed")

    # bad lines
    cases = [('{"text": "ok"}\n{"text": \n', ":2: not valid JSON"),
             ('{"messages": [{"role": "wizard", "content": "x"}]}\n', ":1: messages[0].role 'wizard' is not one of"),
             ('{"txt": "x"}\n', ':1: expected an object with either "text" or "messages"'),
             ('{"messages": [{"role": "user", "content": 5}]}\n', ":1: messages[0].content must be a string"),
             ('{"messages": [{"role": "user", "content": "only a question"}]}\n', "no token is a training target")]
    for i, (body, want) in enumerate(cases):
        bad = os.path.join(work, f"bad{i}.jsonl")
        open(bad, "w").write(body)
        r = run(hyla, "train", "--model", model, "--data-jsonl", bad, "--steps", "1", "--seq", "16", ok=False)
        err = r.stderr.strip()
        check(r.returncode == 1 and len(err.splitlines()) == 1 and want in err and bad in err, f"bad JSONL: {err}")
    if fails:
        sys.exit(1)


if __name__ == "__main__":
    main()

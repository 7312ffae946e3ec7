# The chat fine-tuning sample in data/: conversations made from the KJV text (public domain, see
# data/README.md), deterministic. Each asks for a verse by reference, or for the verse that
# follows a quoted one, and the assistant answers with the verse.
# usage: make_chat_sample.py [KJV] [OUT_TRAIN] [OUT_EVAL]
import json, random, sys

kjv = sys.argv[1] if len(sys.argv) > 1 else "data/kjv.txt"
out_train = sys.argv[2] if len(sys.argv) > 2 else "data/chat_kjv.jsonl"
out_eval = sys.argv[3] if len(sys.argv) > 3 else "data/chat_kjv_eval.jsonl"
verses, book, chapter = [], None, None
for line in open(kjv, encoding="utf-8").read().splitlines()[:1600]:  # Genesis and the start of Exodus
    head = line.rsplit(" ", 1)
    if len(head) == 2 and head[1].isdigit() and len(line) < 30:
        book, chapter, n = head[0], int(head[1]), 0
        continue
    if line.strip() and book:
        n += 1
        verses.append((f"{book} {chapter}:{n}", line.strip()))
rng = random.Random(1611)
system = "You are a careful scribe. Answer with the words of the King James Bible."
convs = []
for i, (ref, text) in enumerate(verses):
    if rng.random() < 0.5:
        q = f"Recite {ref}."
        a = text
    elif i + 1 < len(verses):
        q = f"What follows \"{text}\"?"
        a = verses[i + 1][1]
    else:
        continue
    msgs = ([{"role": "system", "content": system}] if rng.random() < 0.5 else []) + \
           [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    convs.append({"messages": msgs})
rng.shuffle(convs)
held = convs[:60]
train = convs[60:660]
for path, rows in ((out_train, train), (out_eval, held)):
    with open(path, "w", encoding="utf-8") as f:
        for c in rows:
            f.write(json.dumps(c, ensure_ascii=False) + "\n")
    print(f"{path}: {len(rows)} conversations")

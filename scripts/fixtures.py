#!/usr/bin/env python3
"""Select the test fixture conversations from the full data set.

Reads every .jsonl file of DATA (default ../shared/data) and writes, under the
same file name in testdata/conversations/, a few of its conversations
unchanged (byte for byte, one per line): the file's first conversation, its
shortest, its median and its longest by size, and in files where tool-call
ids repeat, the first conversation that reuses one. Run it by hand when the
data set changes; tests never run it.
"""
import json
import os
import sys

data = sys.argv[1] if len(sys.argv) > 1 else os.path.join("..", "shared", "data")
out = os.path.join(os.path.dirname(__file__), "..", "testdata", "conversations")
os.makedirs(out, exist_ok=True)

def reuses_ids(conv):
    seen = set()
    for m in conv["messages"]:
        for c in m.get("tool_calls") or []:
            if c["id"] in seen:
                return True
            seen.add(c["id"])
    return False

for name in sorted(os.listdir(data)):
    if not name.endswith(".jsonl"):
        continue
    with open(os.path.join(data, name), "rb") as f:
        lines = [l for l in f.read().split(b"\n") if l.strip()]
    convs = [json.loads(l) for l in lines]
    by_size = sorted(range(len(lines)), key=lambda i: len(lines[i]))
    pick = [0, by_size[0], by_size[len(by_size) // 2], by_size[-1]]
    reuse = [i for i, c in enumerate(convs) if reuses_ids(c)]
    if reuse:
        pick.append(reuse[0])
    seen, chosen = set(), []
    for i in pick:
        if i not in seen:
            seen.add(i)
            chosen.append(i)
    with open(os.path.join(out, name), "wb") as f:
        for i in chosen:
            f.write(lines[i] + b"\n")
    print(f"{name}: {len(chosen)} of {len(lines)}: " + ", ".join(convs[i]["id"] for i in chosen))

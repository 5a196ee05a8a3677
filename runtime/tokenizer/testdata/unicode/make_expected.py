#!/usr/bin/env python3
"""Writes what HF tokenizers' NFC, NFKC, NFD, NFKD and Lowercase normalizers give for every code
point and for random sequences of combining marks, for runtime/tokenizer/unicode_normalize_test.cc.
The reference is `tokenizers` itself (its Rust normalizers), never our tables; CI has no
`tokenizers`, so the outputs are committed.

Writes next to this script:
  code_points.tsv  one line per code point that some form changes, Hangul syllables U+AC00-D7A3
                   excepted (their decompositions are checked by the hash below):
                   CODE<TAB>NFC<TAB>NFKC<TAB>NFD<TAB>NFKD<TAB>LOWERCASE, each field the output's
                   code points in hex joined by spaces, "" when the code point is unchanged and
                   "=" when equal to the field before it. Every code point not listed (surrogates
                   aside) is unchanged by all five.
                   The first line is a JSON header: versions and, per form, the FNV-1a 64 hash of
                   the UTF-8 outputs of every code point U+0000-10FFFF (surrogates skipped) in
                   order, each output followed by a 0xFF byte.
  sequences.tsv    INPUT<TAB>NFC<TAB>NFKC<TAB>LOWERCASE for random strings of starters,
                   combining marks and Hangul jamo, the same hex format ("" = unchanged).

Usage: python3 make_expected.py   (needs tokenizers; /work/venv has it)
"""

import json
import os
import random
import unicodedata

import tokenizers
from tokenizers import normalizers

HERE = os.path.dirname(os.path.abspath(__file__))
FORMS = [("NFC", normalizers.NFC()), ("NFKC", normalizers.NFKC()), ("NFD", normalizers.NFD()),
         ("NFKD", normalizers.NFKD()), ("LOWERCASE", normalizers.Lowercase())]


def hexes(text):
    return " ".join(f"{ord(c):X}" for c in text)


def fnv_update(h, data):
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def main():
    rows = []
    hashes = {name: 0xCBF29CE484222325 for name, _ in FORMS}
    for c in range(0x110000):
        if 0xD800 <= c <= 0xDFFF:
            continue
        text = chr(c)
        outputs = [normalizer.normalize_str(text) for _, normalizer in FORMS]
        for (name, _), out in zip(FORMS, outputs):
            hashes[name] = fnv_update(hashes[name], out.encode("utf-8") + b"\xff")
        if 0xAC00 <= c <= 0xD7A3 or all(out == text for out in outputs):
            continue
        fields = []
        previous = None
        for out in outputs:
            field = "" if out == text else hexes(out)
            fields.append("=" if previous is not None and field == previous and field else field)
            previous = field
        rows.append(f"{c:X}\t" + "\t".join(fields))
    header = {"tokenizers_version": tokenizers.__version__,
              "hashes": {name: f"{h:016x}" for name, h in hashes.items()}}
    with open(os.path.join(HERE, "code_points.tsv"), "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(header) + "\n" + "\n".join(rows) + "\n")

    # Sequences: the characters that take part in reordering or composition, mixed.
    rng = random.Random(20261124)
    marks = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and
             unicodedata.combining(chr(c))]
    composable = []
    for c in range(0x110000):
        if 0xD800 <= c <= 0xDFFF:
            continue
        mapping = unicodedata.decomposition(chr(c)).split()
        if len(mapping) == 2 and not mapping[0].startswith("<"):
            composable += [int(mapping[0], 16), int(mapping[1], 16), c]
    jamo = list(range(0x1100, 0x1113)) + list(range(0x1161, 0x1176)) + list(range(0x11A8, 0x11C3))
    # Marks whose class or composition changed after Unicode 9.0 (what ICU gets "wrong" for HF).
    newer = [0x07FD, 0x0898, 0x08D3, 0x1ABF, 0x1DFA, 0x10D24, 0x10F46, 0x11930, 0x11935, 0x1193D,
             0x11A34, 0x16FF0, 0x1E130]
    pools = [marks, composable, jamo, newer, [0x41, 0x61, 0x65, 0x3B1, 0x3A3, 0x130, 0xAC00, 0xAC01]]
    lines = []
    seen = set()
    while len(lines) < 1500:
        text = "".join(chr(rng.choice(rng.choice(pools))) for _ in range(rng.randint(2, 7)))
        if text in seen:
            continue
        seen.add(text)
        fields = [hexes(text)]
        for name, normalizer in FORMS:
            if name in ("NFD", "NFKD"):
                continue
            out = normalizer.normalize_str(text)
            fields.append("" if out == text else hexes(out))
        lines.append("\t".join(fields))
    with open(os.path.join(HERE, "sequences.tsv"), "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Reference token masks from Python xgrammar for xgrammar_reference_test.cc.

For each case (a JSON schema or a GBNF grammar) and tokenizer, every document is tokenized with
the HuggingFace tokenizer and walked through xgrammar's GrammarMatcher token by token; before
each token (and after the last) the allowed-token mask is recorded as the number of allowed
ids and an FNV-1a hash of them (ascending, little-endian int32), over the ids that are not
special added tokens (those are control tokens a grammar never emits; the test leaves them out
on both sides), plus whether xgrammar allows its stop token there.

minLength/maxLength and the email and uri formats are left out: xgrammar 0.2.8 writes a
length-limited string as raw characters other than '"', '\\', CR and LF (so it allows raw
control characters, which JSON forbids, and no escapes), and its email and uri shapes differ
from ours (grammar_test.cc checks ours).

Schemas are converted by xgrammar itself (Grammar.from_json_schema with any_whitespace=False,
the compact ", " / ": " layout, and strict_mode=False, JSON Schema's own defaults); GBNF cases
go to both engines as the same text.

  /work/venv/bin/python runtime/grammar/testdata/make_xgrammar_masks.py  (xgrammar 0.2.8)
writes runtime/grammar/testdata/xgrammar_masks.json.
"""
import json
import os

import numpy as np
import transformers
import xgrammar as xgr

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
TOKENIZERS = {
    "qwen2": os.path.join(REPO, "..", "shared", "tokenizers", "qwen2"),
    "stories260K": os.path.join(REPO, "tests", "data", "stories260K"),
}

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "born": {"type": "string", "format": "date"},
        "role": {"enum": ["admin", "user", None, 3]},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
        "score": {"type": "number"},
        "active": {"type": "boolean"},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
TREE = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "value": {"type": "integer", "minimum": -50, "maximum": 50},
                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
            },
            "required": ["value", "children"],
            "additionalProperties": False,
        }
    },
    "$ref": "#/$defs/node",
}
CHOICE = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"},
        "when": {"type": "string", "format": "date-time"},
        "uuid": {"type": "string", "format": "uuid"},
        "payload": {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
    },
    "required": ["id", "payload"],
    "additionalProperties": False,
}
OPEN = {"type": "object", "properties": {"kind": {"type": "string"}}, "required": ["kind"]}

CASES = [
    ("person", "schema", PERSON, [
        {"name": "Ada", "age": 36, "born": "1815-12-10",
         "role": "admin", "tags": ["math", "engines"], "score": -1.5e3, "active": True},
        {"name": "Zoë ✓", "age": 0, "role": None, "tags": ["日本語"]},
        {"name": "", "age": 130, "role": 3, "score": 0.25},
    ]),
    ("tree", "schema", TREE, [
        {"value": 1, "children": [{"value": -50, "children": []},
                                  {"value": 7, "children": [{"value": 0, "children": []}]}]},
    ]),
    ("choice", "schema", CHOICE, [
        {"id": "AB-123", "when": "2024-02-29T23:59:60.25Z",
         "uuid": "123e4567-e89b-12d3-a456-426614174000", "payload": "text"},
        {"id": "ZZ-000", "payload": None},
        {"id": "QX-909", "payload": -42},
    ]),
    ("json_object", "schema", {"type": "object"}, [
        {"a": [1, 2.5, {"b": None}], "c d": "e\nf", "emoji": "🙂"},
        {},
    ]),
    ("open_object", "schema", OPEN, [
        {"kind": "x", "kin": 1, "kinds": [True], "other": {"kind": "y"}},
    ]),
    ("expression", "gbnf", r'''root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")" | "-" factor
''', ["1+2*(3-4)/-5", "((7))"]),
    ("words", "gbnf", r'''root ::= word (" " word){0,4} "."
word ::= [a-zà-ÿα-ω]+ | "«" [^»\n]+ "»"
''', ["àb γδ «a b ✓».", "hello world."]),
]


def dumps(document):
    return json.dumps(document, ensure_ascii=False)


def main():
    output = {"cases": []}
    for tokenizer_name, tokenizer_dir in TOKENIZERS.items():
        tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
        vocab_size = len(tokenizer)
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        excluded = sorted(i for i, t in tokenizer.added_tokens_decoder.items() if t.special)
        excluded = sorted(set(excluded) | set(tokenizer.all_special_ids))
        keep = np.ones(vocab_size, dtype=bool)
        keep[excluded] = False
        stop_ids = list(info.stop_token_ids)
        compiler = xgr.GrammarCompiler(info)
        for name, kind, source, documents in CASES:
            if kind == "schema":
                compiled = compiler.compile_json_schema(
                    json.dumps(source), any_whitespace=False, strict_mode=False)
                texts = [dumps(d) for d in documents]
            else:
                compiled = compiler.compile_grammar(source)
                texts = documents
            case = {"name": name, "tokenizer": tokenizer_name, "kind": kind,
                    "source": source if kind == "gbnf" else json.dumps(source),
                    "excluded_ids": excluded, "vocab_size": vocab_size, "documents": []}
            for text in texts:
                ids = tokenizer.encode(text, add_special_tokens=False)
                if info.add_prefix_space:
                    # A SentencePiece tokenizer prefixes "▁" to the text: tokenize it after an
                    # "a" and drop the tokens of that "a", as a model continuing text would.
                    lead = tokenizer.encode("a", add_special_tokens=False)
                    ids = tokenizer.encode("a" + text, add_special_tokens=False)
                    assert ids[:len(lead)] == lead, (name, text)
                    ids = ids[len(lead):]
                matcher = xgr.GrammarMatcher(compiled)
                bitmask = xgr.allocate_token_bitmask(1, vocab_size)
                steps = []
                for position in range(len(ids) + 1):
                    matcher.fill_next_token_bitmask(bitmask)
                    words = bitmask.numpy()[0].astype(np.uint32)
                    allowed = np.unpackbits(words.view(np.uint8), bitorder="little")[:vocab_size]
                    allowed = allowed.astype(bool)
                    can_end = any(bool(allowed[s]) for s in stop_ids)
                    ids_allowed = np.nonzero(allowed & keep)[0].astype("<i4")
                    hash_value = 0xCBF29CE484222325
                    for byte in ids_allowed.tobytes():
                        hash_value = ((hash_value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
                    steps.append({"count": int(ids_allowed.size), "hash": f"{hash_value:016x}",
                                  "end": can_end})
                    if position < len(ids):
                        assert matcher.accept_token(ids[position]), (name, text, position)
                case["documents"].append({"text": text, "ids": ids, "steps": steps})
            output["cases"].append(case)
            print(tokenizer_name, name, sum(len(d["steps"]) for d in case["documents"]), "states")
    path = os.path.join(HERE, "xgrammar_masks.json")
    with open(path + ".tmp", "w") as f:
        json.dump(output, f, ensure_ascii=False, indent=0)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""gpt-oss's tokenizer (o200k_harmony) in a plan encodes and decodes as tiktoken does.

The reference is tiktoken's own o200k_harmony encoding, built offline from the shared
o200k_base ranks (make_agent_model.o200k_harmony). The plan is compiled by llmc from the
tokenizer.json that transformers' tiktoken converter writes for it (what the gpt-oss checkpoints
ship), and read back through `llmrt serve`'s /tokenize and /detokenize, so the importer, the
plan's TokenizerSpec and the runtime's encoder and decoder are all on the path. The corpus is
the tokenizer conformance corpus (runtime/tokenizer/testdata/conformance/corpus.txt: whitespace
runs, digits, CJK, emoji, accents, invalid UTF-8 replacements, special-token strings) plus the
harmony markers in text.

    python3 gpt_oss_tokenizer_test.py --llmc build/bin/llmc --llmrt build/bin/llmrt
"""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest
import urllib.request

import make_agent_model
from sdk_harness import ServerProcess, run_tests

ARGS = None
CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "runtime",
                      "tokenizer", "testdata", "conformance", "corpus.txt")
HARMONY_TEXTS = [
    "<|start|>assistant<|channel|>analysis<|message|>Think.<|end|>",
    "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
    '{"city": "Paris"}<|call|>',
    "<|channel|>final<|message|>Hi<|return|>",
    "<|constrain|>json <|startoftext|><|endoftext|><|endofprompt|><|reserved_200000|>",
    "<|channel|", "|message|>", "<|start|><|start|>", "x<|end|>y",
]


class GptOssTokenizer(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="llmrt-gpt-oss-tokenizer-")
        model = os.path.join(cls.work, "model")
        # A reply of one real token: no added pieces, so the vocabulary is exactly gpt-oss's.
        make_agent_model.make(ARGS.llmc, "gpt_oss", model, [200005])
        plan = os.path.join(cls.work, "plan")
        subprocess.run([ARGS.llmc, "compile", model, "-o", plan, "--quiet"], check=True,
                       stdout=subprocess.DEVNULL)
        cls.server = ServerProcess(ARGS.llmrt, plan, cls.work, "gpt-oss")
        cls.encoding, _ = make_agent_model.o200k_harmony()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.work, ignore_errors=True)

    def post(self, path, body):
        request = urllib.request.Request(self.server.url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request) as response:
            return json.load(response)

    def test_encode_and_decode_equal_tiktoken(self):
        with open(CORPUS, encoding="utf-8") as f:
            texts = [json.loads(line) for line in f if line.strip()]
        texts += HARMONY_TEXTS
        self.assertGreater(len(texts), 5000)
        mismatched = []
        for text in texts:
            # Special-token text is the token, as transformers' tokenizer.json treats added
            # tokens; tiktoken does that for allowed_special.
            expected = self.encoding.encode(text, allowed_special="all")
            ids = self.post("/tokenize", {"prompt": text})["tokens"]
            decoded = self.post("/detokenize", {"tokens": ids})["prompt"]
            if ids != expected or decoded != self.encoding.decode(expected):
                mismatched.append((text, ids, expected, decoded))
        self.assertEqual(mismatched[:5], [])
        self.assertIn(200005, self.post("/tokenize", {"prompt": HARMONY_TEXTS[0]})["tokens"])

    def test_decode_of_any_ids_equals_tiktoken(self):
        # Id sequences no encoder writes: pieces that split UTF-8 characters (tiktoken replaces
        # invalid bytes with U+FFFD as the byte-level decoder does), specials in the middle.
        rng = random.Random(21)
        for _ in range(300):
            ids = [rng.choice([rng.randrange(199998), rng.randrange(199998, 200019),
                               rng.randrange(256)]) for _ in range(rng.randint(1, 16))]
            self.assertEqual(self.post("/detokenize", {"tokens": ids})["prompt"],
                             self.encoding.decode(ids), ids)


if __name__ == "__main__":
    run_tests(sys.modules[__name__])

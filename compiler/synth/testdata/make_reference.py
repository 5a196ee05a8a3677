#!/usr/bin/env python3
"""Reference data for synth_test.cc, from transformers and HF tokenizers (not from our code).

  python3 make_reference.py TOKENIZER_DIR

TOKENIZER_DIR holds a tokenizer.json written by `llmc synth` (vocab 32000, e.g. the
tinyllama-1.1b preset). Writes, next to this script:
  tinyllama_state_dict.txt   name and shape of every tensor of transformers'
                             LlamaForCausalLM for TinyLlama-1.1B's config (built on the meta
                             device: no memory, no weights)
  tokenizer_encodings.txt    for each test string: HF tokenizers' ids for it, with <s>
"""
import json
import pathlib
import sys

import torch
from tokenizers import Tokenizer
from transformers import LlamaConfig, LlamaForCausalLM

HERE = pathlib.Path(__file__).resolve().parent

# TinyLlama/TinyLlama-1.1B-Chat-v1.0's config.json shape fields.
config = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632,
                     num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4,
                     max_position_embeddings=2048, rms_norm_eps=1e-5, rope_theta=10000.0,
                     tie_word_embeddings=False)
with torch.device("meta"):
    model = LlamaForCausalLM(config)
with open(HERE / "tinyllama_state_dict.txt", "w") as out:
    for name, tensor in model.state_dict().items():
        out.write(f"{name} {','.join(str(d) for d in tensor.shape)}\n")

tokenizer = Tokenizer.from_file(str(pathlib.Path(sys.argv[1]) / "tokenizer.json"))
strings = [
    "Once upon a time",
    "  leading and trailing spaces  ",
    "Tabs\tand\nnewlines, digits 12345 and punctuation: (a+b)*c!",
    "caf\u00e9 na\u00efve \u4f60\u597d \U0001F600",
    "ThE QuIcK bRoWn FoX jUmPs OvEr ThE lAzY dOg",
]
with open(HERE / "tokenizer_encodings.txt", "w") as out:
    for text in strings:
        ids = tokenizer.encode(text).ids
        out.write(json.dumps(text) + "\t" + " ".join(str(i) for i in ids) + "\n")

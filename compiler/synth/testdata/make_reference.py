#!/usr/bin/env python3
"""Reference data for synth_test.cc, from transformers and HF tokenizers (not from our code).

  python3 make_reference.py [TOKENIZER_DIR]

TOKENIZER_DIR holds a tokenizer.json written by `llmc synth` (vocab 32000, e.g. the
tinyllama-1.1b preset). Writes, next to this script:
  tinyllama_state_dict.txt   name and shape of every tensor of transformers'
                             LlamaForCausalLM for TinyLlama-1.1B's config (built on the meta
                             device: no memory, no weights)
  smollm3_state_dict.txt     the same for SmolLM3ForCausalLM with SmolLM3-3B's config, as
                             save_pretrained writes it (the tied lm_head dropped), then a line
                             "no_rope_layers" with transformers' per-layer flags for that config
  phi3_mini_state_dict.txt   the same for Phi3ForCausalLM with Phi-3-mini-4k-instruct's config
  gemma2_2b_state_dict.txt   the same for Gemma2ForCausalLM (gemma-2-2b) and Gemma3ForCausalLM
  gemma3_1b_state_dict.txt   (gemma-3-1b-pt), tied lm_head dropped
                             (fused qkv_proj and gate_up_proj, untied lm_head)
  tokenizer_encodings.txt    (only with TOKENIZER_DIR) for each test string: HF tokenizers' ids
                             for it, with <s>
"""
import json
import pathlib
import sys

import torch
from tokenizers import Tokenizer
from transformers import (Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig,
                          LlamaForCausalLM, Phi3Config, Phi3ForCausalLM, SmolLM3Config,
                          SmolLM3ForCausalLM)

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

# HuggingFaceTB/SmolLM3-3B's config.json shape fields; no_rope_layers from the class default.
config = SmolLM3Config(vocab_size=128256, hidden_size=2048, intermediate_size=11008,
                       num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=4,
                       max_position_embeddings=65536, rms_norm_eps=1e-6, rope_theta=5000000.0,
                       tie_word_embeddings=True)
with torch.device("meta"):
    model = SmolLM3ForCausalLM(config)
with open(HERE / "smollm3_state_dict.txt", "w") as out:
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight":  # tied: save_pretrained does not write it
            continue
        out.write(f"{name} {','.join(str(d) for d in tensor.shape)}\n")
    out.write("no_rope_layers " + ",".join(str(flag) for flag in config.no_rope_layers) + "\n")

# microsoft/Phi-3-mini-4k-instruct's config.json shape fields.
config = Phi3Config(vocab_size=32064, hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096,
                    original_max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0,
                    sliding_window=2047, tie_word_embeddings=False, pad_token_id=32000)
with torch.device("meta"):
    model = Phi3ForCausalLM(config)
with open(HERE / "phi3_mini_state_dict.txt", "w") as out:
    for name, tensor in model.state_dict().items():
        out.write(f"{name} {','.join(str(d) for d in tensor.shape)}\n")

# google/gemma-2-2b's and google/gemma-3-1b-pt's config.json shape fields (tied: no lm_head on
# disk; Gemma's norms are 1 + weight, which changes values, not shapes).
for file_name, config in (
        ("gemma2_2b_state_dict.txt",
         Gemma2Config(vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                      num_attention_heads=8, num_key_value_heads=4, head_dim=256, tie_word_embeddings=True)),
        ("gemma3_1b_state_dict.txt",
         Gemma3TextConfig(vocab_size=262144, hidden_size=1152, intermediate_size=6912, num_hidden_layers=26,
                          num_attention_heads=4, num_key_value_heads=1, head_dim=256,
                          tie_word_embeddings=True))):
    model_class = Gemma2ForCausalLM if isinstance(config, Gemma2Config) else Gemma3ForCausalLM
    with torch.device("meta"):
        model = model_class(config)
    with open(HERE / file_name, "w") as out:
        for name, tensor in model.state_dict().items():
            if name == "lm_head.weight":  # tied: save_pretrained does not write it
                continue
            out.write(f"{name} {','.join(str(d) for d in tensor.shape)}\n")

if len(sys.argv) < 2:
    sys.exit(0)
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

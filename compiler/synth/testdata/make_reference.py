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
  qwen3_moe_state_dict.txt   the same for the MoE presets (Qwen3MoeForCausalLM, Qwen2MoeForCausalLM,
  qwen2_moe_state_dict.txt   MixtralForCausalLM, GptOssForCausalLM with synth.cc's preset configs), as
  mixtral_state_dict.txt     save_pretrained writes them: transformers 5 fuses the Qwen / Mixtral experts
  gpt_oss_state_dict.txt     in memory, and revert_weight_conversion restores the per-expert names the
                             Hub holds. gpt-oss's experts as its MXFP4 checkpoints store them: each
                             [E, in, out] matrix as <name>_blocks U8 [E, out, in / 32, 16] and <name>_scales
                             U8 [E, out, in / 32] (tests/fixtures/gpt_oss_mxfp4 is that layout, loaded by
                             transformers). Each file ends with "parameters N" (every weight counted once,
                             as from_config on the meta device holds them) and "expert_parameters N"
  tokenizer_encodings.txt    (only with TOKENIZER_DIR) for each test string: HF tokenizers' ids
                             for it, with <s>
"""
import json
import pathlib
import sys

import torch
from tokenizers import Tokenizer
from transformers import (Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig, GptOssConfig,
                          GptOssForCausalLM, LlamaConfig, LlamaForCausalLM, MixtralConfig, MixtralForCausalLM,
                          Phi3Config, Phi3ForCausalLM, Qwen2MoeConfig, Qwen2MoeForCausalLM, Qwen3MoeConfig,
                          Qwen3MoeForCausalLM, SmolLM3Config, SmolLM3ForCausalLM)
from transformers.core_model_loading import revert_weight_conversion

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

# The MoE presets' configs (synth.cc's kQwen3MoeConfig, kQwen2MoeConfig, kMixtralConfig, kGptOssConfig).
MXFP4_BLOCK = 32
for file_name, model_class, config in (
        ("qwen3_moe_state_dict.txt", Qwen3MoeForCausalLM,
         Qwen3MoeConfig(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=24,
                        num_attention_heads=16, num_key_value_heads=4, head_dim=128, num_experts=64,
                        num_experts_per_tok=8, moe_intermediate_size=256, norm_topk_prob=True,
                        tie_word_embeddings=False)),
        ("qwen2_moe_state_dict.txt", Qwen2MoeForCausalLM,
         Qwen2MoeConfig(vocab_size=151936, hidden_size=1024, intermediate_size=5632, num_hidden_layers=16,
                        num_attention_heads=16, num_key_value_heads=16, num_experts=60, num_experts_per_tok=4,
                        moe_intermediate_size=352, shared_expert_intermediate_size=1408,
                        tie_word_embeddings=False)),
        ("mixtral_state_dict.txt", MixtralForCausalLM,
         MixtralConfig(vocab_size=32000, hidden_size=1024, intermediate_size=3584, num_hidden_layers=16,
                       num_attention_heads=16, num_key_value_heads=4, num_local_experts=8, num_experts_per_tok=2,
                       tie_word_embeddings=False)),
        ("gpt_oss_state_dict.txt", GptOssForCausalLM,
         GptOssConfig(vocab_size=201088, hidden_size=1024, intermediate_size=1024, num_hidden_layers=16,
                      num_attention_heads=16, num_key_value_heads=4, head_dim=64, num_local_experts=32,
                      num_experts_per_tok=4, tie_word_embeddings=False))):
    with torch.device("meta"):
        model = model_class(config)
    state_dict = revert_weight_conversion(model, model.state_dict())
    parameters = sum(tensor.numel() for tensor in state_dict.values())
    expert_parameters = sum(tensor.numel() for name, tensor in state_dict.items() if ".experts." in name)
    with open(HERE / file_name, "w") as out:
        for name, tensor in state_dict.items():
            if model_class is GptOssForCausalLM and name.endswith(("experts.gate_up_proj", "experts.down_proj")):
                experts, inputs, outputs = tensor.shape  # used as x @ W; stored out-major in blocks of 32
                out.write(f"{name}_blocks {experts},{outputs},{inputs // MXFP4_BLOCK},{MXFP4_BLOCK // 2}\n")
                out.write(f"{name}_scales {experts},{outputs},{inputs // MXFP4_BLOCK}\n")
                continue
            out.write(f"{name} {','.join(str(d) for d in tensor.shape)}\n")
        out.write(f"parameters {parameters}\nexpert_parameters {expert_parameters}\n")

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

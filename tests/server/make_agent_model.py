#!/usr/bin/env python3
"""A scripted model directory with a real tokenizer and chat template, for the server's agent
tests (tool calls, reasoning, the Messages and Responses APIs).

A random model does not write tool calls. So that the HTTP path is tested end to end without a
test hook in the server, the tokenizer gets extra added tokens (non-special, after the real
vocabulary) whose text is a piece of a model reply -- a <think> block, text, a tool call in
the family's own syntax -- and the weights are set so that the model writes those pieces in
order and then EOS, whatever the prompt, greedy or sampled:

  * the layers add nothing to the residual stream (o_proj and down_proj are zero), so the
    hidden state at a position is the embedding of its token;
  * every token embeds to 100 * e_0, except reply piece i, which embeds to 100 * e_(i+1);
  * the (untied) lm_head maps e_0 to piece 0, e_(i+1) to piece i+1 and the last piece to EOS,
    each with a logit of about 57 against 0 for every other token.

`max_tokens` cuts the script short (1: the first piece only). Everything else (vocabulary,
merges, chat template, special tokens) is the real model's, from ../shared/tokenizers. A
piece may also be a token id of the real vocabulary (gpt_oss: harmony's special tokens, see
HARMONY_REPLY); the gpt_oss family writes tokenizer.json from the shared tiktoken ranks with
transformers' converter, as the gpt-oss checkpoints ship it.

    make_agent_model.py --llmc build/bin/llmc --family qwen3 -o DIR [--reply TEXT ...]

writes DIR (a HuggingFace model directory) and DIR/replies.json ([token id of each piece]).
"""
import argparse
import array
import json
import struct
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.normpath(os.path.join(HERE, "..", "..", "..", "shared", "tokenizers"))

# family: (tokenizer folder, files to copy, architecture, vocab size, bos, eos)
FAMILIES = {
    "qwen3": ("qwen3", ["vocab.json", "merges.txt", "tokenizer_config.json"], "Qwen3ForCausalLM",
              151936, 151643, 151645),
    "qwen2": ("qwen2", ["vocab.json", "merges.txt", "tokenizer_config.json"], "Qwen2ForCausalLM",
              151936, 151643, 151645),
    # The Llama 3 tokenizer (tiktoken ranks + 256 special tokens, 128256 in all) with Llama 3.1's
    # names for the reserved tokens it took (<|python_tag|> = 128010, <|eom_id|> = 128008) and
    # room after them for the reply pieces.
    "llama3": ("llama3", ["tokenizer.model", "tokenizer_config.json"], "LlamaForCausalLM",
               128264, 128000, 128009),
    # Phi-4-mini's tokenizer (o200k-based byte-level BPE, <|tool_call|> ... added tokens); its
    # model is a Phi3ForCausalLM, but the tool-call tests need only the tokenizer and template.
    "phi4": ("phi4-mini", ["vocab.json", "merges.txt", "tokenizer_config.json"],
             "LlamaForCausalLM", 200064, 199999, 200020),
    # gpt-oss's tokenizer (o200k_harmony: o200k_base ranks + the harmony special tokens, as a
    # tokenizer.json written by transformers' tiktoken converter) and harmony chat template on a
    # Llama model (the scripted weights need no gpt-oss layers). EOS is <|call|>, which ends the
    # scripted reply; generation_config lists gpt-oss's three (GPT_OSS_EOS).
    "gpt_oss": ("gpt-oss", ["tokenizer_config.json", "chat_template.jinja"], "LlamaForCausalLM",
                201088, 199998, 200012),
}
GPT_OSS_EOS = [200002, 199999, 200012]  # <|return|>, <|endoftext|>, <|call|>
LLAMA31_TOKENS = {"128008": "<|eom_id|>", "128010": "<|python_tag|>"}


# The reply the agent tests script: a <think> block, text, then two tool calls.
QWEN_REPLY = [
    "<think>\nI should check the weather.\n</think>\n\n",
    "Let me check.",
    '\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    '\n<tool_call>\n{"name": "get_time", "arguments": {"zone": "CET"}}\n</tool_call>',
]


# The harmony reply: an analysis message, a preamble and a call of get_weather, ended by EOS
# <|call|>. Integers are the real special tokens (<|channel|> 200005, <|message|> 200008,
# <|end|> 200007, <|start|> 200006, and "analysis"); a scripted model writes each token once, so the later
# markers are inside added pieces, which are special tokens (as the markers are) when they hold
# one.
HARMONY_REPLY = [
    200005, 35644, 200008,  # <|channel|> "analysis" (one o200k token) <|message|>
    "I should check the weather.", 200007, 200006,
    "assistant<|channel|>commentary<|message|>", "Let me check.",
    "<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    "<|message|>",
    '{"city": "Paris"}',
]


def o200k_harmony():
    """tiktoken's o200k_harmony encoding, built from the shared ranks file (tiktoken would fetch
    it; the file is the one its expected_hash names)."""
    import tiktoken
    import tiktoken.load
    import tiktoken_ext.openai_public as openai_public
    ranks_file = os.path.join(SHARED, "gpt-oss", "o200k_base.tiktoken")
    saved = openai_public.load_tiktoken_bpe
    openai_public.load_tiktoken_bpe = (
        lambda url, expected_hash=None: tiktoken.load.load_tiktoken_bpe(ranks_file, expected_hash))
    try:
        spec = openai_public.o200k_harmony()
    finally:
        openai_public.load_tiktoken_bpe = saved
    return tiktoken.Encoding(**spec), spec["pat_str"]


def gpt_oss_tokenizer_json():
    """gpt-oss's tokenizer.json as transformers' tiktoken converter writes it
    (integrations/tiktoken.py): the ranks, o200k's pattern, and tokenizer_config.json's added
    tokens (199998..200018, which o200k_harmony gives the same ids) as special tokens."""
    from transformers.convert_slow_tokenizer import TikTokenConverter
    encoding, pattern = o200k_harmony()
    with open(os.path.join(SHARED, "gpt-oss", "tokenizer_config.json")) as f:
        added = json.load(f)["added_tokens_decoder"]
    specials = [added[key]["content"] for key in sorted(added, key=int)]
    for key, token in added.items():
        assert encoding._special_tokens[token["content"]] == int(key), token
    converter = TikTokenConverter(vocab_file=os.path.join(SHARED, "gpt-oss", "o200k_base.tiktoken"),
                                  pattern=pattern, extra_special_tokens=specials)
    return json.loads(converter.converted().to_str())


def make(llmc, family, output, replies, chat_template=None):
    """Writes the model directory; returns the token id of each reply piece."""
    folder, files, architecture, vocab, bos, eos = FAMILIES[family]
    work = output + ".synth-config"
    os.makedirs(work, exist_ok=True)
    config = {
        "architectures": [architecture], "model_type": architecture[:5].lower(),
        "vocab_size": vocab, "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
        "head_dim": 16, "hidden_act": "silu", "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": False,
        "bos_token_id": bos, "eos_token_id": eos, "torch_dtype": "float32",
    }
    with open(os.path.join(work, "config.json"), "w") as f:
        json.dump(config, f)
    if os.path.exists(output):
        shutil.rmtree(output)
    subprocess.run([llmc, "synth", "--preset", os.path.join(work, "config.json"), "-o", output,
                    "--dtype", "f32"], check=True, stdout=subprocess.DEVNULL)
    shutil.rmtree(work)
    # The synthetic tokenizer goes; the real one comes in.
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        path = os.path.join(output, name)
        if os.path.exists(path):
            os.remove(path)
    for name in files:
        shutil.copy(os.path.join(SHARED, folder, name), os.path.join(output, name))
    with open(os.path.join(output, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": bos,
                   "eos_token_id": GPT_OSS_EOS if family == "gpt_oss" else eos}, f)
    if chat_template:
        shutil.copy(chat_template, os.path.join(output, "chat_template.jinja"))

    config_path = os.path.join(output, "tokenizer_config.json")
    with open(config_path) as f:
        tokenizer_config = json.load(f)
    added = tokenizer_config["added_tokens_decoder"]
    if family == "llama3":
        for token_id, content in LLAMA31_TOKENS.items():
            added[token_id]["content"] = content
    next_id = max(int(k) for k in added) + 1
    pieces = []
    new_tokens = []
    for text in replies:
        if isinstance(text, int):  # a token of the real vocabulary
            pieces.append(text)
            continue
        if next_id >= vocab:
            sys.exit("make_agent_model: no room for more added tokens")
        # Harmony's markers are special tokens; a piece holding one is special too.
        special = family == "gpt_oss" and "<|" in text
        added[str(next_id)] = {"content": text, "lstrip": False, "normalized": False,
                               "rstrip": False, "single_word": False, "special": special}
        new_tokens.append({"id": next_id, **added[str(next_id)]})
        pieces.append(next_id)
        next_id += 1
    with open(config_path, "w") as f:
        json.dump(tokenizer_config, f, ensure_ascii=False)
    if family == "gpt_oss":
        # The model ships tokenizer.json (the importer reads added tokens from there).
        tokenizer = gpt_oss_tokenizer_json()
        tokenizer["added_tokens"].extend(new_tokens)
        with open(os.path.join(output, "tokenizer.json"), "w") as f:
            json.dump(tokenizer, f, ensure_ascii=False)
    with open(os.path.join(output, "replies.json"), "w") as f:
        json.dump(pieces, f)
    script_weights(output, config, pieces, eos)
    return pieces


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--llmc", required=True)
    parser.add_argument("--family", required=True, choices=sorted(FAMILIES))
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--reply", action="append", default=None,
                        help="the text of the next reply piece (one added token each); "
                             "default: QWEN_REPLY (HARMONY_REPLY for gpt_oss)")
    parser.add_argument("--chat-template", help="a chat_template.jinja to put beside it")
    args = parser.parse_args()
    default = HARMONY_REPLY if args.family == "gpt_oss" else QWEN_REPLY
    make(args.llmc, args.family, args.output, args.reply or default, args.chat_template)


def script_weights(model_dir, config, pieces, eos):
    """Rewrites model.safetensors so that the model writes `pieces` and then EOS."""
    hidden, vocab = config["hidden_size"], config["vocab_size"]
    if len(pieces) + 1 > hidden:
        sys.exit("make_agent_model: at most %d reply pieces" % (hidden - 1))
    path = os.path.join(model_dir, "model.safetensors")
    with open(path, "rb") as f:
        header_size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(header_size))
        data = f.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", name
        begin, end = info["data_offsets"]
        tensors[name] = (info["shape"], array.array("f", data[begin:end]))

    def zeros(shape):
        count = 1
        for dim in shape:
            count *= dim
        return array.array("f", bytes(4 * count))

    for name, (shape, values) in tensors.items():
        if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
            tensors[name] = (shape, zeros(shape))
        elif name == "model.norm.weight":
            tensors[name] = (shape, array.array("f", [1.0] * hidden))
    embed = zeros([vocab, hidden])
    for token in range(vocab):
        embed[token * hidden] = 100.0
    lm_head = zeros([vocab, hidden])
    lm_head[pieces[0] * hidden] = 10.0
    for index, token in enumerate(pieces):
        embed[token * hidden] = 0.0
        embed[token * hidden + index + 1] = 100.0
        following = pieces[index + 1] if index + 1 < len(pieces) else eos
        lm_head[following * hidden + index + 1] = 10.0
    tensors["model.embed_tokens.weight"] = ([vocab, hidden], embed)
    tensors["lm_head.weight"] = ([vocab, hidden], lm_head)

    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (shape, values) in tensors.items():
        size = 4 * len(values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for name, (shape, values) in tensors.items():
            f.write(values.tobytes())


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Makes the tokenizer conformance references from HuggingFace `tokenizers`.

For every tokenizer below it encodes a fixed corpus (with and without special tokens) and
decodes the ids (with and without skip_special_tokens), plus random id sequences, and writes
`<name>.reference.json` next to this script. The C++ test (runtime/tokenizer/tokenizer_test.cc)
imports the same tokenizer.json through llmc::ImportTokenizer and must reproduce every id and
byte. CI has no Python: the outputs are committed, and so are the small tokenizers made here.

Tokenizers:
  stories260k   tests/data/stories260K (SentencePiece-style BPE with byte fallback)
  phi3          ../shared/tokenizers/phi3/tokenizer.json (Llama-2 vocabulary + Phi-3 added
                tokens); too big to commit, CI reads it from ../shared
  qwen2_mini, gpt2_mini, llama3_mini
                the real tokenizers, converted to tokenizer.json by transformers, with the
                vocabulary cut to the first merges (normalizers, regexes, added tokens and
                decoders untouched) so they fit in the repository
  metaspace_mix, bytelevel_split, suffix_words
                small BPEs trained here by `tokenizers` itself to cover the components the
                real files do not use (Metaspace, Digits, Punctuation, Strip, NFKC, Lowercase,
                WhitespaceSplit, Split behaviours, lstrip/rstrip/single_word/normalized added
                tokens, unk without byte fallback, subword prefix/suffix, no decoder).
                suffix_words' training still breaks ties differently between runs, so a
                regeneration may change it; its reference always matches its tokenizer.json.

Usage: python3 runtime/tokenizer/testdata/make_reference.py   (needs tokenizers, transformers,
       tiktoken)
       python3 runtime/tokenizer/testdata/make_reference.py --references-only
         rewrites the references from the committed tokenizers (after a corpus change)
       python3 runtime/tokenizer/testdata/make_reference.py --full DIR
         also writes the uncut qwen2, gpt2 and llama3 tokenizers (several MB each, not for the
         repository) with their references to DIR, for manual comparison. The uncut real
         tokenizers are checked in CI by conformance_test.cc (testdata/conformance).
"""

import json
import os
import random
import sys

# One training thread: with several, BpeTrainer breaks count ties differently from run to run
# and the committed files would change on every regeneration.
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import tokenizers  # noqa: E402
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers  # noqa: E402
from tokenizers import processors, trainers  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
SHARED = "/work/shared/tokenizers"

CORPUS = [
    "",
    " ",
    "  ",
    "\n",
    "Once upon a time",
    "Once upon a time, there was a little girl named Lily.",
    " leading space",
    "trailing space ",
    "   three leading and three trailing   ",
    "multiple    spaces   inside",
    "line one\nline two\n\nline four\r\nwindows",
    "tabs\tand\t\ttabs",
    " \t mixed \n whitespace \t\n",
    "digits 0123456789 and 3.14159, 1,000,000 and 42nd",
    "Punctuation!? (yes) [no] {maybe} \"quoted\" 'single' a-b_c/d\\e",
    "It's we're they've I'm you'll he'd IT'S",
    "CJK: 你好，世界。日本語のテキスト、한국어 텍스트",
    "Emoji: 😀 👍🏽 👩‍💻 👨‍👩‍👧‍👦 🏳️‍🌈",
    "Accents: café naïve résumé Ångström Ελληνικά Русский",
    "Combining: e\u0301 a\u0308 n\u0303 (decomposed) vs \u00e9 (composed)",
    "Compat: \uff21\uff22\uff23 \u2460 \ufb01 \u00bd x\u00b2",
    "<s>",
    "</s>",
    "text with <s> and </s> inside",
    "<s>starts with bos",
    "ends with eos</s>",
    "<unk> literal unk",
    "<|endoftext|> and <|im_start|>user\nhi<|im_end|>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhello<|eot_id|>",
    "<|user|>\nWhat is 2+2?<|end|>\n<|assistant|>",
    "[MASK] masked  [MASK]x [SEP]  after <sep>  spaced",
    "hello helloworld say hello. Hello",
    "Byte fallback: \u0000\u0001\u007f \u00ff \u0100 \U0001F9EC \u2603",
    "Zero width: a\u200bb a\u200db \ufeffbom",
    "Arabic: مرحبا بالعالم ١٢٣ Hebrew: שלום Hindi: नमस्ते Thai: สวัสดี",
    "Math: ∀x∈ℝ, x² ≥ 0; ∑ᵢ aᵢ ≠ ∞",
    "code: def f(x):\n    return x ** 2  # square\n",
    "URL https://example.com/path?q=1&r=two#frag and email a.b@c.org",
    "UPPER lower MiXeD CaSe ΣΊΣΥΦΟΣ İstanbul",
    "a" * 40,
    "x" + " " * 17 + "y",
    "The quick brown fox jumps over the lazy dog. " * 6,
    # U+180E left White_Space in Unicode 6.3: HF's \s does not match it, PCRE2's \s does.
    " \u180ea", "  \u180e", "\u180e\n/a",
    # lstrip added tokens with only whitespace before them; single_word next to marks and
    # digits that are (\u0301) and are not (\u00b2) word characters of HF's \w.
    " [MASK]", "\n[MASK] x", "hello\u0301 hello\u00b2 \u0345hello",
]


def truncate(tokenizer_json, max_merges):
    """Keeps the first `max_merges` merges whose parts are already available, and the pieces
    they need: every single-character piece, byte-fallback pieces and added tokens. Ids are
    renumbered densely in their original order."""
    data = json.loads(tokenizer_json)
    model = data["model"]
    vocab = model["vocab"]
    added = {t["content"] for t in data["added_tokens"]}
    keep = {p for p in vocab if len(p) == 1 or (p.startswith("<0x") and len(p) == 6) or p in added}
    kept_merges = []
    for merge in model["merges"]:
        left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
        if left in keep and right in keep and left + right in vocab:
            keep.add(left + right)
            kept_merges.append(merge)
            if len(kept_merges) == max_merges:
                break
    old_ids = sorted({vocab[p] for p in keep if p in vocab} | {t["id"] for t in data["added_tokens"]})
    remap = {old: new for new, old in enumerate(old_ids)}
    model["vocab"] = {p: remap[i] for p, i in vocab.items() if p in keep}
    model["merges"] = kept_merges
    for token in data["added_tokens"]:
        token["id"] = remap[token["id"]]
    post = data.get("post_processor")

    def fix_post(p):
        if not p:
            return
        if p.get("type") == "Sequence":
            for q in p["processors"]:
                fix_post(q)
        if p.get("type") == "TemplateProcessing":
            for special in p["special_tokens"].values():
                special["ids"] = [remap[i] for i in special["ids"]]

    fix_post(post)
    return json.dumps(data, ensure_ascii=False, indent=None)


LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def bytes_to_unicode():
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) +
                 list(range(0xAE, 0x100)))
    mapping, extra = {}, 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def llama3_from_tiktoken(folder, max_ranks):
    """Llama 3's tokenizer.json the way transformers' tiktoken converter lays it out (ByteLevel
    BPE, Split with the Llama 3 regex, <|begin_of_text|> template), built from the first
    `max_ranks` ranks of tokenizer.model. A rank's merge is the pair that BPE over lower ranks
    leaves; this is the standard tiktoken -> merges conversion."""
    import base64
    ranks = {}
    with open(os.path.join(folder, "tokenizer.model"), "rb") as f:
        for line in f:
            token, rank = line.split()
            if int(rank) < max_ranks:
                ranks[base64.b64decode(token)] = int(rank)
    to_char = bytes_to_unicode()
    text = lambda b: "".join(to_char[x] for x in b)
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) < 2:
            continue
        parts = [bytes([b]) for b in token]
        while len(parts) > 2:
            best = None
            for i in range(len(parts) - 1):
                r = ranks.get(parts[i] + parts[i + 1])
                if r is not None and r < rank and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                break
            i = best[1]
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        if len(parts) == 2:
            merges.append([text(parts[0]), text(parts[1])])
    vocab = {text(token): rank for token, rank in ranks.items()}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[tuple(m) for m in merges], ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    with open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    specials = sorted(((int(i), t["content"]) for i, t in config["added_tokens_decoder"].items()))
    # Special ids follow the 128000 ranks in the real file; here they follow the cut vocabulary.
    tok.add_special_tokens([content for _, content in specials])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    return tok.to_str()


def from_transformers(folder):
    import transformers
    # gpt2 has no tokenizer_config.json, so AutoTokenizer cannot pick the class.
    cls = transformers.GPT2Tokenizer if folder.endswith("gpt2") else transformers.AutoTokenizer
    tok = cls.from_pretrained(folder)
    return tok.backend_tokenizer.to_str()


def train(tokenizer, trainer, extra_lines=()):
    lines = [line for line in CORPUS if line] + list(extra_lines)
    tokenizer.train_from_iterator(lines * 3, trainer=trainer)
    return tokenizer


def make_metaspace_mix():
    tok = Tokenizer(models.BPE(unk_token="[UNK]", fuse_unk=True))
    tok.normalizer = normalizers.Sequence(
        [normalizers.NFKC(), normalizers.Lowercase(), normalizers.Strip(left=True, right=True)])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True),
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.Punctuation(behavior="isolated"),
    ])
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first")
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["[UNK]", "[CLS]", "[SEP]"],
                                  show_progress=False)
    train(tok, trainer)
    tok.add_special_tokens([tokenizers.AddedToken("[MASK]", lstrip=True, special=True),
                            tokenizers.AddedToken("<sep>", rstrip=True, special=True)])
    tok.add_tokens([tokenizers.AddedToken("hello", single_word=True, normalized=True)])
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return tok.to_str()


def make_bytelevel_split():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split("-", behavior="merged_with_previous"),
        pre_tokenizers.Split(Regex(r"[,.]"), behavior="merged_with_next"),
        pre_tokenizers.Split(Regex(r"\d+"), behavior="contiguous", invert=False),
        pre_tokenizers.Split(Regex(r"\s+"), behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|bos|>"], show_progress=False)
    train(tok, trainer)
    tok.add_special_tokens(["<|eos|>"])
    tok.post_processor = processors.TemplateProcessing(
        single="<|bos|> $A <|eos|>",
        special_tokens=[("<|bos|>", tok.token_to_id("<|bos|>")),
                        ("<|eos|>", tok.token_to_id("<|eos|>"))])
    return tok.to_str()


def make_suffix_words():
    tok = Tokenizer(models.BPE(unk_token="<unk>", continuing_subword_prefix="##",
                               end_of_word_suffix="</w>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>"],
                                  continuing_subword_prefix="##", end_of_word_suffix="</w>",
                                  show_progress=False)
    train(tok, trainer)
    return tok.to_str()


def random_id_cases(tok, count, rng):
    """Id sequences no encoder would produce: random pieces, runs of byte-fallback pieces
    (valid and invalid UTF-8), special tokens in the middle."""
    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    byte_ids = [tok.token_to_id(f"<0x{b:02X}>") for b in range(256)]
    byte_ids = [i for i in byte_ids if i is not None]
    cases = []
    for index in range(count):
        length = rng.randint(1, 24)
        ids = [rng.randrange(vocab_size) for _ in range(length)]
        if byte_ids and index % 2 == 0:
            run = [rng.choice(byte_ids) for _ in range(rng.randint(1, 5))]
            pos = rng.randint(0, len(ids))
            ids[pos:pos] = run
        cases.append(ids)
    if byte_ids:
        enc = lambda b: tok.token_to_id(f"<0x{b:02X}>")
        for raw in [b"\xe4\xb8\xad", b"\xe4\xb8", b"\xe4\xb8\xe4\xb8\xad", b"\xc3\xa9\xa9",
                    b"\xf0\x9f\x98\x80", b"\x80", b"\xff\xfe"]:
            ids = [enc(b) for b in raw]
            if None not in ids:
                cases.append(ids)
                cases.append([tok.token_to_id("\u2581a") or 5] + ids + [5])
    return cases


def reference(name, tokenizer_json):
    tok = Tokenizer.from_str(tokenizer_json)
    rng = random.Random(1234)
    cases = []
    for text in CORPUS:
        with_special = tok.encode(text, add_special_tokens=True).ids
        plain = tok.encode(text, add_special_tokens=False).ids
        cases.append({
            "text": text,
            "ids": with_special,
            "ids_no_special": plain,
            "decoded": tok.decode(with_special, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(with_special, skip_special_tokens=True),
        })
    decode_cases = []
    for ids in random_id_cases(tok, 40, rng):
        decode_cases.append({
            "ids": ids,
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
        })
    return {"tokenizer": name, "tokenizers_version": tokenizers.__version__, "cases": cases,
            "decode_cases": decode_cases}


def write_json(path, data):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
        f.write("\n")


def references_only():
    """Rewrites every committed <name>.reference.json from the tokenizer.json beside it, without
    regenerating the tokenizers (whose training may tie-break differently): for a corpus change."""
    sources = {"stories260k": os.path.join(ROOT, "tests/data/stories260K/tokenizer.json"),
               "phi3": os.path.join(SHARED, "phi3/tokenizer.json")}
    for name in ["qwen2_mini", "gpt2_mini", "llama3_mini", "metaspace_mix", "bytelevel_split",
                 "suffix_words"]:
        sources[name] = os.path.join(HERE, name, "tokenizer.json")
    for name, path in sources.items():
        with open(path, encoding="utf-8") as f:
            write_json(os.path.join(HERE, f"{name}.reference.json"), reference(name, f.read()))
        print(f"{name}: reference written", file=sys.stderr)


def main():
    if sys.argv[1:] == ["--references-only"]:
        references_only()
        return
    made = {}  # name -> (tokenizer.json text, committed?)
    with open(os.path.join(ROOT, "tests/data/stories260K/tokenizer.json"), encoding="utf-8") as f:
        made["stories260k"] = (f.read(), False)
    phi3 = os.path.join(SHARED, "phi3/tokenizer.json")
    if os.path.exists(phi3):
        with open(phi3, encoding="utf-8") as f:
            made["phi3"] = (f.read(), False)
    for name, folder, merges in [("qwen2_mini", "qwen2", 3000), ("gpt2_mini", "gpt2", 3000)]:
        path = os.path.join(SHARED, folder)
        if os.path.exists(path):
            made[name] = (truncate(from_transformers(path), merges), True)
    if os.path.exists(os.path.join(SHARED, "llama3")):
        made["llama3_mini"] = (llama3_from_tiktoken(os.path.join(SHARED, "llama3"), 3256), True)
    made["metaspace_mix"] = (make_metaspace_mix(), True)
    made["bytelevel_split"] = (make_bytelevel_split(), True)
    made["suffix_words"] = (make_suffix_words(), True)

    full_dir = sys.argv[2] if len(sys.argv) > 2 and sys.argv[1] == "--full" else None
    if full_dir:
        for name, folder in [("qwen2", "qwen2"), ("gpt2", "gpt2")]:
            made[name] = (from_transformers(os.path.join(SHARED, folder)), full_dir)
        made["llama3"] = (llama3_from_tiktoken(os.path.join(SHARED, "llama3"), 10**9), full_dir)

    for name, (tokenizer_json, commit) in made.items():
        out_dir = commit if isinstance(commit, str) else HERE
        if isinstance(commit, str):
            os.makedirs(os.path.join(out_dir, name), exist_ok=True)
            with open(os.path.join(out_dir, name, "tokenizer.json"), "w", encoding="utf-8") as f:
                f.write(tokenizer_json)
            write_json(os.path.join(out_dir, f"{name}.reference.json"),
                       reference(name, tokenizer_json))
            print(f"{name}: written to {out_dir}", file=sys.stderr)
            continue
        if commit:
            folder = os.path.join(HERE, name)
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as f:
                f.write(tokenizer_json)
        write_json(os.path.join(HERE, f"{name}.reference.json"), reference(name, tokenizer_json))
        print(f"{name}: written", file=sys.stderr)


if __name__ == "__main__":
    main()

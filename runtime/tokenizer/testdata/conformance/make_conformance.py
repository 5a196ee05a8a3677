#!/usr/bin/env python3
"""Makes the tokenizer conformance corpus and the expected outputs of HuggingFace.

Writes, next to this script:
  corpus.txt        one JSON string per line (>= 5,000 strings, built here with a fixed seed)
  <name>.expected   per tokenizer, one line per corpus string (see FORMAT), then id sequences
                    for decode-only checks

The C++ test (runtime/tokenizer/conformance_test.cc) imports the same files through
llmc::ImportTokenizerFiles and must reproduce every id and every decoded byte. CI has no Python,
so the outputs are committed; the tokenizer files themselves are read from ../shared/tokenizers
(see TOKENIZERS below: each row names the files the C++ test hands to the importer).

References: tokenizers' Tokenizer for tokenizer.json inputs; transformers' tokenizer classes
(their backend tokenizer, which is what transformers encodes with) for vocab.json + merges.txt
and tokenizer.model, built from exactly the files the C++ test imports.

FORMAT of <name>.expected (tab-separated, one line per corpus string):
  line 1: a JSON header {"prefix": [...], "suffix": [...], "decode_prefix", "decode_suffix",
          "strings": how many corpus strings follow (the first ones), versions}
  ids<TAB>ids_with_special<TAB>decoded_skip<TAB>decoded
    ids               encode(text, add_special_tokens=False), each id as 3 base64url digits
                      (A-Z a-z 0-9 - _, most significant first: ids below 2^18) with no
                      separator; for strings over 4,000 bytes
                      "#<count>:<fnv1a64 of the ids as little-endian int32>" instead
    ids_with_special  empty when it is prefix + ids + suffix, else written out like ids
    decoded_skip      decode(ids_with_special, skip_special_tokens=True) as a JSON string, or
                      empty when it equals the text
    decoded           decode(ids_with_special, skip_special_tokens=False) as a JSON string, or
                      empty when it equals header.decode_prefix + decoded_skip +
                      header.decode_suffix (e.g. "<s> " before the text for Llama 2)
    For strings over 4,000 bytes a decoded field that is not empty is
    "#<bytes>:<fnv1a64 of the UTF-8 bytes>".
  a line "#decode", then per id sequence: ids (as above)<TAB>decoded_skip (JSON)<TAB>decoded
  (JSON)

Usage: python3 make_conformance.py [SHARED_DIR]   (default: ../shared/tokenizers next to the
       repository root). Needs transformers, tokenizers, sentencepiece, protobuf, tiktoken.
"""

import json
import os
import random
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "..", ".."))
LONG_BYTES = 4000

# name -> files relative to SHARED (or "repo:" for the repository, "here:" for this folder).
# The C++ test carries the same table.
TOKENIZERS = {
    "stories260k": {"tokenizer_json": "repo:tests/data/stories260K/tokenizer.json"},
    "phi3": {"tokenizer_json": "phi3/tokenizer.json",
             "tokenizer_config": "phi3/tokenizer_config.json"},
    "gpt2": {"vocab_json": "gpt2/vocab.json", "merges_txt": "gpt2/merges.txt"},
    "qwen2": {"vocab_json": "qwen2/vocab.json", "merges_txt": "qwen2/merges.txt",
              "added_tokens_json": "qwen2/added_tokens.json",
              "tokenizer_config": "qwen2/tokenizer_config.json"},
    "llama3": {"tokenizer_model": "llama3/tokenizer.model",
               "tokenizer_config": "llama3/tokenizer_config.json"},
    "tinyllama": {"tokenizer_model": "tinyllama/tokenizer.model",
                  "tokenizer_config": "tinyllama/llama2_tokenizer_config.json"},
    "mistral_v0.1": {"tokenizer_model": "mistral/tokenizer.model",
                     "tokenizer_config": "here:mistral_v0.1_tokenizer_config.json"},
    "mistral_v0.3": {"tokenizer_model": "mistral/v0.3/tokenizer.model",
                     "tokenizer_config": "here:mistral_v0.3_tokenizer_config.json"},
    # Trained here (train_small), for components the real tokenizers do not use: the Whitespace
    # pre-tokenizer, RobertaProcessing, BertProcessing, unk without byte fallback, no decoder.
    # Only the first SMALL_STRINGS corpus strings: their decodes rarely equal the text (spaces
    # between tokens, lowercase), so every decode is stored.
    "whitespace_roberta": {"tokenizer_json": "here:whitespace_roberta.json", "strings": 1000},
    "whitespace_bert": {"tokenizer_json": "here:whitespace_bert.json", "strings": 1000},
}

# ---------------------------------------------------------------------------------------------
# The corpus.

WORDS = ("the of and a to in is was he for it with as his on be at by I had not are but from or "
         "have an they which one you were her all she there would their we him been has when who "
         "will more no if out so said what up its about into than them can only other new some "
         "could time these two may then do first any my now such like our over man me even most "
         "made after also did many before must through back years where much your way well down "
         "should because each just those people Mr how too little state good very make world "
         "still own see men work long get here between both life being under never day same "
         "another know while last might us great old year off come since against go came right "
         "used take three Once upon time little girl named Lily she loved play outside sun "
         "happy dog ball tree friend mom said wanted big bird sky park saw").split()
NAMES = ["Lily", "Tom", "Ben", "Sue", "Anna", "Mr. Smith", "Dr. Who", "O'Brien", "McDonald's",
         "São Paulo", "Zürich", "Kraków", "Ångström", "Dvořák", "naïve", "café", "résumé"]
CONTRACTIONS = ["it's", "don't", "I'm", "you're", "we've", "they'll", "he'd", "IT'S", "DON'T",
                "I'M", "You'Re", "y'all", "'s", "'t", "rock'n'roll", "can't"]
CODE = [
    "def f(x):\n    return x ** 2  # square\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }\n",
    "const x = {a: 1, 'b': [1, 2, 3], \"c\": null};\nconsole.log(x?.a ?? 0);",
    "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;",
    "<html><body><div class=\"x\">Hello &amp; welcome</div></body></html>",
    "if x != None and y <= 3:\n        pass\n    elif z: raise ValueError('bad')\n",
    "fn main() -> Result<(), Box<dyn Error>> {\n    let v: Vec<u8> = vec![0xFF; 16];\n    Ok(())\n}",
    "$ ls -la | grep '^d' | awk '{print $9}' > dirs.txt 2>&1",
    "x = [i*i for i in range(10) if i % 2 == 0]\r\nprint(x)\r\n",
    "{\"key\": \"value\", \"n\": 3.14e-10, \"arr\": [true, false]}",
    "    \n\n\t\t    return;\n  }\n}\n",
    "a+=b;c-=d;e*=f;g/=h;i%=j;k<<=1;l>>=2;m&=n;o|=p;q^=r;",
    "// TODO(user): fix this!!!\n/* multi\n   line */",
    "@decorator\nclass Foo(Bar, metaclass=Meta):\n    __slots__ = ('a',)\n",
]
SPECIALS = ["<s>", "</s>", "<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>",
            "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>",
            "<|end_header_id|>", "<|reserved_special_token_5|>", "[INST]", "[/INST]",
            "<|user|>", "<|assistant|>", "<|end|>", "<|system|>", "<|placeholder1|>",
            "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|vision_start|>",
            "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
            # near misses
            "<s", "s>", "< s>", "</s >", "<|im_start", "im_end|>", "<|eot_id", "[INST", "<|END|>",
            "<|endoftext|", "<<s>>", "<s><s>", "</s></s>"]
SCRIPTS = {
    "cjk": "你好世界这是一个测试中文文本的例子我们今天去公园玩了很开心日本語のテキストですひらがなカタカナ한국어텍스트입니다안녕하세요",
    "arabic": "مرحبا بالعالم هذا نص عربي للاختبار ١٢٣٤٥٦٧٨٩٠ السلام عليكم",
    "devanagari": "नमस्ते दुनिया यह एक परीक्षण है हिन्दी भाषा क्षत्रिय ज्ञान १२३",
    "thai": "สวัสดีชาวโลก นี่คือการทดสอบ ภาษาไทย",
    "hebrew": "שלום עולם זה מבחן בעברית",
    "cyrillic": "Привет мир Это тест Русский язык Ёлка ЖЖЖ",
    "greek": "Γειά σου Κόσμε ΣΊΣΥΦΟΣ αβγδεζηθ ς",
    "misc": "İstanbul ǅ ß ẞ ﬁ ﬀ ℌ ① ½ ² ㍱ Ａ ｶ ﹏ ∀x∈ℝ ∑ᵢ ≠ ∞ ← → ⇒ ♥ ☃ ✓",
}
EMOJI = ["😀", "👍", "👍🏽", "👍🏿", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸", "🇯🇵", "❤️", "🧬", "🤷‍♀️",
         "🧑🏻‍🤝‍🧑🏿", "✋🏼", "🫶", "🐈‍⬛", "1️⃣", "#️⃣", "©️", "🔥🔥🔥", "😂😂"]
SPACES = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r\n\r\n", "\r", " \n ", "\n \n",
          "\u00a0", "\u2009", "\u3000", "\u200b", "\u2028", "\u0085", "\f", "\v", " \t\n\r "]
COMBINING = [chr(c) for c in range(0x300, 0x370)] + ["\u20dd", "\u0e48", "\u093f", "\u094d"]


# Normalization edge cases, appended last so that the strings before them keep their lines. HF
# normalizes with Unicode 9.0 tables (unicode-normalization-alignments), so marks whose combining
# class or composition came later stay where they are: ICU 72 (Unicode 15) put U+07FD before
# U+0301 and composed U+11935 U+11930. Also Hangul jamo, compatibility forms and case mappings.
NORMALIZATION = ["\u0301\u07fd", "a\u0301\u07fd", "\U00011935\U00011930",
                 "x\U00011935\U00011930y", "e\u0301\u0898", "\u1abf\u0301a",
                 "\u0915\u093c\u0301\u08d3", "\u1100\u1161\u11a8", "\uac00\u11a8",
                 "\ud55c\uad6d\uc5b4\u11a8", "\ufb01\u00bd\u2460\u3371\uff21", "\u1e9b\u0323",
                 "\ua7ce\ua7cb\u1c89\U00010d50", "\u0130STANBUL \u03a3\u0391\u03a3 \u00df",
                 "q\u0307\u0323", "\u0041\u030a\u212b\u00c5"]
# Code points whose canonical combining class differs between Unicode 9.0 and 15.0 (new marks).
NEWER_MARKS = [0x07FD, 0x0898, 0x0899, 0x089A, 0x089B, 0x089C, 0x089D, 0x089E, 0x089F, 0x08CA,
               0x08D3, 0x09FE, 0x0C3C, 0x0D3B, 0x0D3C, 0x0EBA, 0x1715, 0x1ABF, 0x1AC0, 0x1ACE,
               0x1DF6, 0x1DFA, 0xA82C, 0x10D24, 0x10D27, 0x10EAB, 0x10F46, 0x10F50, 0x10F82,
               0x11070, 0x1133B, 0x1145E, 0x11839, 0x1193D, 0x1193E, 0x11943, 0x119E0, 0x11A34,
               0x11A47, 0x11A99, 0x11D42, 0x11D97, 0x16FF0, 0x1E130, 0x1E2AE, 0x1E2EC, 0x1E4EC]


def prose(rng, words):
    out = []
    for i in range(words):
        w = rng.choice(WORDS)
        if i == 0 or rng.random() < 0.08:
            w = w.capitalize()
        if rng.random() < 0.05:
            w = rng.choice(NAMES)
        if rng.random() < 0.05:
            w = rng.choice(CONTRACTIONS)
        out.append(w)
        if rng.random() < 0.1:
            out[-1] += rng.choice([",", ".", ";", ":", "!", "?", "...", " -", "\"", ")"])
    return " ".join(out) + rng.choice([".", "!", "?", "", "\n"])


def digits(rng):
    n = rng.choice([1, 2, 3, 4, 5, 7, 10, 16, 25, 40, 64])
    s = "".join(rng.choice("0123456789") for _ in range(n))
    return rng.choice([s, f"{s}.{rng.randint(0, 999)}", f"${s}", f"{s}%", f"-{s}", f"{s[:3]},{s}",
                       f"v{s[:2]}.{s[2:4]}", f"{s}th", f"0x{s}", f"٣٤٥{s}", f"１２{s}"])


def script_text(rng):
    name = rng.choice(list(SCRIPTS))
    text = SCRIPTS[name]
    start = rng.randrange(len(text))
    return text[start:start + rng.randint(1, 30)]


def emoji(rng):
    return "".join(rng.choice(EMOJI) + rng.choice(["", "", " ", "\u200d"]) for _ in range(rng.randint(1, 5)))


def combining(rng):
    out = []
    for _ in range(rng.randint(1, 8)):
        out.append(rng.choice("aeiouAEIOUnczsyx"))
        for _ in range(rng.randint(0, 3)):
            out.append(rng.choice(COMBINING))
    return "".join(out)


def random_unicode(rng):
    ranges = [(0x20, 0x7e), (0xa0, 0x24f), (0x370, 0x3ff), (0x400, 0x4ff), (0x590, 0x6ff),
              (0x900, 0x97f), (0xe00, 0xe7f), (0x1100, 0x11ff), (0x2000, 0x206f), (0x2100, 0x22ff),
              (0x3040, 0x30ff), (0x4e00, 0x9fff), (0xac00, 0xd7a3), (0xf900, 0xfaff),
              (0xfe00, 0xfe0f), (0xff00, 0xffef), (0x1f300, 0x1faff), (0x20000, 0x2a6df),
              (0xe000, 0xe0ff), (0x1, 0x1f), (0xfff0, 0xfffd)]
    out = []
    for _ in range(rng.randint(1, 20)):
        lo, hi = rng.choice(ranges)
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def fragment(rng):
    kind = rng.randrange(10)
    if kind == 0:
        return prose(rng, rng.randint(1, 12))
    if kind == 1:
        return rng.choice(CODE)
    if kind == 2:
        return rng.choice(SPACES) * rng.randint(1, 4)
    if kind == 3:
        return digits(rng)
    if kind == 4:
        return script_text(rng)
    if kind == 5:
        return emoji(rng)
    if kind == 6:
        return combining(rng)
    if kind == 7:
        return rng.choice(SPECIALS)
    if kind == 8:
        return random_unicode(rng)
    return rng.choice(CONTRACTIONS + NAMES)


def build_corpus():
    rng = random.Random(20261121)
    corpus = ["", " ", "  ", "\n", "\t", "\r\n", "a", "A", "0", "Hello", " Hello", "Hello ",
              "Hello world", "hello\nworld", "Once upon a time", "\u00a0", "\ufeff", "\ufffd",
              "a\u00a0b", "<s>", "</s>", "<unk>", "<s> ", " <s>", "<s>x</s> y"]
    for special in SPECIALS:
        corpus += [special, f"text {special} text", f"{special}\n{prose(rng, 3)}",
                   f"{prose(rng, 2)}{special}", f"  {special}  ", special * 2]
    for code in CODE:
        corpus += [code, code.replace("    ", "\t"), code.strip()]
    for sep in SPACES:
        corpus += [f"a{sep}b", f"{sep}x", f"x{sep}", sep * 3, f"word{sep}{sep}word"]
    for n in [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 15, 16, 17, 31, 32, 33, 100, 257]:
        corpus += [" " * n + "x", "x" + " " * n, "\n" * n, "\t" * n + "y", "7" * n,
                   "".join(str(i % 10) for i in range(n)), "-" * n, "=" * n + ">"]
    for name, text in SCRIPTS.items():
        corpus += [text, text[:10], " " + text, text.replace(" ", "  ")]
    corpus += EMOJI + ["".join(EMOJI), " ".join(EMOJI)]
    while len(set(corpus)) < 5300:
        parts = [fragment(rng) for _ in range(rng.choice([1, 1, 1, 2, 3]))]
        joiner = rng.choice(["", " ", "\n", "", " "])
        corpus.append(joiner.join(parts))
    # A ~100 kB string: prose and code with every other kind mixed in.
    big = []
    size = 0
    while size < 100_000:
        piece = fragment(rng) + rng.choice([" ", "\n", "", "\n\n"])
        big.append(piece)
        size += len(piece.encode("utf-8"))
    corpus.append("".join(big))
    corpus.append(prose(rng, 3000))  # long plain prose (~17 kB)
    corpus += NORMALIZATION + [f"a\u0301{chr(c)}\u0300 x{chr(c)}" for c in NEWER_MARKS]
    seen = set()
    unique = []
    for text in corpus:
        if text not in seen:
            seen.add(text)
            unique.append(text)
    return unique


# ---------------------------------------------------------------------------------------------
# The references.

def path_of(shared, spec):
    if spec.startswith("repo:"):
        return os.path.join(ROOT, spec[5:])
    if spec.startswith("here:"):
        return os.path.join(HERE, spec[5:])
    return os.path.join(shared, spec)


def load(shared, name, files):
    """The HF tokenizer for `files`: tokenizers' Tokenizer for tokenizer.json, otherwise the
    transformers class built from a folder holding exactly these files."""
    import tokenizers
    import transformers
    if "tokenizer_json" in files:
        return tokenizers.Tokenizer.from_file(path_of(shared, files["tokenizer_json"]))
    folder = tempfile.mkdtemp(prefix=f"conformance_{name}_")
    targets = {"vocab_json": "vocab.json", "merges_txt": "merges.txt",
               "added_tokens_json": "added_tokens.json", "tokenizer_model": "tokenizer.model",
               "tokenizer_config": "tokenizer_config.json"}
    for key, target in targets.items():
        if key in files and key != "strings":
            shutil.copy(path_of(shared, files[key]), os.path.join(folder, target))
    if "vocab_json" in files:
        cls = transformers.AutoTokenizer if "tokenizer_config" in files else transformers.GPT2Tokenizer
    elif name.startswith("llama3"):
        cls = transformers.AutoTokenizer
    else:
        cls = transformers.LlamaTokenizer
    tok = cls.from_pretrained(folder)
    shutil.rmtree(folder)
    # Check that transformers encodes with its backend as this script assumes.
    for text in ["Hello world", " <s> x", "<|im_start|>a"]:
        for special in (False, True):
            assert tok.encode(text, add_special_tokens=special) == \
                tok.backend_tokenizer.encode(text, add_special_tokens=special).ids, (name, text)
    return tok.backend_tokenizer


def fnv1a64(ids):
    h = 0xcbf29ce484222325
    for i in ids:
        for b in int(i).to_bytes(4, "little", signed=True):
            h ^= b
            h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


DIGITS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def pack(ids):
    out = []
    for i in ids:
        assert 0 <= i < 1 << 18, i
        out.append(DIGITS[i >> 12] + DIGITS[(i >> 6) & 63] + DIGITS[i & 63])
    return "".join(out)


def ids_field(ids, text):
    if len(text.encode("utf-8")) > LONG_BYTES:
        return f"#{len(ids)}:{fnv1a64(ids):016x}"
    return pack(ids)


def js(text):
    return json.dumps(text, ensure_ascii=False)


def text_field(decoded, text):
    if len(text.encode("utf-8")) > LONG_BYTES:
        data = decoded.encode("utf-8")
        h = 0xcbf29ce484222325
        for b in data:
            h ^= b
            h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
        return f"#{len(data)}:{h:016x}"
    return js(decoded)


def expected(tok, corpus, rng):
    import tokenizers
    # The template's prefix and suffix, from an empty sequence.
    empty_special = tok.encode("", add_special_tokens=True).ids
    probe_plain = tok.encode("x", add_special_tokens=False).ids
    probe = tok.encode("x", add_special_tokens=True).ids
    start = len(probe) - len(probe_plain)
    prefix = probe[:next(i for i in range(len(probe)) if probe[i:i + len(probe_plain)] == probe_plain)]
    suffix = probe[len(prefix) + len(probe_plain):]
    del start, empty_special
    rows = []
    affixes = {}
    for text in corpus:
        plain = tok.encode(text, add_special_tokens=False).ids
        with_special = tok.encode(text, add_special_tokens=True).ids
        skip = tok.decode(with_special, skip_special_tokens=True)
        full = tok.decode(with_special, skip_special_tokens=False)
        rows.append((text, plain, with_special, skip, full))
        if skip and skip in full:
            at = full.index(skip)
            key = (full[:at], full[at + len(skip):])
            affixes[key] = affixes.get(key, 0) + 1
    decode_prefix, decode_suffix = max(affixes, key=affixes.get) if affixes else ("", "")
    import transformers
    lines = [json.dumps({"prefix": prefix, "suffix": suffix, "decode_prefix": decode_prefix,
                         "strings": len(corpus),
                         "decode_suffix": decode_suffix,
                         "tokenizers_version": tokenizers.__version__,
                         "transformers_version": transformers.__version__}, ensure_ascii=False)]
    for text, plain, with_special, skip, full in rows:
        fields = [ids_field(plain, text),
                  "" if with_special == prefix + plain + suffix else ids_field(with_special, text),
                  "" if skip == text else text_field(skip, text),
                  "" if full == decode_prefix + skip + decode_suffix else text_field(full, text)]
        lines.append("\t".join(fields))
    lines.append("#decode")
    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    byte_ids = [tok.token_to_id(f"<0x{b:02X}>") for b in range(256)]
    byte_ids = [i for i in byte_ids if i is not None]
    for index in range(200):
        ids = [rng.randrange(vocab_size) for _ in range(rng.randint(0, 24))]
        if byte_ids and index % 2 == 0:
            pos = rng.randint(0, len(ids))
            ids[pos:pos] = [rng.choice(byte_ids) for _ in range(rng.randint(1, 6))]
        lines.append("\t".join([pack(ids),
                                js(tok.decode(ids, skip_special_tokens=True)),
                                js(tok.decode(ids, skip_special_tokens=False))]))
    return "\n".join(lines) + "\n"


def train_small(corpus):
    """Writes whitespace_roberta.json and whitespace_bert.json unless they exist (training is not
    bit-for-bit reproducible across tokenizers versions; the committed files are the test)."""
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    lines = [t for t in corpus[:3000] if t]
    path = os.path.join(HERE, "whitespace_roberta.json")
    if not os.path.exists(path):
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        tok.train_from_iterator(lines, trainers.BpeTrainer(
            vocab_size=800, special_tokens=["<s>", "<pad>", "</s>", "<unk>"], show_progress=False))
        tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
        tok.save(path)
    path = os.path.join(HERE, "whitespace_bert.json")
    if not os.path.exists(path):
        tok = Tokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix="##"))
        tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        tok.train_from_iterator(lines, trainers.BpeTrainer(
            vocab_size=600, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"],
            continuing_subword_prefix="##", show_progress=False))
        tok.post_processor = processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
        tok.save(path)


def main():
    shared = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "..", "shared", "tokenizers")
    corpus = build_corpus()
    assert len(corpus) >= 5000, len(corpus)
    with open(os.path.join(HERE, "corpus.txt"), "w", encoding="utf-8", newline="\n") as f:
        for text in corpus:
            f.write(js(text) + "\n")
    train_small(corpus)
    for name, files in TOKENIZERS.items():
        tok = load(shared, name, files)
        text = expected(tok, corpus[:files.get("strings", len(corpus))], random.Random(7))
        with open(os.path.join(HERE, f"{name}.expected"), "w", encoding="utf-8",
                  newline="\n") as f:
            f.write(text)
        print(f"{name}: {len(text)} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()

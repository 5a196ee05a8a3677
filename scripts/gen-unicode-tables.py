#!/usr/bin/env python3
"""Generates runtime/tokenizer/unicode_tables.inc: the Unicode tables of the tokenizer's NFC, NFKC
and Lowercase normalizers, at the Unicode versions HF `tokenizers` uses.

Why these versions (see docs/architecture.md, "Unicode tables of our own, at HF's versions, instead of ICU"):
  - NFC/NFKC: HF normalizes with the Rust crate unicode-normalization-alignments 0.1.12, whose
    tables are Unicode 9.0.0 (its UNICODE_VERSION). Newer data reorders or composes differently
    (U+07FD has canonical combining class 220 since Unicode 11; U+11935 U+11930 compose since 13).
  - Lowercase: HF calls Rust's char::to_lowercase, whose tables are those of the Rust release
    that built the wheel: Unicode 17.0.0 for tokenizers 0.23.3.
Both were confirmed on every code point against tokenizers 0.23.3 (the sweep test,
runtime/tokenizer/unicode_normalize_test.cc, checks the same with committed HF outputs).

Where the data comes from: Debian ships only one UCD (unicode-data, 15.0.0) and the build
machines reach nothing but Debian and PyPI, so the data is taken from PyPI's unicodedata2, which
compiles the UCD of one version into C tables:
  - unicodedata2 9.0.0.post4 (UCD 9.0.0: UnicodeData.txt, CompositionExclusions.txt,
    DerivedNormalizationProps.txt), built here and asked through its Python API: combining
    class, decomposition mapping, and NFC of a canonical pair (a pair that NFC leaves decomposed
    is a composition exclusion). Its 2017 C source needs two one-line fixes to build on
    Python >= 3.11 (below).
  - unicodedata2 17.0.1's unicodetype_db.h (CPython's makeunicodedata.py output for UCD 17.0.0:
    UnicodeData.txt simple mappings + SpecialCasing.txt unconditional ones), read as text; the
    package has no Python API for case mappings.

Usage: python3 scripts/gen-unicode-tables.py [--work DIR]
  Downloads both source distributions with pip into DIR (default: a temporary folder), builds
  9.0.0.post4 into a venv there, and rewrites runtime/tokenizer/unicode_tables.inc. Needs
  network access to PyPI, gcc and the Python headers; the output is committed, so builds need
  none of this.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
OUTPUT = os.path.join(ROOT, "runtime", "tokenizer", "unicode_tables.inc")
NORMALIZATION_PACKAGE = "unicodedata2==9.0.0.post4"
CASE_PACKAGE = "unicodedata2==17.0.1"
NORMALIZATION_VERSION = "9.0.0"
CASE_VERSION = "17.0.0"

HANGUL_FIRST, HANGUL_LAST = 0xAC00, 0xD7A3


def run(*command, **kwargs):
    subprocess.run(command, check=True, **kwargs)


def prepare(work):
    """Downloads both sdists into `work`, builds the 9.0 one into a venv; returns the venv's
    python and the path of the 17.0 unicodetype_db.h."""
    pip = [sys.executable, "-m", "pip"]
    for package in (NORMALIZATION_PACKAGE, CASE_PACKAGE):  # one at a time: same project name
        run(*pip, "download", "--quiet", "--no-deps", "--no-binary", ":all:", package, "-d", work)
    for name in os.listdir(work):
        if name.endswith(".tar.gz"):
            run("tar", "xzf", name, cwd=work)
    source = os.path.join(work, "unicodedata2-9.0.0.post4")
    module = os.path.join(source, "unicodedata2", "py3")
    # ucnhash.h left Python's public headers in 3.10; the module includes it only for a struct
    # that is commented out.
    with open(os.path.join(module, "ucnhash.h"), "w") as f:
        f.write("/* empty: the name-lookup capsule is unused */\n")
    # Py_TYPE() is no longer an lvalue since Python 3.11.
    path = os.path.join(module, "unicodedata.c")
    with open(path) as f:
        text = f.read()
    text = text.replace("Py_TYPE(&UCD_Type) = &PyType_Type;",
                        "Py_SET_TYPE(&UCD_Type, &PyType_Type);")
    with open(path, "w") as f:
        f.write(text)
    venv = os.path.join(work, "venv")
    run(sys.executable, "-m", "venv", venv)
    python = os.path.join(venv, "bin", "python")
    run(python, "-m", "pip", "install", "--quiet", source)
    case_db = os.path.join(work, "unicodedata2-17.0.1", "unicodedata2", "unicodetype_db.h")
    return python, case_db


# ---------------------------------------------------------------------------------------------
# Inside the venv: the tables.

def code_points():
    return (c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)


def normalization_tables():
    import unicodedata2 as ucd
    assert ucd.unidata_version == NORMALIZATION_VERSION, ucd.unidata_version
    ccc_runs = []  # [first, count, class]
    canonical = []  # (code point, first, second or 0)
    compatibility = []  # (code point, [code points])
    compositions = []  # (first, second, composite)
    for c in code_points():
        ccc = ucd.combining(chr(c))
        if ccc:
            last = ccc_runs[-1] if ccc_runs else None
            if last and last[0] + last[1] == c and last[2] == ccc and last[1] < 256:
                last[1] += 1
            else:
                ccc_runs.append([c, 1, ccc])
        if HANGUL_FIRST <= c <= HANGUL_LAST:
            continue  # algorithmic (Unicode 3.12)
        mapping = ucd.decomposition(chr(c))
        if not mapping:
            continue
        parts = mapping.split()
        if parts[0].startswith("<"):
            compatibility.append((c, [int(p, 16) for p in parts[1:]]))
            continue
        targets = [int(p, 16) for p in parts]
        assert 1 <= len(targets) <= 2, (hex(c), mapping)
        canonical.append((c, targets[0], targets[1] if len(targets) == 2 else 0))
        # A primary composite: a pair that NFC recomposes (singletons, non-starter
        # decompositions and CompositionExclusions.txt stay decomposed).
        if len(targets) == 2 and ucd.normalize("NFC", chr(targets[0]) + chr(targets[1])) == chr(c):
            compositions.append((targets[0], targets[1], c))
    compositions.sort()
    # Quick check: a BMP code point is inert for a form when it has class 0, the form leaves it
    # as it is, and it is never the second of a composition. A run of inert code points needs no
    # work, and one ends every stretch that does (UAX #15, section 9).
    seconds = {b for _, b, _ in compositions} | set(range(0x1161, 0x1176)) | \
        set(range(0x11A8, 0x11C3))
    inert = {}
    for form in ("NFC", "NFKC"):
        bits = [0] * (0x10000 // 32)
        for c in range(0x10000):
            if 0xD800 <= c <= 0xDFFF:
                continue
            if (ucd.combining(chr(c)) == 0 and c not in seconds and
                    ucd.normalize(form, chr(c)) == chr(c)):
                bits[c >> 5] |= 1 << (c & 31)
        inert[form] = bits
    supplementary_seconds = sorted(b for b in seconds if b > 0xFFFF)
    return ccc_runs, canonical, compatibility, compositions, inert, supplementary_seconds


def case_tables(case_db):
    with open(os.path.join(os.path.dirname(case_db), "unicodedata_db.h")) as f:
        version = re.search(r'#define UNIDATA_VERSION "([^"]+)"', f.read()).group(1)
    assert version == CASE_VERSION, version
    with open(case_db) as f:
        source = f.read()

    def array(name):
        return re.search(r"%s\[\] = \{(.*?)\};" % re.escape(name), source, re.S).group(1)

    records = [tuple(int(x) for x in r.split(","))
               for r in re.findall(r"\{([^{}]*)\}", array("_PyUnicode_TypeRecords"))]
    extended = [int(x) for x in array("_PyUnicode_ExtendedCase").split(",") if x.strip()]
    index1 = [int(x) for x in array("index1").split(",") if x.strip()]
    index2 = [int(x) for x in array("index2").split(",") if x.strip()]
    shift = int(re.search(r"#define SHIFT (\d+)", source).group(1))
    extended_case_mask = 0x4000  # unicodectype.c

    def lower(c):
        record = records[index2[(index1[c >> shift] << shift) + (c & ((1 << shift) - 1))]]
        delta, flags = record[1], record[5]
        if flags & extended_case_mask:
            start, count = delta & 0xFFFF, delta >> 24
            return extended[start:start + count]
        return [(c + delta) & 0xFFFFFFFF]

    ranges = []  # [first, count, stride, delta]
    multiple = []  # (code point, [code points])
    for c in code_points():
        mapped = lower(c)
        if mapped == [c]:
            continue
        if len(mapped) > 1:
            multiple.append((c, mapped))
            continue
        delta = mapped[0] - c
        last = ranges[-1] if ranges else None
        if last and last[3] == delta and last[1] < 65535:
            if last[1] == 1 and c - last[0] in (1, 2):
                last[2] = c - last[0]
                last[1] = 2
                continue
            if last[1] > 1 and last[0] + last[1] * last[2] == c:
                last[1] += 1
                continue
        ranges.append([c, 1, 1, delta])
    return ranges, multiple


def hex_list(values, per_line, width):
    lines = []
    for start in range(0, len(values), per_line):
        lines.append("    " + " ".join(f"0x{v:0{width}X}," for v in values[start:start + per_line]))
    return "\n".join(lines)


def write(case_db):
    ccc_runs, canonical, compatibility, compositions, inert, supplementary_seconds = \
        normalization_tables()
    lower_ranges, lower_multiple = case_tables(case_db)
    compat_data = []
    compat_keys = []
    compat_offsets = []
    for c, targets in compatibility:
        assert len(targets) < 32 and c < (1 << 21)
        compat_keys.append(c << 5 | len(targets))
        compat_offsets.append(len(compat_data))
        compat_data.extend(targets)
    assert len(compat_data) < 65536
    wide = any(t > 0xFFFF for t in compat_data)
    out = []
    out.append(f"""// Generated by scripts/gen-unicode-tables.py; do not edit.
// Normalization (NFC, NFKC): Unicode {NORMALIZATION_VERSION} ({NORMALIZATION_PACKAGE} on PyPI), the version of
// unicode-normalization-alignments 0.1.12 that HF tokenizers normalizes with.
// Lowercase: Unicode {CASE_VERSION} ({CASE_PACKAGE} on PyPI), the version of Rust's char::to_lowercase
// in tokenizers 0.23.3.
// Included once, by runtime/tokenizer/unicode_normalize.cc.

// Canonical combining classes other than 0, as runs of equal class, sorted.
struct CombiningClassRun {{
  uint32_t first;
  uint8_t count_minus_one;
  uint8_t combining_class;
}};
constexpr CombiningClassRun kCombiningClassRuns[] = {{""")
    for first, count, ccc in ccc_runs:
        out.append(f"    {{0x{first:05X}, {count - 1}, {ccc}}},")
    out.append("};")
    out.append(f"""
// Canonical decompositions (one level; Hangul syllables are algorithmic), sorted: the code point
// in bits 0-20, the first code point of its mapping in bits 21-41, the second (0 for a
// singleton) in bits 42-62.
constexpr uint64_t kCanonicalDecompositions[] = {{""")
    out.append(hex_list([c | a << 21 | b << 42 for c, a, b in canonical], 4, 16))
    out.append("};")
    out.append(f"""
// Compatibility decompositions (one level), sorted: the code point << 5 | the mapping's length,
// and the mapping's offset in kCompatibilityData.
constexpr uint32_t kCompatibilityKeys[] = {{""")
    out.append(hex_list(compat_keys, 8, 8))
    out.append("};")
    out.append("constexpr uint16_t kCompatibilityOffsets[] = {")
    out.append(hex_list(compat_offsets, 10, 4))
    out.append("};")
    data_type = "char32_t" if wide else "char16_t"
    out.append(f"constexpr {data_type} kCompatibilityData[] = {{")
    out.append(hex_list(compat_data, 10, 5 if wide else 4))
    out.append("};")
    out.append(f"""
// Primary composites (canonical pairs that NFC recomposes), sorted by pair: the first code point
// in bits 42-62, the second in bits 21-41, the composite in bits 0-20.
constexpr uint64_t kCompositions[] = {{""")
    out.append(hex_list([a << 42 | b << 21 | c for a, b, c in compositions], 4, 16))
    out.append("};")
    out.append(f"""
// Inert BMP code points (class 0, unchanged by the form, never the second of a composition): bit
// (c & 31) of word c >> 5. Text made of them is already normalized, and each one ends a stretch
// that can be normalized alone.
constexpr uint32_t kNfcInertBmp[] = {{""")
    out.append(hex_list(inert["NFC"], 8, 8))
    out.append("};")
    out.append("constexpr uint32_t kNfkcInertBmp[] = {")
    out.append(hex_list(inert["NFKC"], 8, 8))
    out.append("};")
    out.append("// Second code points of compositions above the BMP, sorted.")
    out.append("constexpr uint32_t kSupplementaryCompositionSeconds[] = {")
    out.append(hex_list(supplementary_seconds, 8, 5))
    out.append("};")
    out.append(f"""
// Lowercase mappings to one code point: `count` code points from `first`, `stride` apart, each
// mapped to itself + delta. Sorted.
struct LowercaseRange {{
  uint32_t first;
  uint16_t count;
  uint8_t stride;
  int32_t delta;
}};
constexpr LowercaseRange kLowercaseRanges[] = {{""")
    for first, count, stride, delta in lower_ranges:
        out.append(f"    {{0x{first:05X}, {count}, {stride}, {delta}}},")
    out.append("};")
    out.append("""
// Lowercase mappings to more than one code point (SpecialCasing.txt, unconditional).
struct LowercaseMultiple {
  uint32_t code_point;
  char32_t mapping[3];
};
constexpr LowercaseMultiple kLowercaseMultiple[] = {""")
    for c, mapped in lower_multiple:
        assert len(mapped) <= 3
        padded = mapped + [0] * (3 - len(mapped))
        out.append(f"    {{0x{c:05X}, {{{', '.join(f'0x{m:04X}' for m in padded)}}}}},")
    out.append("};")
    text = "\n".join(out) + "\n"
    temporary = OUTPUT + ".tmp"
    with open(temporary, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    os.replace(temporary, OUTPUT)
    print(f"{OUTPUT}: {len(ccc_runs)} combining-class runs, {len(canonical)} canonical and "
          f"{len(compatibility)} compatibility decompositions ({len(compat_data)} code points), "
          f"{len(compositions)} compositions, {len(lower_ranges)} lowercase ranges, "
          f"{len(lower_multiple)} multi-character lowercase mappings", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", help="folder for the downloads and the venv")
    parser.add_argument("--case-db", help=argparse.SUPPRESS)  # set when re-run inside the venv
    args = parser.parse_args()
    if args.case_db:
        write(args.case_db)
        return
    work = args.work or tempfile.mkdtemp(prefix="unicode-tables-")
    os.makedirs(work, exist_ok=True)
    python, case_db = prepare(os.path.abspath(work))
    run(python, os.path.abspath(__file__), "--case-db", case_db)


if __name__ == "__main__":
    main()

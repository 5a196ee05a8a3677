#!/usr/bin/env python3
"""Runs llama.cpp's convert_hf_to_gguf.py on a synthetic checkpoint (`llmc synth`).

    convert_gguf.py LLAMA_CPP_DIR MODEL_DIR [convert_hf_to_gguf.py options...]

Imports LLAMA_CPP_DIR/convert_hf_to_gguf.py as a module and calls its main() with MODEL_DIR and
the options, after one change: Qwen2-MoE reads its vocabulary through the converter's GPT-2 BPE
path, which recognises a tokenizer by the hash of its pre-tokenizer's output on a fixed text and
refuses any other ("BPE pre-tokenizer was not recognized"), the synthetic byte-level one
included. Qwen2MoeModel reads MODEL_DIR/tokenizer.model through the SentencePiece path instead;
`spm_from_tokenizer_json.py MODEL_DIR` writes one with the same pieces in id order (this script
writes it when it is missing). Benchmarks feed random token ids, so only the vocabulary's size
matters to them. Every other architecture converts exactly as with the converter itself.
"""
import importlib.util
import subprocess
import sys
from pathlib import Path


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    llama_cpp, model_dir, options = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
    script = llama_cpp / "convert_hf_to_gguf.py"
    if not script.is_file():
        print(f"{script}: not found (LLAMA_CPP_DIR must be a llama.cpp checkout)", file=sys.stderr)
        return 2
    spec = importlib.util.spec_from_file_location("convert_hf_to_gguf", script)
    converter = importlib.util.module_from_spec(spec)
    sys.modules["convert_hf_to_gguf"] = converter
    spec.loader.exec_module(converter)

    def sentencepiece_vocab(model):
        if not (model.dir_model / "tokenizer.model").is_file():
            subprocess.run([sys.executable, str(Path(__file__).with_name("spm_from_tokenizer_json.py")),
                            str(model.dir_model)], check=True)
        model._set_vocab_sentencepiece()

    converter.Qwen2MoeModel.set_vocab = sentencepiece_vocab
    sys.argv = [str(script), str(model_dir), *options]
    converter.main()
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Writes MODEL_DIR/tokenizer.model (SentencePiece, BPE) holding MODEL_DIR/tokenizer.json's vocabulary.

    spm_from_tokenizer_json.py MODEL_DIR

`llmc synth` writes a tokenizer.json only. llama.cpp's converter reads the vocabulary of Gemma and
Phi-3 checkpoints from a SentencePiece tokenizer.model and has no fallback, so the side-by-side
benchmark gives it one: the same pieces in id order (added tokens as control pieces, `<unk>` as
the unknown piece). llama.cpp's loader looks up the newline byte piece `<0x0A>`, so a vocabulary
without byte pieces gets them in place of its first 256 ordinary pieces (the synthetic byte-level
BPE vocabularies have none). Benchmarks feed random token ids, so only the vocabulary's size and
order matter; nothing here tokenizes text.
"""
import json
import sys
from pathlib import Path

from sentencepiece import SentencePieceProcessor
from sentencepiece import sentencepiece_model_pb2 as spm


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    model_dir = Path(sys.argv[1])
    tokenizer = json.loads((model_dir / "tokenizer.json").read_text())
    vocab = dict(tokenizer["model"]["vocab"])
    added = {token["content"]: token["id"] for token in tokenizer.get("added_tokens", [])}
    vocab.update(added)
    by_id = sorted(vocab.items(), key=lambda item: item[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        print(f"{model_dir}/tokenizer.json: token ids are not 0..{len(by_id) - 1}", file=sys.stderr)
        return 1
    if "<unk>" not in added:
        print(f"{model_dir}/tokenizer.json: no <unk> added token (SentencePiece needs one)",
              file=sys.stderr)
        return 1
    proto = spm.ModelProto()
    proto.trainer_spec.model_type = spm.TrainerSpec.BPE
    proto.trainer_spec.vocab_size = len(by_id)
    proto.trainer_spec.unk_id = added["<unk>"]
    proto.trainer_spec.bos_id = added.get("<s>", added.get("<bos>", -1))
    proto.trainer_spec.eos_id = added.get("</s>", added.get("<eos>", -1))
    proto.trainer_spec.pad_id = added.get("<pad>", -1)
    proto.normalizer_spec.name = "identity"
    proto.normalizer_spec.add_dummy_prefix = False
    byte_pieces = [f"<0x{b:02X}>" for b in range(256)]
    missing_bytes = "<0x0A>" not in vocab
    if missing_bytes and any(piece in vocab for piece in byte_pieces):
        print(f"{model_dir}/tokenizer.json: some byte pieces but not <0x0A>", file=sys.stderr)
        return 1
    next_byte = 0
    for piece, token_id in by_id:
        entry = proto.pieces.add()
        entry.piece = piece
        entry.score = -float(token_id)
        if piece == "<unk>":
            entry.type = spm.ModelProto.SentencePiece.UNKNOWN
        elif piece in added:
            entry.type = spm.ModelProto.SentencePiece.CONTROL
        elif missing_bytes and next_byte < 256:
            entry.piece = byte_pieces[next_byte]
            entry.type = spm.ModelProto.SentencePiece.BYTE
            next_byte += 1
        else:
            entry.type = spm.ModelProto.SentencePiece.NORMAL
    if missing_bytes and next_byte < 256:
        print(f"{model_dir}/tokenizer.json: fewer than 256 ordinary pieces", file=sys.stderr)
        return 1
    out = model_dir / "tokenizer.model"
    out.write_bytes(proto.SerializeToString())
    loaded = SentencePieceProcessor(model_file=str(out))
    if loaded.vocab_size() != len(by_id):
        print(f"{out}: SentencePiece reads {loaded.vocab_size()} pieces, wrote {len(by_id)}",
              file=sys.stderr)
        return 1
    print(f"{out}: {len(by_id)} pieces")
    return 0


if __name__ == "__main__":
    sys.exit(main())

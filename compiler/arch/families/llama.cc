// LlamaForCausalLM (transformers' modeling_llama.py): pre-norm decoder layers, GQA, rope
// (default, linear, llama3, yarn), SwiGLU MLP; attention_bias puts a bias on q/k/v/o, mlp_bias
// on gate/up/down.
#include "compiler/arch/blocks.h"
#include "compiler/arch/family.h"
#include "compiler/arch/family_config.h"

namespace llmc {

extern const Family kLlamaFamily{"LlamaForCausalLM",
                                 {"llama", std::nullopt, 2048, 1, 2},
                                 ReadAttentionAndMlpBias,
                                 blocks::LlamaDecoder};

}  // namespace llmc

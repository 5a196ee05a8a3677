// Kernels of the CPU backend, compiled once per SIMD target with Google Highway and chosen at
// run time (see dispatch.h). Each function here dispatches once per call (per op), then runs
// target-specific code over the whole op, split across the thread pool.
//
// Activations are row-major [rows, width] f32. Matrices are F32, F16 or BF16, either ROW_MAJOR
// or packed in ROW_PANELS of kPanelRows rows (plan.proto, Tensor.Layout); everything
// accumulates in f32.
//
// Thread-safety: the functions are pure apart from their output arguments; each uses the pool
// it is given, so they must not run concurrently on one pool.
#ifndef LLMRT_BACKEND_CPU_KERNELS_H_
#define LLMRT_BACKEND_CPU_KERNELS_H_

#include <cstdint>

#include "runtime/backend/cpu/amx_tiles.h"
#include "runtime/plan/proto/plan.pb.h"
#include "runtime/threading/thread_pool.h"

namespace llmrt::cpu {

using threading::ThreadPool;

// Rows per panel of a ROW_PANELS matrix: one AVX-512 vector, two AVX2 vectors, four SSE4/NEON
// vectors of f32, so one packed blob serves every dispatch target.
inline constexpr int32_t kPanelRows = 16;

struct MatrixView {
  const uint8_t* data = nullptr;
  plan::DType dtype = plan::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  int32_t panel_rows = 0;  // 0: ROW_MAJOR; kPanelRows: ROW_PANELS (rows a multiple of it)
  // I8 / I4 / FP4_E2M1 only (plan.proto, Quantization; I8 ROW_MAJOR, I4 and FP4_E2M1
  // LANE_CHUNKS; quant_matmul.h):
  int32_t group_size = 0;                // columns per scale; == cols: one scale per row
  const uint16_t* scales = nullptr;      // F16 bits, [rows, cols / group_size]
  const uint8_t* zero_points = nullptr;  // I4 asymmetric: [rows, cols / group_size]; else null
  const int32_t* input_permutation = nullptr;  // [cols]: stored column c reads x[perm[c]]; or null
  // FP4_E2M1 only (MXFP4, LANE_CHUNKS codes): E8M0 bytes [rows, cols / 32], scale 2^(b - 127);
  // `scales` is null then.
  const uint8_t* exponents = nullptr;
};

// Bytes of a [rows, cols] matrix of `dtype` (either layout: panels are never padded).
int64_t MatrixBytes(plan::DType dtype, int64_t rows, int64_t cols);

// Row `row` of a ROW_MAJOR `matrix` widened to f32 into `out` (cols floats).
void MatrixRowToF32(const MatrixView& matrix, int64_t row, float* out);

// One destination of a fused matmul: output columns [begin, begin + width) go to a
// [rows, width] buffer.
struct MatMulOutput {
  float* data = nullptr;
  int64_t begin = 0;
  int64_t width = 0;
};

// out[r, n] = dot(x[input_rows[r]], w[n]) + bias[n] for every row r < num_rows (input_rows
// nullptr: input row r; rows of x are w.cols floats), columns split across `outputs` (sorted
// by begin, covering [0, w.rows)). bias may be nullptr.
// amx_min_rows: from how many rows F16 / BF16 weights take the AMX-BF16 path where the tier has
// it (MatMulOnAmx). A MoE expert's rows pass 1 or never instead, after their step's token count
// (cpu_backend.cc), so that how the threads cut an expert's rows does not change its arithmetic.
void MatMul(ThreadPool& pool, const float* x, int64_t num_rows, const int32_t* input_rows,
            const MatrixView& w, const float* bias, const MatMulOutput* outputs,
            int32_t num_outputs, int64_t amx_min_rows = kAmxMinTokens);

// MatMul of F16 / BF16 ROW_PANELS weights on AMX-BF16 tiles with exactly split operands
// (matmul_amx.cc: f32-class results, not the FMA chains' bits): runs and returns true from
// amx_min_rows rows on the avx3_amx tier, or with emulated tiles (amx_tiles.h) on AVX3 tiers
// with AVX512-VNNI and without AVX512-BF16; false, having done nothing, otherwise. MatMul takes it
// first.
bool MatMulOnAmx(ThreadPool& pool, const float* x, int64_t num_rows, const int32_t* input_rows,
                 const MatrixView& w, const float* bias, const MatMulOutput* outputs,
                 int32_t num_outputs, int64_t amx_min_rows = kAmxMinTokens);

// Whether MatMulOnAmx runs on the active tier (for F16 / BF16 panels from amx_min_rows rows): then
// a token's result in such a step is f32-class but not the bits it gets in a smaller one.
bool AmxMatMulActive();

// y = x * rsqrt(mean(x^2) + eps) * gamma, per row. y may alias x.
void RmsNorm(ThreadPool& pool, const float* x, const float* gamma, float eps, int64_t num_rows,
             int64_t width, float* y);

// sum = a + b; y = rms_norm(sum) in one pass over the rows. sum may alias a or b.
void FusedAddRmsNorm(ThreadPool& pool, const float* a, const float* b, const float* gamma,
                     float eps, int64_t num_rows, int64_t width, float* sum, float* y);

// out = a + b, a * b, silu(a), silu(a) * b or gelu_tanh(a) * b over `size` floats for `op` ADD,
// MUL, SILU (b unused), SILU_MUL or GELU_TANH_MUL: plan.proto's OpKind is the one encoding of the
// elementwise ops.
void ElementwiseOp(ThreadPool& pool, plan::OpKind op, const float* a, const float* b, int64_t size,
                   float* out);

// out = (clamp(up, -limit, limit) + 1) * g * sigmoid(alpha g), g = min(gate, limit), over
// `size` floats (plan.proto CLAMPED_SWIGLU, gpt-oss); element-wise like ElementwiseOp.
void ClampedSwiglu(ThreadPool& pool, const float* gate, const float* up, int64_t size, float alpha,
                   float limit, float* out);

// x = cap * tanh(x / cap) over `size` floats, in place (LOGITS' soft-cap); element-wise, so
// batch-invariant like ElementwiseOp.
void SoftCap(ThreadPool& pool, float* x, int64_t size, float cap);

// Rotate-half over the first rotary_dim of each head (the rest passes through; rotary_dim ==
// head_dim: all of it), angle position * inv_freq[i] (rotary_dim / 2 entries), cos and sin
// multiplied by cos_sin_scale (LongRoPE's attention factor; 1: none). `scratch` holds head_dim
// floats per thread.
void Rope(ThreadPool& pool, float* x, const int32_t* positions, int64_t num_rows, int32_t num_heads,
          int32_t head_dim, int32_t rotary_dim, const float* inv_freq, float cos_sin_scale,
          float* scratch);

// transformers' inverse frequencies for `rope` (default, LINEAR, LLAMA3, YARN, LONGROPE; DYNAMIC
// is the default within a plan's context), in f32 as it computes them. `inv_freq` receives
// plan::RotaryDim(rope, head_dim) / 2 entries.
void RopeInverseFrequencies(const plan::RopeConfig& rope, int32_t head_dim, float* inv_freq);

// Causal attention of a step's queries over a paged f32 KV cache with online softmax. One
// work item is (token, kv head): each cached key/value row is read once for all
// num_heads / num_kv_heads query heads of its group.
struct AttentionArgs {
  const float* q = nullptr;  // [num_tokens, num_heads * head_dim]
  float* out = nullptr;      // [num_tokens, num_heads * head_dim]; may alias q
  const float* key_cache =
      nullptr;  // slot s, kv head h at key_cache + s * token_stride + h * head_dim
  const float* value_cache = nullptr;  // likewise
  int64_t token_stride = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 0;
  int64_t sliding_window = 0;  // 0: none
  float scale = 0.0f;
  float softcap = 0.0f;  // > 0: scaled scores become softcap * tanh(score / softcap)
  // [num_heads] or nullptr: gpt-oss's sinks, one extra logit per head in the softmax
  // denominator with no value (plan.proto ATTENTION).
  const float* sinks = nullptr;
  int64_t num_tokens = 0;
  // Per token: the sequence's block table, and the index of the token in its sequence (it
  // attends to keys [max(0, index - window + 1), index]).
  const int32_t* const* token_block_table = nullptr;
  const int64_t* token_index = nullptr;
  // Per thread: kAttentionScratchFloats(...) floats at scratch + thread * scratch_stride.
  float* scratch = nullptr;
  int64_t scratch_stride = 0;
  // A cache of another dtype (kv/kv_storage.h), read by KvCacheAttention
  // (quant_kv_attention.h) instead of key_cache / value_cache: F16, BF16 or I8 elements at the
  // same element offsets, and for I8 one scale per slot s and kv head h at
  // key_scales[s * num_kv_heads + h] (value_scales likewise).
  plan::DType kv_dtype = plan::F32;
  const uint8_t* key_bytes = nullptr;
  const uint8_t* value_bytes = nullptr;
  const float* key_scales = nullptr;
  const float* value_scales = nullptr;
};
// Query tokens of one sequence that Attention takes together (a prefill's consecutive tokens
// share each widened key / value block and each broadcast of its elements); sizes its scratch.
inline constexpr int64_t kAttentionTile = 4;
// Query rows (token, head) that Attention takes together when a group is narrower than half a
// vector (keys in lanes): a prefill's 16 consecutive tokens of MHA, 8 of a group of 2. Each
// widened key / value block is shared by the rows, each key or value vector load by 4 of them
// (16 rather than 4 rows: an f16 cache's blocks are widened a quarter as often, attention 11.2%
// -> 9.5% of the samples of an f16-KV Qwen2-MoE pp512 at 2 threads).
inline constexpr int64_t kKeyLaneRows = 16;
// Floats of per-thread scratch Attention needs.
int64_t AttentionScratchFloats(int32_t num_heads, int32_t num_kv_heads, int32_t head_dim,
                               int32_t block_size);
void Attention(ThreadPool& pool, const AttentionArgs& args);

}  // namespace llmrt::cpu

#endif  // LLMRT_BACKEND_CPU_KERNELS_H_

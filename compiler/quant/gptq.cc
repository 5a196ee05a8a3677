#include "compiler/quant/gptq.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/str_format.h"
#include "runtime/threading/thread_pool.h"

namespace llmc::quant {
namespace {

// 8 floats: two SSE / NEON registers or one AVX register (GCC / Clang vector extensions, as in
// quantize.cc; the auto-vectoriser leaves these loops scalar).
constexpr int kLanes = 8;
using Floats = float __attribute__((vector_size(kLanes * sizeof(float))));
// Rows per micro-tile of AddProducts: 4 rows x 8 columns of accumulators stay in registers and
// each loaded row of b is used 4 times.
constexpr int64_t kTileRows = 4;
// Cholesky panel width: the trailing update's depth. 64 keeps a panel row (256 bytes) and the
// 64 x 8 block of its transpose that one micro-tile reads (2 KiB) in L1.
constexpr int64_t kPanel = 64;

// AddProducts is ~80% of GPTQ's time (perf, TinyLlama): on x86-64 it gets an AVX2 clone, picked
// at load time, in which the 8-float vectors are single registers. "avx2" without "fma": no
// contraction, so both clones compute bit-identical results and a plan does not depend on the
// machine that compiled it.
#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#define LLMC_GPTQ_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define LLMC_GPTQ_CLONES
#endif

template <int kRows>
inline __attribute__((always_inline)) void MicroTile(const float* a, int64_t lda, const float* b,
                                                     int64_t ldb, float* c, int64_t ldc,
                                                     int64_t depth, int64_t j, float alpha) {
  // memcpy, not a helper returning Floats: a 32-byte vector return value changes the ABI
  // without AVX (-Wpsabi).
  Floats acc[kRows];
  for (int r = 0; r < kRows; ++r) std::memcpy(&acc[r], c + r * ldc + j, sizeof(Floats));
  for (int64_t p = 0; p < depth; ++p) {
    Floats bv;
    std::memcpy(&bv, b + p * ldb + j, sizeof(bv));
    for (int r = 0; r < kRows; ++r) acc[r] += (alpha * a[r * lda + p]) * bv;
  }
  for (int r = 0; r < kRows; ++r) std::memcpy(c + r * ldc + j, &acc[r], sizeof(Floats));
}

// Calls body(begin, end) on up to DefaultThreadCount() threads over [0, count), splitting so
// that each range has about the same sum of weight(i) (a triangle's rows: i + 1).
template <typename Weight, typename Body>
void ParallelRanges(int64_t count, double total_work, Weight weight, Body body) {
  // ~1 ms of work per thread at least: below that, starting threads costs more than it saves.
  constexpr double kMinWorkPerThread = 1e6;
  const int64_t threads =
      std::clamp<int64_t>(static_cast<int64_t>(total_work / kMinWorkPerThread), 1,
                          llmrt::threading::ThreadPool::DefaultThreadCount());
  if (threads <= 1 || count < 2 * kTileRows) {
    body(0, count);
    return;
  }
  double sum = 0;
  for (int64_t i = 0; i < count; ++i) sum += weight(i);
  std::vector<int64_t> bounds = {0};
  double running = 0;
  for (int64_t i = 0; i < count && static_cast<int64_t>(bounds.size()) < threads; ++i) {
    running += weight(i);
    // Bounds on multiples of the micro-tile, so no tile is split.
    if (running >= sum * static_cast<double>(bounds.size()) / threads && (i + 1) % kTileRows == 0)
      bounds.push_back(i + 1);
  }
  bounds.push_back(count);
  std::vector<std::thread> workers;
  for (size_t t = 1; t + 1 < bounds.size(); ++t)
    workers.emplace_back(body, bounds[t], bounds[t + 1]);
  body(bounds[0], bounds[1]);
  for (std::thread& worker : workers) worker.join();
}

// In-place lower Cholesky factor of the symmetric [n, n] row-major `matrix` (only its lower
// triangle is read; the upper triangle is overwritten with garbage). False on a non-positive
// pivot. Right-looking, in panels of kPanel columns: the panel's diagonal block is factored
// with short dot products, the rows below it solved on the panel's transpose (one row
// operation updates every row at once, 8 wide), the trailing lower triangle updated by
// AddProducts (n^3 / 3 multiply-adds in all, ~95% of them there).
bool CholeskyInPlace(std::vector<float>& matrix, int64_t n) {
  float* m = matrix.data();
  std::vector<float> transposed(kPanel * n);
  for (int64_t kb = 0; kb < n; kb += kPanel) {
    const int64_t ke = std::min(n, kb + kPanel);
    for (int64_t j = kb; j < ke; ++j) {
      double diagonal = m[j * n + j];
      for (int64_t p = kb; p < j; ++p) diagonal -= static_cast<double>(m[j * n + p]) * m[j * n + p];
      if (!(diagonal > 0)) return false;
      const float root = static_cast<float>(std::sqrt(diagonal));
      m[j * n + j] = root;
      for (int64_t i = j + 1; i < ke; ++i) {
        double value = m[i * n + j];
        for (int64_t p = kb; p < j; ++p) value -= static_cast<double>(m[i * n + p]) * m[j * n + p];
        m[i * n + j] = static_cast<float>(value / root);
      }
    }
    const int64_t rest = n - ke;
    if (rest == 0) break;
    const int64_t depth = ke - kb;
    // Rows below the diagonal block: L21 = A21 L11^-T, column by column of the panel.
    for (int64_t i = 0; i < rest; ++i) {
      for (int64_t p = 0; p < depth; ++p) transposed[p * rest + i] = m[(ke + i) * n + kb + p];
    }
    for (int64_t j = 0; j < depth; ++j) {
      float* column = transposed.data() + j * rest;
      for (int64_t p = 0; p < j; ++p) {
        const float factor = m[(kb + j) * n + kb + p];
        const float* done = transposed.data() + p * rest;
        for (int64_t i = 0; i < rest; ++i) column[i] -= factor * done[i];
      }
      const float inverse = 1.0f / m[(kb + j) * n + kb + j];
      for (int64_t i = 0; i < rest; ++i) column[i] *= inverse;
    }
    for (int64_t i = 0; i < rest; ++i) {
      for (int64_t p = 0; p < depth; ++p) m[(ke + i) * n + kb + p] = transposed[p * rest + i];
    }
    ParallelRanges(
        rest, static_cast<double>(rest) * rest * depth / 2, [](int64_t i) { return i + 1.0; },
        [&](int64_t begin, int64_t end) {
          AddProducts(m + (ke + begin) * n + kb, n, transposed.data(), rest,
                      m + (ke + begin) * n + ke, n, end - begin, depth, rest, -1.0f,
                      /*lower=*/true, begin);
        });
  }
  return true;
}

}  // namespace

LLMC_GPTQ_CLONES void AddProducts(const float* a, int64_t lda, const float* b, int64_t ldb,
                                  float* c, int64_t ldc, int64_t rows, int64_t depth, int64_t cols,
                                  float alpha, bool lower, int64_t lower_offset) {
  for (int64_t i = 0; i < rows; i += kTileRows) {
    const int64_t tile = std::min(kTileRows, rows - i);
    const int64_t end = lower ? std::min(cols, i + tile + lower_offset) : cols;
    const float* tile_a = a + i * lda;
    float* tile_c = c + i * ldc;
    for (int64_t j = 0; j < end; j += kLanes) {
      if (j + kLanes > cols) {
        // The row's last few columns: scalar.
        for (; j < end; ++j) {
          for (int64_t r = 0; r < tile; ++r) {
            float sum = 0;
            for (int64_t p = 0; p < depth; ++p) sum += tile_a[r * lda + p] * b[p * ldb + j];
            tile_c[r * ldc + j] += alpha * sum;
          }
        }
        break;
      }
      if (tile == kTileRows) {
        MicroTile<kTileRows>(tile_a, lda, b, ldb, tile_c, ldc, depth, j, alpha);
      } else {
        for (int64_t r = 0; r < tile; ++r) {
          MicroTile<1>(tile_a + r * lda, lda, b, ldb, tile_c + r * ldc, ldc, depth, j, alpha);
        }
      }
    }
  }
}

absl::StatusOr<ErrorFeedback> ComputeErrorFeedback(const Activations& activations,
                                                   absl::Span<const float> input_divisors) {
  const int64_t n = activations.width, m = activations.num_rows;
  if (n <= 0 || m <= 0 || static_cast<int64_t>(activations.rows.size()) != n * m) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GPTQ: %d calibration rows of width %d (%d values)", m, n, activations.rows.size()));
  }
  if (!input_divisors.empty() && static_cast<int64_t>(input_divisors.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrFormat("GPTQ: %d input divisors for %d input columns", input_divisors.size(), n));
  }
  // X (scaled) and X^T; H = X^T X, lower triangle. The index order is reversed from the start
  // (column c of the layer is index n - 1 - c here), so the Cholesky factor L of this H gives
  // M = P L^T P of the header comment directly.
  std::vector<float> x(m * n), xt(n * m);
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t c = 0; c < n; ++c) {
      float value = activations.rows[t * n + c];
      if (!input_divisors.empty()) value /= input_divisors[c];
      x[t * n + (n - 1 - c)] = value;
      xt[(n - 1 - c) * m + t] = value;
    }
  }
  std::vector<float> gram(n * n, 0.0f);
  ParallelRanges(
      n, static_cast<double>(n) * n * m / 2, [](int64_t i) { return i + 1.0; },
      [&](int64_t begin, int64_t end) {
        AddProducts(xt.data() + begin * m, m, x.data(), n, gram.data() + begin * n, n, end - begin,
                    m, n, 1.0f, /*lower=*/true, begin);
      });
  double mean_diagonal = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (gram[i * n + i] == 0.0f) gram[i * n + i] = 1.0f;  // a dead input
    mean_diagonal += gram[i * n + i];
  }
  mean_diagonal /= static_cast<double>(n);

  std::vector<float> factor;
  bool factored = false;
  for (double damping = kGptqDamping; !factored && damping <= kGptqDamping * 1e4; damping *= 10) {
    factor = gram;
    for (int64_t i = 0; i < n; ++i) {
      factor[i * n + i] = static_cast<float>(factor[i * n + i] + damping * mean_diagonal);
    }
    factored = CholeskyInPlace(factor, n);
  }
  if (!factored) {
    return absl::InternalError(absl::StrFormat(
        "GPTQ: the Hessian of %d inputs (%d calibration rows) is not positive definite even "
        "with %g of its mean diagonal added",
        n, m, kGptqDamping * 1e4));
  }
  // Layer column j <-> index a = n - 1 - j of the factor L; M_kj = L[n-1-j][n-1-k], so the
  // coefficient of column j's error for column k > j is L[a][b] / L[b][b], b = n - 1 - k.
  ErrorFeedback feedback;
  feedback.cols = n;
  feedback.coefficients.assign(n * n, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    const int64_t a = n - 1 - j;
    for (int64_t k = j + 1; k < n; ++k) {
      const int64_t b = n - 1 - k;
      feedback.coefficients[j * n + k] = factor[a * n + b] / factor[b * n + b];
    }
  }
  return feedback;
}

double LinearOutputError(absl::Span<const float> weights, absl::Span<const float> restored,
                         int64_t rows, int64_t cols, const Activations& activations) {
  std::vector<float> difference(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) difference[i] = weights[i] - restored[i];
  double total = 0;
  for (int64_t t = 0; t < activations.num_rows; ++t) {
    const float* x = activations.rows.data() + t * cols;
    for (int64_t n = 0; n < rows; ++n) {
      const float* d = difference.data() + n * cols;
      double dot = 0;
      for (int64_t k = 0; k < cols; ++k) dot += static_cast<double>(x[k]) * d[k];
      total += dot * dot;
    }
  }
  return total;
}

}  // namespace llmc::quant

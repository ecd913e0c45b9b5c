// Fused CPU kernel of relative attention (float32): for one (batch item, head, query tile), the band
// product, skew, masks, online softmax and value product of each key tile run back to back on one
// thread, so the tile's logits stay in the core's cache instead of travelling through memory between
// a dozen separate PyTorch calls (relative.py's skewed kernel).
//
// Built on first use by multimodal/layers/positions/relative_cpu.py (torch.utils.cpp_extension).
// Shapes and conventions are those of relative.py:
//   q (b, h, q_len, d), k and v (b, h, k_len, d), table (h, rows, d) where row `max_distance + r`
//   holds distance r = key - query (clipped to [-max_distance, upper]). A query tile of `size`
//   queries at absolute position p sees `keys` keys, walked in key tiles (KeyTile below); a key
//   tile's band holds the distances its rows need, and row a reads key j from band column
//   j - first + size - 1 - a: each row starts one column left of the row above (the skew).
// Matrix products go to the BLAS that PyTorch links (sgemm_), one thread each: the tiles are the
// parallel work (at::parallel_for), so BLAS inside them stays sequential.
#include <torch/extension.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <vector>

extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                       const float* beta, float* c, const int* ldc);

namespace {

constexpr float kLowest = std::numeric_limits<float>::lowest();  // padding keys, as relative.py's finfo.min

// exp(x) for the x <= 0 of a softmax (logit minus row maximum or log-sum-exp), written so that the
// compiler vectorizes it (glibc's vector expf ran at a third of the speed): x = n ln2 + r with
// |r| <= ln2 / 2, e^r by its Taylor series to r^6 (relative error < 2e-7), 2^n through the exponent
// bits. Below -87 the result stays at ~1e-38 instead of 0 (padding keys' weight), which no sum sees.
inline float exp_nonpositive(float x) {
  x = std::max(x, -87.0f);
  const int n = static_cast<int>(x * 1.44269504f - 0.5f);  // round to nearest for x <= 0
  const float r = x - n * 0.693145752f - n * 1.42860677e-6f;  // ln2 in two parts (Cody-Waite)
  const float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
  const int bits = (n + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// Row-major C (m x n) = alpha * op(A) op(B) + beta * C through the column-major BLAS.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  const int m_ = m, n_ = n, k_ = k, lda_ = lda, ldb_ = ldb, ldc_ = ldc;
  sgemm_(&tb, &ta, &n_, &m_, &k_, &alpha, b, &ldb_, a, &lda_, &beta, c, &ldc_);
}

struct Geometry {
  int64_t q_len, k_len, dim, rows, max_distance, upper, query_offset, block;
  bool causal;
};

// Keys per key tile: a (query tile, key tile) pair's logits, band and probabilities (64 x 575 floats
// at most, 147 KB each) stay in the core's L2 cache. 256 keys cost more band columns per key
// (training 1.60x SDPA at 4,096 tokens), 512 and 1,024 ran alike (1.45x / 1.46x), 512 holds half the
// cache (docs/benchmarks.md).
constexpr int64_t kKeyTile = 512;

// A query tile: `size` queries from row `start` (absolute position `position`), seeing `keys` keys.
struct Tile {
  int64_t start, size, position, keys;
};

// A key tile of a query tile: keys [first, first + count). Its band has `width = count + size - 1`
// columns; column c holds distance `first - (position + size - 1) + c`, and row a of the query tile
// reads key j from column `j - first + size - 1 - a`.
struct KeyTile {
  int64_t first, count, width, lowest;
};

Tile make_tile(const Geometry& g, int64_t start) {
  const int64_t size = std::min(g.block, g.q_len - start), position = g.query_offset + start;
  return Tile{start, size, position, g.causal ? std::min(g.k_len, position + size) : g.k_len};
}

KeyTile make_key_tile(const Tile& t, int64_t first) {
  const int64_t count = std::min(kKeyTile, t.keys - first);
  return KeyTile{first, count, count + t.size - 1, first - (t.position + t.size - 1)};
}

int64_t table_row(const Geometry& g, int64_t distance) {
  return std::clamp(distance, -g.max_distance, g.upper) + g.max_distance;
}

// The key tile's band embeddings (width x d): a pointer into the head's table when no distance is
// clipped, else gathered into `buffer`. Sets `first_row` to the table row of column 0, or -1.
const float* band_embeddings(const Geometry& g, const KeyTile& kt, const float* table, float* buffer,
                             int64_t& first_row) {
  const int64_t highest = kt.lowest + kt.width - 1;
  if (kt.lowest >= -g.max_distance && highest <= g.upper) {
    first_row = kt.lowest + g.max_distance;
    return table + first_row * g.dim;
  }
  first_row = -1;
  for (int64_t c = 0; c < kt.width; ++c) {
    std::copy_n(table + table_row(g, kt.lowest + c) * g.dim, g.dim, buffer + c * g.dim);
  }
  return buffer;
}

// Keys of the key tile that row a of the query tile sees (a prefix of them: causal masking).
int64_t visible_keys(const Geometry& g, const Tile& t, const KeyTile& kt, int64_t a) {
  if (!g.causal) return kt.count;
  return std::clamp(t.position + a + 1 - kt.first, int64_t{0}, kt.count);
}

// Logits of a key tile, row by row: band (size x width) = scale q Eᵀ, logits (size x count) =
// scale q kᵀ + skewed band over the keys each row sees, padding keys at kLowest. Each row's maximum
// goes to row_max (size) unless it is null; a row that sees no key gets kLowest.
void tile_logits(const Geometry& g, const Tile& t, const KeyTile& kt, const float* q_tile, const float* k_head,
                 const float* embeddings, const bool* padding, float scale, float* band, float* logits,
                 float* row_max) {
  gemm(false, true, t.size, kt.width, g.dim, scale, q_tile, g.dim, embeddings, g.dim, 0.0f, band, kt.width);
  gemm(false, true, t.size, kt.count, g.dim, scale, q_tile, g.dim, k_head + kt.first * g.dim, g.dim, 0.0f,
       logits, kt.count);
  for (int64_t a = 0; a < t.size; ++a) {
    float* row = logits + a * kt.count;
    const float* band_row = band + a * kt.width + (t.size - 1 - a);
    const int64_t visible = visible_keys(g, t, kt, a);
    float maximum = kLowest;
    if (padding == nullptr) {
#pragma omp simd reduction(max : maximum)
      for (int64_t j = 0; j < visible; ++j) {  // a local x: reading row[j] back kept GCC scalar
        const float x = row[j] + band_row[j];
        row[j] = x;
        maximum = maximum > x ? maximum : x;
      }
    } else {
      const bool* pad = padding + kt.first;
      for (int64_t j = 0; j < visible; ++j) {
        row[j] = pad[j] ? kLowest : row[j] + band_row[j];
        maximum = std::max(maximum, row[j]);
      }
    }
    if (row_max != nullptr) row_max[a] = maximum;
  }
}

Geometry geometry(const at::Tensor& q, const at::Tensor& k, const at::Tensor& table, bool causal,
                  int64_t query_offset, int64_t max_distance, int64_t block) {
  return Geometry{q.size(2), k.size(2), q.size(3), table.size(1), max_distance,
                  table.size(1) - 1 - max_distance, query_offset, block, causal};
}

void check_inputs(std::initializer_list<const at::Tensor*> tensors) {
  for (const auto* t : tensors) {
    TORCH_CHECK(t->device().is_cpu() && t->scalar_type() == at::kFloat && t->is_contiguous(),
                "relative_cpu: expected contiguous float32 CPU tensors");
  }
}

// Per-thread scratch of one (query tile, key tile) pair.
struct Scratch {
  std::vector<float> band, logits, grad_logits, gathered, grad_embeddings, row_max, running_max, row_sum, row_dot;
  Scratch(int64_t block, int64_t dim)
      : band(block * (kKeyTile + block - 1)), logits(block * kKeyTile), grad_logits(block * kKeyTile),
        gathered((kKeyTile + block - 1) * dim), grad_embeddings((kKeyTile + block - 1) * dim), row_max(block),
        running_max(block), row_sum(block), row_dot(block) {}
};

}  // namespace

// Forward: returns out (b, h, q_len, d) and the rows' log-sum-exps (b, h, q_len). Each query tile
// walks its key tiles with the online softmax of flash attention (running maximum and sum, the
// output rescaled when the maximum grows).
std::vector<at::Tensor> relative_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                         const at::Tensor& table, const c10::optional<at::Tensor>& padding_mask,
                                         bool causal, int64_t query_offset, int64_t max_distance, int64_t block) {
  check_inputs({&q, &k, &v, &table});
  const Geometry g = geometry(q, k, table, causal, query_offset, max_distance, block);
  const int64_t batch = q.size(0), heads = q.size(1), tiles = (g.q_len + block - 1) / block;
  auto out = at::empty_like(q);
  auto lse = at::empty({batch, heads, g.q_len}, q.options());
  const float scale = 1.0f / std::sqrt(static_cast<float>(g.dim));
  const bool* padding = padding_mask.has_value() ? padding_mask->data_ptr<bool>() : nullptr;
  const float *q_ptr = q.data_ptr<float>(), *k_ptr = k.data_ptr<float>(), *v_ptr = v.data_ptr<float>();
  const float* table_ptr = table.data_ptr<float>();
  float *out_ptr = out.data_ptr<float>(), *lse_ptr = lse.data_ptr<float>();

  at::parallel_for(0, batch * heads * tiles, 1, [&](int64_t begin, int64_t end) {
    Scratch scratch(block, g.dim);
    float *row_max = scratch.row_max.data(), *row_sum = scratch.row_sum.data(), *probs = scratch.logits.data();
    float* running_max = scratch.running_max.data();
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t bh = unit / tiles, b = bh / heads, h = bh % heads;
      const Tile t = make_tile(g, (unit % tiles) * block);
      const float* q_tile = q_ptr + (bh * g.q_len + t.start) * g.dim;
      const float *k_head = k_ptr + bh * g.k_len * g.dim, *v_head = v_ptr + bh * g.k_len * g.dim;
      const bool* pad = padding ? padding + b * g.k_len : nullptr;
      float* out_tile = out_ptr + (bh * g.q_len + t.start) * g.dim;
      std::fill(running_max, running_max + t.size, kLowest);
      std::fill(row_sum, row_sum + t.size, 0.0f);
      std::fill(out_tile, out_tile + t.size * g.dim, 0.0f);
      for (int64_t first = 0; first < t.keys; first += kKeyTile) {
        const KeyTile kt = make_key_tile(t, first);
        int64_t first_row;
        const float* embeddings = band_embeddings(g, kt, table_ptr + h * g.rows * g.dim, scratch.gathered.data(),
                                                  first_row);
        tile_logits(g, t, kt, q_tile, k_head, embeddings, pad, scale, scratch.band.data(), probs, row_max);
        for (int64_t a = 0; a < t.size; ++a) {
          float* row = probs + a * kt.count;
          const int64_t visible = visible_keys(g, t, kt, a);
          const float maximum = std::max(running_max[a], row_max[a]);
          const float rescale = exp_nonpositive(running_max[a] - maximum);
          float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
          for (int64_t j = 0; j < visible; ++j) {
            const float x = exp_nonpositive(row[j] - maximum);
            row[j] = x;
            sum += x;
          }
          std::fill(row + visible, row + kt.count, 0.0f);
          row_sum[a] = row_sum[a] * rescale + sum;
          running_max[a] = maximum;
          for (int64_t c = 0; c < g.dim; ++c) out_tile[a * g.dim + c] *= rescale;
        }
        gemm(false, false, t.size, g.dim, kt.count, 1.0f, probs, kt.count, v_head + kt.first * g.dim, g.dim, 1.0f,
             out_tile, g.dim);
      }
      float* lse_tile = lse_ptr + bh * g.q_len + t.start;
      for (int64_t a = 0; a < t.size; ++a) {
        lse_tile[a] = running_max[a] + std::log(row_sum[a]);
        const float inverse = 1.0f / row_sum[a];
        for (int64_t c = 0; c < g.dim; ++c) out_tile[a * g.dim + c] *= inverse;
      }
    }
  });
  return {out, lse};
}

// Backward: gradients of q, k, v and of the table (h, rows, d), recomputing each key tile's
// probabilities from the saved log-sum-exps. Heads run in parallel; a head's batch items and tiles
// run in order on one thread, so the key, value and table gradients need no locks.
std::vector<at::Tensor> relative_backward(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
                                          const at::Tensor& v, const at::Tensor& table, const at::Tensor& out,
                                          const at::Tensor& lse, const c10::optional<at::Tensor>& padding_mask,
                                          bool causal, int64_t query_offset, int64_t max_distance, int64_t block) {
  check_inputs({&grad_out, &q, &k, &v, &table, &out, &lse});
  const Geometry g = geometry(q, k, table, causal, query_offset, max_distance, block);
  const int64_t batch = q.size(0), heads = q.size(1);
  auto grad_q = at::empty_like(q), grad_k = at::zeros_like(k), grad_v = at::zeros_like(v);
  auto grad_table = at::zeros_like(table);
  const float scale = 1.0f / std::sqrt(static_cast<float>(g.dim));
  const bool* padding = padding_mask.has_value() ? padding_mask->data_ptr<bool>() : nullptr;
  const float *q_ptr = q.data_ptr<float>(), *k_ptr = k.data_ptr<float>(), *v_ptr = v.data_ptr<float>();
  const float *table_ptr = table.data_ptr<float>(), *out_ptr = out.data_ptr<float>();
  const float *grad_out_ptr = grad_out.data_ptr<float>(), *lse_ptr = lse.data_ptr<float>();
  float *grad_q_ptr = grad_q.data_ptr<float>(), *grad_k_ptr = grad_k.data_ptr<float>();
  float *grad_v_ptr = grad_v.data_ptr<float>(), *grad_table_ptr = grad_table.data_ptr<float>();

  at::parallel_for(0, heads, 1, [&](int64_t begin, int64_t end) {
    Scratch scratch(block, g.dim);
    float *band = scratch.band.data(), *probs = scratch.logits.data(), *grad_logits = scratch.grad_logits.data();
    float* row_dot = scratch.row_dot.data();
    for (int64_t h = begin; h < end; ++h) {
      const float* table_head = table_ptr + h * g.rows * g.dim;
      float* grad_table_head = grad_table_ptr + h * g.rows * g.dim;
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t bh = b * heads + h;
        const float *k_head = k_ptr + bh * g.k_len * g.dim, *v_head = v_ptr + bh * g.k_len * g.dim;
        float *grad_k_head = grad_k_ptr + bh * g.k_len * g.dim, *grad_v_head = grad_v_ptr + bh * g.k_len * g.dim;
        const bool* pad = padding ? padding + b * g.k_len : nullptr;
        for (int64_t start = 0; start < g.q_len; start += block) {
          const Tile t = make_tile(g, start);
          const int64_t offset = (bh * g.q_len + t.start) * g.dim;
          const float *q_tile = q_ptr + offset, *grad_out_tile = grad_out_ptr + offset, *out_tile = out_ptr + offset;
          const float* lse_tile = lse_ptr + bh * g.q_len + t.start;
          float* grad_q_tile = grad_q_ptr + offset;
          std::fill(grad_q_tile, grad_q_tile + t.size * g.dim, 0.0f);
          // Row sums of dO * O equal sum_j P_ij dP_ij, the softmax backward's subtracted term.
          for (int64_t a = 0; a < t.size; ++a) {
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int64_t c = 0; c < g.dim; ++c) dot += grad_out_tile[a * g.dim + c] * out_tile[a * g.dim + c];
            row_dot[a] = dot;
          }
          for (int64_t first = 0; first < t.keys; first += kKeyTile) {
            const KeyTile kt = make_key_tile(t, first);
            const float *k_tile = k_head + kt.first * g.dim, *v_tile = v_head + kt.first * g.dim;
            float *grad_k_tile = grad_k_head + kt.first * g.dim, *grad_v_tile = grad_v_head + kt.first * g.dim;
            int64_t first_row;
            const float* embeddings = band_embeddings(g, kt, table_head, scratch.gathered.data(), first_row);
            tile_logits(g, t, kt, q_tile, k_head, embeddings, pad, scale, band, probs, nullptr);
            for (int64_t a = 0; a < t.size; ++a) {
              float* row = probs + a * kt.count;
              const int64_t visible = visible_keys(g, t, kt, a);
              const float row_lse = lse_tile[a];
#pragma omp simd
              for (int64_t j = 0; j < visible; ++j) row[j] = exp_nonpositive(row[j] - row_lse);
              std::fill(row + visible, row + kt.count, 0.0f);
            }
            // dV += Pᵀ dO; dP = dO Vᵀ; dS = P (dP - rowdot).
            gemm(true, false, kt.count, g.dim, t.size, 1.0f, probs, kt.count, grad_out_tile, g.dim, 1.0f, grad_v_tile,
                 g.dim);
            gemm(false, true, t.size, kt.count, g.dim, 1.0f, grad_out_tile, g.dim, v_tile, g.dim, 0.0f, grad_logits,
                 kt.count);
            for (int64_t a = 0; a < t.size; ++a) {
              float* grad_row = grad_logits + a * kt.count;
              const float* prob_row = probs + a * kt.count;
              const float subtract = row_dot[a];
#pragma omp simd
              for (int64_t j = 0; j < kt.count; ++j) grad_row[j] = prob_row[j] * (grad_row[j] - subtract);
            }
            // dK += scale dSᵀ q; dq += scale dS K.
            gemm(true, false, kt.count, g.dim, t.size, scale, grad_logits, kt.count, q_tile, g.dim, 1.0f, grad_k_tile,
                 g.dim);
            gemm(false, false, t.size, g.dim, kt.count, scale, grad_logits, kt.count, k_tile, g.dim, 1.0f,
                 grad_q_tile, g.dim);
            // The band's gradient: each row of dS shifted back to its band columns, zeros elsewhere.
            for (int64_t a = 0; a < t.size; ++a) {
              float* band_row = band + a * kt.width;
              const int64_t shift = t.size - 1 - a;
              std::fill(band_row, band_row + shift, 0.0f);
              std::copy_n(grad_logits + a * kt.count, kt.count, band_row + shift);
              std::fill(band_row + shift + kt.count, band_row + kt.width, 0.0f);
            }
            // dq += scale dBand E; dE += scale dBandᵀ q (into the table rows the band read).
            gemm(false, false, t.size, g.dim, kt.width, scale, band, kt.width, embeddings, g.dim, 1.0f, grad_q_tile,
                 g.dim);
            if (first_row >= 0) {
              gemm(true, false, kt.width, g.dim, t.size, scale, band, kt.width, q_tile, g.dim, 1.0f,
                   grad_table_head + first_row * g.dim, g.dim);
            } else {
              float* grad_embeddings = scratch.grad_embeddings.data();
              gemm(true, false, kt.width, g.dim, t.size, scale, band, kt.width, q_tile, g.dim, 0.0f, grad_embeddings,
                   g.dim);
              for (int64_t c = 0; c < kt.width; ++c) {
                float* target = grad_table_head + table_row(g, kt.lowest + c) * g.dim;
                for (int64_t e = 0; e < g.dim; ++e) target[e] += grad_embeddings[c * g.dim + e];
              }
            }
          }
        }
      }
    }
  });
  return {grad_q, grad_k, grad_v, grad_table};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &relative_forward, "fused relative attention, forward (CPU, float32)");
  m.def("backward", &relative_backward, "fused relative attention, backward (CPU, float32)");
}

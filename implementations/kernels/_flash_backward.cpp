// attnbench's compiled FlashAttention-2 backward for the CPU (tiled_fused), float32 arithmetic.
//
// One call is one work item: keys [k0, k1) of kv head hk of batch b. For each query head of the
// group (GQA: K and V are read in place, never repeated) and each query block that may see these
// keys (causal: blocks wholly above the diagonal are skipped), it recomputes the probability tile
// from Q, K and the saved base-2 log-sum-exp, and accumulates
//   dV_j += P^T dO_i,  dS = P * (dO_i V_j^T - D_i),  dK_j += scale dS^T Q_i,  dQ_i += scale dS K_j.
// dK_j and dV_j belong to this item alone; dQ goes to a buffer private to the calling worker thread
// (the caller sums the workers' buffers): no atomics. The GEMMs are MKL's via ATen; the elementwise
// work between them is one pass per tile row here. The bf16 version is in _flash_bf16_backward.cpp.
#include <torch/extension.h>

#include <algorithm>
#include <initializer_list>
#include <cstdint>
#include <limits>

#include "_flash_band.h"
#include "_flash_exp2.h"
#include "_flash_items.h"
#include "_flash_pack.h"

using attnbench_band::Band;
using attnbench_band::clip;

namespace {

// Row r of the tile in place: s = P = 2^(c s - lse2) on allowed keys [lo, hi) (and mask), 0 elsewhere;
// dp = P * (dp - delta).
void probabilities_and_ds(float* s, float* dp, int64_t cols, int64_t lo, int64_t hi, const uint8_t* mrow,
                          int64_t mstride, float c, float lse2, float delta) {
  int64_t j = lo;
#ifdef __AVX2__
  const __m256 cv = _mm256_set1_ps(c), lv = _mm256_set1_ps(lse2), dv = _mm256_set1_ps(delta);
  for (; j + 8 <= hi; j += 8) {
    const __m256 p = exp2_nonpositive(_mm256_fmsub_ps(_mm256_loadu_ps(s + j), cv, lv));
    _mm256_storeu_ps(s + j, p);
    _mm256_storeu_ps(dp + j, _mm256_mul_ps(p, _mm256_sub_ps(_mm256_loadu_ps(dp + j), dv)));
  }
#endif
  for (; j < hi; ++j) {
    const float x = s[j] * c - lse2;  // <= 0 up to rounding
    const float p = exp2_nonpositive(x > 0.0f ? 0.0f : x);
    s[j] = p;
    dp[j] = p * (dp[j] - delta);
  }
  if (mrow != nullptr) {
    for (int64_t u = lo; u < hi; ++u) {
      if (!mrow[u * mstride]) s[u] = dp[u] = 0.0f;
    }
  }
  std::fill(s, s + lo, 0.0f);
  std::fill(dp, dp + lo, 0.0f);
  std::fill(s + hi, s + cols, 0.0f);
  std::fill(dp + hi, dp + cols, 0.0f);
}

}  // namespace

void backward_generic(const attnbench_items::BackwardParams& p) {
  const at::Tensor &q = p.q, &k = p.k, &v = p.v, &dout = p.dout, &lse2 = p.lse2, &delta = p.delta;
  const c10::optional<at::Tensor>& mask = p.mask;
  at::Tensor &dq = p.dq, &dk = p.dk, &dv = p.dv;
  const Band& band = p.band;
  const int64_t b = p.b, hk = p.hk, k0 = p.k0, k1 = p.k1, block_q = p.block_q;
  const float c = p.c, scale = p.scale;
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&q, &k, &v, &dout, &lse2, &delta, &dq, &dk, &dv}) {
    TORCH_CHECK(t->scalar_type() == at::kFloat, "backward_generic: float32 tensors");
  }
  TORCH_CHECK(lse2.is_contiguous() && delta.is_contiguous(), "lse2 and delta must be contiguous");
  const int64_t heads = q.size(1), group = heads / k.size(1), tq = q.size(2), cols = k1 - k0;
  const int64_t first = band.first_row(p.qmin, k0), last = band.last_row(p.qmax, k1);  // the rows that see these keys
  at::Tensor kj = k[b][hk].narrow(0, k0, cols), vj = v[b][hk].narrow(0, k0, cols);
  at::Tensor dk_j = dk[b][hk].narrow(0, k0, cols), dv_j = dv[b][hk].narrow(0, k0, cols);
  at::Tensor s = at::empty({block_q, cols}, q.options()), dp = at::empty({block_q, cols}, q.options());
  for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
    const float* lse_p = lse2.data_ptr<float>() + (b * heads + h) * tq;
    const float* delta_p = delta.data_ptr<float>() + (b * heads + h) * tq;
    for (int64_t q0 = first; q0 < last; q0 += block_q) {
      const int64_t rows = std::min(block_q, last - q0);
      at::Tensor qi = q[b][h].narrow(0, q0, rows), doi = dout[b][h].narrow(0, q0, rows);
      at::Tensor st = s.narrow(0, 0, rows), dpt = dp.narrow(0, 0, rows);
      at::mm_out(st, qi, kj.t());
      at::mm_out(dpt, doi, vj.t());
      float* s_p = st.data_ptr<float>();
      float* dp_p = dpt.data_ptr<float>();
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = q0 + r;
        int64_t lo = 0, hi = 0;
        clip(band, i, k0, cols, lo, hi);
        const int64_t ms = mask.has_value() ? mask->stride(3) : 0;
        probabilities_and_ds(s_p + r * cols, dp_p + r * cols, cols, lo, hi, attnbench_pack::mask_row(mask, b, h, i, k0), ms, c, lse_p[i],
                             delta_p[i]);
      }
      dv_j.addmm_(st.t(), doi);
      dk_j.addmm_(dpt.t(), qi, 1.0, scale);
      dq[b][h].narrow(0, q0, rows).addmm_(dpt, kj, 1.0, scale);
    }
  }
}

// attnbench's compiled FlashAttention-2 backward for the CPU (tiled_fused's generic tier), float32
// arithmetic: the work item of _flash_backward.h with its tile GEMMs on MKL's via ATen (at::mm_out, addmm_)
// and the elementwise work between them (P and dS) one pass per tile row here. dK_j and dV_j accumulate in
// place in dk and dv (the caller zeroes the item's keys first); q, k, v, dout may have any strides.
#include <torch/extension.h>

#include <algorithm>
#include <cstdint>

#include "_flash_backward.h"
#include "_flash_exp2.h"
#include "_flash_items.h"

namespace {

using attnbench_backward::Geometry;
using attnbench_backward::QueryRow;

// One row of the tile in place: s = P = 2^(c s - lse2) on allowed keys [lo, hi) (and the mask), 0 elsewhere;
// dp = P * (dp - delta). Eight lanes at a time where the extension is compiled at the avx2 level.
void p_and_ds_row(float* s, float* dp, int64_t cols, int64_t lo, int64_t hi, const uint8_t* mrow,
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

struct Kernel {
  static constexpr bool float32_input = true, bf16_input = false, contiguous_rows = false;
  static constexpr int row_step = 1;

  template <typename T>
  struct Item {
    const attnbench_items::BackwardParams& p;
    const Geometry& g;
    at::Tensor kj, vj, dk_j, dv_j;  // the item's keys: views of k, v, dk, dv
    at::Tensor s, dp;               // (block_q, cols) tiles
    at::Tensor qi, doi, st, dpt;    // the block's rows and their part of the tiles
    float* s_p = nullptr;
    float* dp_p = nullptr;
    at::Tensor dq_rows;

    Item(const attnbench_items::BackwardParams& p_, const Geometry& g_) : p(p_), g(g_) {
      kj = p.k[p.b][p.hk].narrow(0, p.k0, g.cols), vj = p.v[p.b][p.hk].narrow(0, p.k0, g.cols);
      dk_j = p.dk[p.b][p.hk].narrow(0, p.k0, g.cols), dv_j = p.dv[p.b][p.hk].narrow(0, p.k0, g.cols);
      s = at::empty({p.block_q, g.cols}, p.q.options()), dp = at::empty({p.block_q, g.cols}, p.q.options());
    }
    void load_rows(int64_t h, int64_t q0, int64_t rows) {
      qi = p.q[p.b][h].narrow(0, q0, rows), doi = p.dout[p.b][h].narrow(0, q0, rows);
      st = s.narrow(0, 0, rows), dpt = dp.narrow(0, 0, rows);
      dq_rows = p.dq[p.b][h].narrow(0, q0, rows);
    }
    void scores() {
      at::mm_out(st, qi, kj.t());
      at::mm_out(dpt, doi, vj.t());
      s_p = st.data_ptr<float>(), dp_p = dpt.data_ptr<float>();
    }
    void probabilities_and_ds(const QueryRow& row) {
      p_and_ds_row(s_p + row.r * g.cols, dp_p + row.r * g.cols, g.cols, row.lo, row.lim, row.mrow, g.ms, p.c, row.lse2,
                   row.delta);
    }
    void gradients() {
      dv_j.addmm_(st.t(), doi);
      dk_j.addmm_(dpt.t(), qi, 1.0, p.scale);
    }
    void add_dq(int64_t, int64_t) { dq_rows.addmm_(dpt, kj, 1.0, p.scale); }
    void finish() {}
  };
};

}  // namespace

// q, k, v, dout: float32, any strides; see backward_item in _flash_backward.h.
void backward_generic(const attnbench_items::BackwardParams& p) {
  attnbench_backward::backward_item<Kernel>("backward_generic", p);
}

// attnbench's fused FlashAttention-2 forward for the CPU (the `tiled_fused` implementation).
//
// One call computes one work item: query rows [q0, q1) of heads [h0, h1) of batch b, whose row i may see
// the keys [lo(i), hi(i)) of its band (_flash_band.h: causal, a window, a packed sequence); its parameters are a ForwardParams (_flash_items.h). The two tile
// GEMMs go to MKL through at::mm_out / at::addmm_ (the same cost SDPA pays); everything between them
// (mask, row max, subtract, exp2, row sum, rescale of the accumulator) is done per tile row in C++
// (AVX2 intrinsics for float32 where the extension is compiled at the avx2 level, scalar otherwise) instead of five
// separate torch passes over the whole tile.
// Scores arrive in base 2: each item's copy of its Q rows is multiplied by scale * log2(e).
// The accumulator is the output itself (rows of a contiguous (B, H, Tq, d) tensor), so nothing is
// copied at the end; the log-sum-exp is written in natural log, -inf for rows with no allowed key.
// Threads: the caller (implementations._workers) runs forward_item (forward_generic) and the backward's items on worker threads
// with torch set to one thread; the bindings release the GIL so the workers run in parallel. The own-GEMM
// forwards run all their items in one call on torch's threads (forward_items, _flash_items.h).
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "_flash_band.h"
#include "_flash_exp2.h"
#include "_flash_items.h"
#include "_flash_pack.h"
#include "_flash_softcap.h"
#include "_flash_softmax.h"

using attnbench_band::Band;
using attnbench_band::clip;
using attnbench_items::ForwardParams;

namespace {

#if defined(__AVX2__) && defined(__FMA__)
using attnbench_pack::hmax;
#endif

template <typename T>
inline T row_max(const T* s, int64_t n) {
  T mx = -std::numeric_limits<T>::infinity();
  int64_t j = 0;
#if defined(__AVX2__) && defined(__FMA__)
  if constexpr (std::is_same_v<T, float>) {
    __m256 v = _mm256_set1_ps(mx);
    for (; j + 8 <= n; j += 8) v = _mm256_max_ps(v, _mm256_loadu_ps(s + j));
    mx = hmax(v);
  }
#endif
  for (; j < n; ++j) mx = s[j] > mx ? s[j] : mx;
  return mx;
}

// s[j] = 2^(s[j] - m) in place; returns the sum.
template <typename T>
inline T exp2_row(T* s, int64_t n, T m) {
#ifdef __AVX2__
  if constexpr (std::is_same_v<T, float>) return exp2_shifted_sum(s, n, m);
#endif
  T sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    const T p = exp2_nonpositive(s[j] - m);
    s[j] = p;
    sum += p;
  }
  return sum;
}

// One tile row in place: forbid keys (mask), new max, P = 2^(s - m), row sum, alpha for the
// accumulator. Allowed keys are [lo, hi); keys outside (causality, the window, another sequence) get P = 0.
// Returns alpha (the factor for the accumulator row), or -1 when the row has had no allowed key
// yet (the row of P is all zeros and the accumulator stays zero).
template <typename T>
inline T softmax_row(T* s, int64_t cols, int64_t lo, int64_t hi, const uint8_t* mrow, int64_t mstride, T& m, T& l) {
  constexpr T NEG_INF = -std::numeric_limits<T>::infinity();
  if (mrow != nullptr) {
    for (int64_t j = lo; j < hi; ++j) {
      if (!mrow[j * mstride]) s[j] = NEG_INF;
    }
  }
  std::fill(s, s + lo, T(0));
  std::fill(s + hi, s + cols, T(0));
  const T mx = row_max(s + lo, hi - lo);
  const T m_new = mx > m ? mx : m;
  if (m_new == NEG_INF) {
    std::fill(s + lo, s + hi, T(0));
    return T(-1);
  }
  return attnbench_softmax::rescale(m, l, m_new, exp2_row(s + lo, hi - lo, m_new));
}

template <typename T>
void forward_head(const ForwardParams& p, at::Tensor& scratch) {
  constexpr T NEG_INF = -std::numeric_limits<T>::infinity();
  const at::Tensor &q = p.q, &k = p.k, &v = p.v;
  const Band& band = p.band;
  const int64_t b = p.b, h = p.h, q0 = p.q0, q1 = p.q1, block_k = p.block_k, diagonal_chunk = p.diagonal_chunk;
  const int64_t heads = q.size(1), kv_heads = k.size(1), d = q.size(3);
  const int64_t group = heads / kv_heads, rows = q1 - q0;
  const int64_t k_begin = band.lo(q0), k_end = band.hi(q1 - 1);  // the keys some row may see
  const uint8_t* mbase = nullptr;
  int64_t ms_h = 0, ms_q = 0, ms_k = 0;
  if (p.mask.has_value()) {
    const at::Tensor& mt = *p.mask;
    mbase = mt.data_ptr<uint8_t>() + b * mt.stride(0);
    ms_h = mt.stride(1), ms_q = mt.stride(2), ms_k = mt.stride(3);
  }
  std::vector<T> m(rows, NEG_INF), l(rows, T(0));
  const int64_t hk = h / group;
  // Q rows times scale * log2(e), in the worker (a torch op before the workers start would leave
  // OpenMP threads spinning on the cores the workers need).
  at::Tensor q_tile = scratch.narrow(0, rows * block_k, rows * d).view({rows, d});
  at::mul_out(q_tile, q[b][h].narrow(0, q0, rows), p.q_scale);
  at::Tensor acc = p.out[b][h].narrow(0, q0, rows);  // contiguous (rows, d)
  acc.zero_();
  T* acc_p = acc.data_ptr<T>();
  at::Tensor k_h = k[b][hk], v_h = v[b][hk];
  // Rows [r0, r1) of the query block against keys [k0, k0 + cols): S = Q K^T, softmax, O += P V.
  auto tile = [&](int64_t r0, int64_t r1, int64_t k0, int64_t cols) {
    const int64_t n = r1 - r0;
    at::Tensor s = scratch.narrow(0, 0, n * cols).view({n, cols});
    at::mm_out(s, q_tile.narrow(0, r0, n), k_h.narrow(0, k0, cols).t());
    T* s_p = s.data_ptr<T>();
    if (p.softcap > 0.0) {  // scores are already in base 2 (Q times scale * log2(e)): the cap is cap * log2(e) here
      attnbench_softcap::softcap_row(s_p, n * cols, static_cast<T>(p.softcap * M_LOG2E));
    }
    bool any = false;
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t i = q0 + r;
      int64_t lo = 0, hi = 0;
      clip(band, i, k0, cols, lo, hi);
      const uint8_t* mrow = mbase ? mbase + h * ms_h + i * ms_q + k0 * ms_k : nullptr;
      const T alpha = softmax_row<T>(s_p + (r - r0) * cols, cols, lo, hi, mrow, ms_k, m[r], l[r]);
      if (alpha >= T(0)) any = true;
      if (alpha >= T(0) && alpha != T(1)) {
        T* a = acc_p + r * d;
        for (int64_t c = 0; c < d; ++c) a[c] *= alpha;
      }
    }
    if (any) acc.narrow(0, r0, n).addmm_(s, v_h.narrow(0, k0, cols));
  };
  for (int64_t k0 = k_begin; k0 < k_end; k0 += block_k) {
    const int64_t k1 = std::min(k0 + block_k, k_end);
    if (band.lo(q1 - 1) <= k0 && band.hi(q0) >= k1) {  // every row sees every key of the block
      tile(0, rows, k0, k1 - k0);
      continue;
    }
    // The block crosses an edge of the band (the causal diagonal, a window's edge): in chunks of
    // diagonal_chunk rows, each against only the keys its rows may see, so most of what lies
    // outside the band is never multiplied.
    for (int64_t r0 = 0; r0 < rows; r0 += diagonal_chunk) {
      const int64_t r1 = std::min(r0 + diagonal_chunk, rows);
      const int64_t a = std::max(k0, band.lo(q0 + r0)), e = std::min(k1, band.hi(q0 + r1 - 1));
      if (e > a) tile(r0, r1, a, e - a);
    }
  }
  T* lse_p = p.lse[b][h].data_ptr<T>() + q0;
  for (int64_t r = 0; r < rows; ++r) {
    if (l[r] > T(0)) {
      const T inv = T(1) / l[r];
      T* a = acc_p + r * d;
      for (int64_t c = 0; c < d; ++c) a[c] *= inv;
      lse_p[r] = (m[r] + std::log2(l[r])) * T(M_LN2);
    } else {
      lse_p[r] = NEG_INF;  // no allowed key: the output row stays zero
    }
  }
}

}  // namespace

// q, k, v, out, lse: float32 or float64 (one dtype), out and lse contiguous. The score tile and the scaled
// Q rows live in a scratch buffer of the calling worker thread's own.
void forward_generic(const ForwardParams& p) {
  const at::Tensor &q = p.q, &k = p.k, &v = p.v;
  TORCH_CHECK(p.diagonal_chunk > 0, "diagonal_chunk must be positive");
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "q, k, v must be (B, H, T, d)");
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type() &&
                  q.scalar_type() == p.out.scalar_type() && q.scalar_type() == p.lse.scalar_type(),
              "q, k, v, out and lse must share one dtype");
  TORCH_CHECK(p.out.is_contiguous() && p.lse.is_contiguous(), "out and lse must be contiguous");
  TORCH_CHECK(!p.mask.has_value() || (p.mask->scalar_type() == at::kByte && p.mask->dim() == 4),
              "mask must be a uint8 (B, H, Tq, Tk) view");
  TORCH_CHECK(q.scalar_type() == at::kFloat || q.scalar_type() == at::kDouble,
              "tiled_fused computes in float32 or float64, got ", q.scalar_type());
  thread_local at::Tensor scratch;
  const int64_t need = (p.q1 - p.q0) * (p.block_k + q.size(3));
  if (!scratch.defined() || scratch.scalar_type() != q.scalar_type() || scratch.numel() < need) {
    scratch = at::empty({need}, q.options().device(at::kCPU));
  }
  if (q.scalar_type() == at::kFloat) {
    forward_head<float>(p, scratch);
  } else {
    forward_head<double>(p, scratch);
  }
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  using namespace attnbench_items;  // NOLINT
  def_item(module, "forward_item", &forward_item<forward_generic>, "One work item of the fused FlashAttention-2 forward");
  def_item(module, "backward_item", &backward_item<backward_generic>, "One work item (a key block of a kv head) of the backward");
  def_item(module, "forward_items_avx2", &forward_items<forward_avx2>, "Every item of the AVX2 forward, on torch's threads");
  def_item(module, "backward_item_avx2", &backward_item<backward_avx2>, "One work item of the AVX2 backward with its own GEMMs");
}

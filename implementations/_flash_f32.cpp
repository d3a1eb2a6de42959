// attnbench's float32 FlashAttention-2 forward on AVX-512 with its own tile GEMMs (tiled_fused's fast
// float32 path where the CPU has AVX512F; elsewhere the MKL path of _flash_fused.cpp runs).
//
// Why not MKL, as _flash_fused.cpp: an MKL sgemm call packs both operands on every call, and a work
// item makes two calls per tile (S = Q K^T, O += P V): at T = 4,096, d = 128 the packing and C's
// scaling were 12% of the forward, beside 78% in MKL's kernel. Here K^T and V are packed once per key
// block and serve all the item's rows, and the GEMM kernel (8 rows x 32 columns in 16 registers, A
// broadcast by the FMA itself) runs straight from the packed panels. Everything else is the bf16
// kernel's structure (_flash_bf16.cpp) in float32: scores, softmax, running sums, accumulator.
// Every function using AVX-512 carries F32_TARGET; the caller checks has_avx512f() at run time.
#include <torch/extension.h>

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "_flash_band.h"

#define F32_TARGET __attribute__((target("avx512f")))

using attnbench_band::Band;
using attnbench_band::clip;

namespace {

constexpr int64_t NR = 32;  // columns of C per panel (two 16-lane vectors)
constexpr int64_t MR = 8;   // rows of C per kernel call

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
inline __mmask16 tail(int64_t n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1); }

// C[0:8, 0:32] (+)= A[0:8, 0:kk] * panel (kk rows of 32 floats): A's element is broadcast by the FMA
// ({1to16}); accumulators are named variables (GCC keeps an array of them in memory around asm).
F32_TARGET inline void micro8(const float* a, int64_t lda, const float* panel, int64_t kk, float* c, int64_t ldc,
                              bool add) {
#define ATTNBENCH_ACC(i) \
  __m512 c##i##0 = add ? _mm512_loadu_ps(c + i * ldc) : _mm512_setzero_ps(); \
  __m512 c##i##1 = add ? _mm512_loadu_ps(c + i * ldc + 16) : _mm512_setzero_ps();
  ATTNBENCH_ACC(0) ATTNBENCH_ACC(1) ATTNBENCH_ACC(2) ATTNBENCH_ACC(3)
  ATTNBENCH_ACC(4) ATTNBENCH_ACC(5) ATTNBENCH_ACC(6) ATTNBENCH_ACC(7)
#undef ATTNBENCH_ACC
  for (int64_t p = 0; p < kk; ++p) {
    const __m512 b0 = _mm512_loadu_ps(panel + p * NR);
    const __m512 b1 = _mm512_loadu_ps(panel + p * NR + 16);
#define ATTNBENCH_ROW(i)                                                                              \
  {                                                                                                 \
    const float* w = a + i * lda + p;                                                               \
    asm("vfmadd231ps %[w]%{1to16%}, %[b], %[c]" : [c] "+v"(c##i##0) : [b] "v"(b0), [w] "m"(*w));    \
    asm("vfmadd231ps %[w]%{1to16%}, %[b], %[c]" : [c] "+v"(c##i##1) : [b] "v"(b1), [w] "m"(*w));    \
  }
    ATTNBENCH_ROW(0) ATTNBENCH_ROW(1) ATTNBENCH_ROW(2) ATTNBENCH_ROW(3)
    ATTNBENCH_ROW(4) ATTNBENCH_ROW(5) ATTNBENCH_ROW(6) ATTNBENCH_ROW(7)
#undef ATTNBENCH_ROW
  }
#define ATTNBENCH_STORE(i) \
  _mm512_storeu_ps(c + i * ldc, c##i##0); \
  _mm512_storeu_ps(c + i * ldc + 16, c##i##1);
  ATTNBENCH_STORE(0) ATTNBENCH_STORE(1) ATTNBENCH_STORE(2) ATTNBENCH_STORE(3)
  ATTNBENCH_STORE(4) ATTNBENCH_STORE(5) ATTNBENCH_STORE(6) ATTNBENCH_STORE(7)
#undef ATTNBENCH_STORE
}

// The same for the last R < 8 rows of a tile.
template <int R>
F32_TARGET inline void micro(const float* a, int64_t lda, const float* panel, int64_t kk, float* c, int64_t ldc,
                             bool add) {
  __m512 acc[R][2];
  for (int i = 0; i < R; ++i) {
    acc[i][0] = add ? _mm512_loadu_ps(c + i * ldc) : _mm512_setzero_ps();
    acc[i][1] = add ? _mm512_loadu_ps(c + i * ldc + 16) : _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < kk; ++p) {
    const __m512 b0 = _mm512_loadu_ps(panel + p * NR);
    const __m512 b1 = _mm512_loadu_ps(panel + p * NR + 16);
    for (int i = 0; i < R; ++i) {
      const __m512 x = _mm512_set1_ps(a[i * lda + p]);
      acc[i][0] = _mm512_fmadd_ps(x, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(x, b1, acc[i][1]);
    }
  }
  for (int i = 0; i < R; ++i) {
    _mm512_storeu_ps(c + i * ldc, acc[i][0]);
    _mm512_storeu_ps(c + i * ldc + 16, acc[i][1]);
  }
}

// C (m x 32 panels) (+)= A (m x kk, row stride lda) * packed B, whose panels hold kstride >= kk rows each.
F32_TARGET void gemm(int64_t m, int64_t panels, int64_t kk, int64_t kstride, const float* a, int64_t lda,
                     const float* b, float* c, int64_t ldc, bool add) {
  for (int64_t j = 0; j < panels; ++j) {
    const float* panel = b + j * kstride * NR;
    for (int64_t i = 0; i < m; i += MR) {
      const float* ai = a + i * lda;
      float* ci = c + i * ldc + j * NR;
      switch (std::min(MR, m - i)) {
        case 8: micro8(ai, lda, panel, kk, ci, ldc, add); break;
        case 7: micro<7>(ai, lda, panel, kk, ci, ldc, add); break;
        case 6: micro<6>(ai, lda, panel, kk, ci, ldc, add); break;
        case 5: micro<5>(ai, lda, panel, kk, ci, ldc, add); break;
        case 4: micro<4>(ai, lda, panel, kk, ci, ldc, add); break;
        case 3: micro<3>(ai, lda, panel, kk, ci, ldc, add); break;
        case 2: micro<2>(ai, lda, panel, kk, ci, ldc, add); break;
        default: micro<1>(ai, lda, panel, kk, ci, ldc, add); break;
      }
    }
  }
}

inline float to_float(float x) { return x; }
inline float to_float(uint16_t bits) {  // bf16 -> float32: the bits are the float's upper half
  const uint32_t u = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// K rows [0, n) as B = K^T: panels of 32 keys, each d rows of 32 floats (keys past n zero).
template <typename T>
void pack_kt(const T* k, int64_t ld, int64_t n, int64_t d, float* out) {
  for (int64_t j0 = 0; j0 < round_up(n, NR); j0 += NR) {
    float* panel = out + (j0 / NR) * d * NR;
    for (int64_t c = 0; c < NR; ++c) {
      const T* row = j0 + c < n ? k + (j0 + c) * ld : nullptr;
      for (int64_t p = 0; p < d; ++p) panel[p * NR + c] = row ? to_float(row[p]) : 0.0f;
    }
  }
}

// V rows [0, n) as B = V: panels of 32 columns of d (columns past d zero), each n rows.
template <typename T>
void pack_v(const T* v, int64_t ld, int64_t n, int64_t d, float* out) {
  for (int64_t c0 = 0; c0 < round_up(d, NR); c0 += NR) {
    float* panel = out + (c0 / NR) * n * NR;
    const int64_t w = std::min(NR, d - c0);
    for (int64_t p = 0; p < n; ++p) {
      if constexpr (std::is_same_v<T, float>) {
        std::memcpy(panel + p * NR, v + p * ld + c0, w * sizeof(float));
      } else {
        for (int64_t c = 0; c < w; ++c) panel[p * NR + c] = to_float(v[p * ld + c0 + c]);
      }
      std::fill(panel + p * NR + w, panel + (p + 1) * NR, 0.0f);
    }
  }
}

inline void store(float* dst, float x) { *dst = x; }
inline void store(uint16_t* dst, float x) { *dst = c10::BFloat16(x).x; }  // round to nearest even

// 2^x on the lanes in ``keep`` (0 on the others), x = c s - m: at most a rounding above 0 and finite
// (masked keys are the lanes not kept), so no clamp: below -149 scalef underflows to 0 by itself. The
// degree-5 fit of _flash_exp2.h (two float32 ulps), p * 2^n by scalef.
F32_TARGET inline __m512 exp2_masked(__mmask16 keep, __m512 x) {
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(1.3266970636323094e-3f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.675459936261177e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550742521882057e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022121727466583e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931469440460205e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0000001192092896e0f));
  return _mm512_maskz_scalef_ps(keep, p, n);
}

// One row, as softmax_row in _flash_bf16.cpp with P kept in float32: the max of c * s over the allowed
// lanes [lo, lim) (and the mask), then P = 2^(c * s - m) with forbidden lanes 0 and [lim, pw) zeroed,
// the running sum. Returns alpha for the accumulator row, or -1 while the row has had no allowed key.
F32_TARGET float softmax_row(const float* s, float* prow, int64_t lo, int64_t lim, int64_t pw, const uint8_t* mrow,
                             int64_t mstride, float c, float& m, float& l) {
  constexpr float NEG_INF = -std::numeric_limits<float>::infinity();
  auto allowed = [&](int64_t j) {
    __mmask16 ok = tail(lim - j);
    if (lo > j) ok &= static_cast<__mmask16>(~tail(lo - j));
    if (mrow != nullptr) {
      for (int64_t u = 0; u < 16 && j + u < lim; ++u)
        if (!mrow[(j + u) * mstride]) ok &= static_cast<__mmask16>(~(1u << u));
    }
    return ok;
  };
  const __m512 cv = _mm512_set1_ps(c);
  __m512 mx = _mm512_set1_ps(NEG_INF);
  for (int64_t j = 0; j < lim; j += 16) {
    const __mmask16 ok = allowed(j);
    mx = _mm512_mask_max_ps(mx, ok, mx, _mm512_mul_ps(_mm512_maskz_loadu_ps(ok, s + j), cv));
  }
  const float row_max = _mm512_reduce_max_ps(mx);
  const float m_new = row_max > m ? row_max : m;
  std::fill(prow + lim, prow + pw, 0.0f);
  if (m_new == NEG_INF) {
    std::fill(prow, prow + lim, 0.0f);
    return -1.0f;
  }
  const __m512 neg_m = _mm512_set1_ps(-m_new);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < lim; j += 16) {
    const __mmask16 t = tail(lim - j), ok = lo > j || mrow != nullptr ? allowed(j) : t;
    const __m512 x = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(t, s + j), cv, neg_m);
    const __m512 p = exp2_masked(ok, x);
    sum = _mm512_add_ps(sum, p);
    _mm512_mask_storeu_ps(prow + j, t, p);
  }
  const float alpha = m == NEG_INF ? 0.0f : std::exp2(m - m_new);
  l = l * alpha + _mm512_reduce_add_ps(sum);
  m = m_new;
  return alpha;
}

F32_TARGET void scale_row(float* a, int64_t n, float f) {
  const __m512 fv = _mm512_set1_ps(f);
  for (int64_t j = 0; j < n; j += 16) _mm512_storeu_ps(a + j, _mm512_mul_ps(_mm512_loadu_ps(a + j), fv));
}

}  // namespace

bool has_avx512f() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}

namespace {

// One work item, as forward_item_bf16: query rows [q0, q1) of head h of batch b; T = float, or
// uint16_t for bf16 input converted to float32 as it is packed (bf16 -> float32 is a shift).
template <typename T>
F32_TARGET void forward_rows(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const c10::optional<at::Tensor>& mask, at::Tensor& out, at::Tensor& lse, int64_t b,
                             int64_t h, int64_t q0, int64_t q1, const Band& band, double q_scale, int64_t block_k,
                             int64_t diagonal_chunk) {
  constexpr float NEG_INF = -std::numeric_limits<float>::infinity();
  const int64_t heads = q.size(1), kv_heads = k.size(1), d = q.size(3);
  const int64_t hk = h / (heads / kv_heads), rows = q1 - q0;
  const int64_t k_begin = band.lo(q0), k_end = band.hi(q1 - 1);
  const int64_t dw = round_up(d, NR);
  const int64_t bk = std::min(block_k, std::max<int64_t>(k_end - k_begin, 1));
  const int64_t sw = round_up(bk, NR), pw = round_up(bk, 16);
  thread_local std::vector<float> kbuf, vbuf, sbuf, pbuf, acc;
  kbuf.resize(sw * d);
  vbuf.resize(dw * bk);
  sbuf.resize(std::min(rows, diagonal_chunk) * sw);
  pbuf.resize(rows * pw);
  acc.assign(rows * dw, 0.0f);
  std::vector<float> m(rows, NEG_INF), l(rows, 0.0f);
  const T* qsrc = reinterpret_cast<const T*>(q.data_ptr()) + b * q.stride(0) + h * q.stride(1) + q0 * q.stride(2);
  const T* kp = reinterpret_cast<const T*>(k.data_ptr()) + b * k.stride(0) + hk * k.stride(1);
  const T* vp = reinterpret_cast<const T*>(v.data_ptr()) + b * v.stride(0) + hk * v.stride(1);
  const float* qp;
  int64_t lq;
  thread_local std::vector<float> qbuf;
  if constexpr (std::is_same_v<T, float>) {
    qp = qsrc, lq = q.stride(2);
  } else {  // the item's Q rows converted once
    const int64_t ld = q.stride(2);
    qbuf.resize(rows * d);
    float* qb = qbuf.data();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t u = 0; u < d; ++u) qb[r * d + u] = to_float(qsrc[r * ld + u]);
    qp = qbuf.data(), lq = d;
  }
  const uint8_t* mbase = nullptr;
  int64_t ms_q = 0, ms_k = 0;
  if (mask.has_value()) {
    mbase = mask->data_ptr<uint8_t>() + b * mask->stride(0) + h * mask->stride(1);
    ms_q = mask->stride(2), ms_k = mask->stride(3);
  }
  const float c = static_cast<float>(q_scale);
  int64_t keys = 0;  // keys in the packed block (the V panels' row count)
  // Rows [r0, r1) against keys [kb + c0, kb + c1) of the packed block at kb; c0 is a multiple of NR.
  auto tile = [&](int64_t r0, int64_t r1, int64_t kb, int64_t c0, int64_t c1) {
    const int64_t n = r1 - r0, need = c1 - c0;
    gemm(n, (need + NR - 1) / NR, d, d, qp + r0 * lq, lq, kbuf.data() + c0 / NR * d * NR, sbuf.data(), sw, false);
    bool any = false;
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t i = q0 + r;
      int64_t lo = 0, lim = 0;
      clip(band, i, kb + c0, need, lo, lim);
      const uint8_t* mrow = mbase ? mbase + i * ms_q + (kb + c0) * ms_k : nullptr;
      const float alpha = softmax_row(&sbuf[(r - r0) * sw], &pbuf[r * pw], lo, lim, need, mrow, ms_k, c, m[r], l[r]);
      if (alpha >= 0.0f) any = true;
      if (alpha >= 0.0f && alpha != 1.0f) scale_row(&acc[r * dw], dw, alpha);
    }
    if (any) gemm(n, dw / NR, need, keys, &pbuf[r0 * pw], pw, vbuf.data() + c0 * NR, &acc[r0 * dw], dw, true);
  };
  for (int64_t kb = k_begin; kb < k_end; kb += bk) {
    keys = std::min(kb + bk, k_end) - kb;
    pack_kt(kp + kb * k.stride(2), k.stride(2), keys, d, kbuf.data());
    pack_v(vp + kb * v.stride(2), v.stride(2), keys, d, vbuf.data());
    // Chunks of diagonal_chunk rows, each against only the keys its rows may see (see _flash_bf16.cpp).
    for (int64_t r0 = 0; r0 < rows; r0 += diagonal_chunk) {
      const int64_t r1 = std::min(r0 + diagonal_chunk, rows);
      const int64_t a = std::max(kb, band.lo(q0 + r0)), e = std::min(kb + keys, band.hi(q0 + r1 - 1));
      if (e > a) tile(r0, r1, kb, (a - kb) / NR * NR, e - kb);
    }
  }
  T* op = reinterpret_cast<T*>(out.data_ptr()) + (b * heads + h) * out.size(2) * d;
  float* lse_p = lse.data_ptr<float>() + (b * heads + h) * out.size(2);
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    T* orow = op + (q0 + r) * d;
    if constexpr (std::is_same_v<T, float>) {
      for (int64_t j = 0; j < d; j += 16) {
        const __mmask16 t = tail(d - j);
        _mm512_mask_storeu_ps(orow + j, t, _mm512_mul_ps(_mm512_maskz_loadu_ps(t, &acc[r * dw + j]), _mm512_set1_ps(inv)));
      }
    } else {
      for (int64_t j = 0; j < d; ++j) store(orow + j, acc[r * dw + j] * inv);
    }
    lse_p[q0 + r] = l[r] > 0.0f ? (m[r] + std::log2(l[r])) * static_cast<float>(M_LN2) : NEG_INF;
  }
}

}  // namespace

// q, k, v, out: float32, or bf16 (converted to float32 as it loads), one dtype, with contiguous rows (out
// contiguous (B, H, Tq, d)); lse: float32 (B, H, Tq), natural log.
void forward_item_f32(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                      const c10::optional<at::Tensor>& mask, at::Tensor out, at::Tensor lse, int64_t b, int64_t h,
                      int64_t q0, int64_t q1, const std::vector<int64_t>& band_spec, double q_scale, int64_t block_k,
                      int64_t diagonal_chunk) {
  const Band band(band_spec);
  const auto dt = q.scalar_type();
  TORCH_CHECK((dt == at::kFloat || dt == at::kBFloat16) && k.scalar_type() == dt && v.scalar_type() == dt &&
                  out.scalar_type() == dt && lse.scalar_type() == at::kFloat,
              "forward_item_f32: q, k, v, out float32 or bf16 (one dtype), lse float32");
  TORCH_CHECK(q.stride(3) == 1 && k.stride(3) == 1 && v.stride(3) == 1 && out.is_contiguous() && lse.is_contiguous(),
              "forward_item_f32: rows must be contiguous");
  TORCH_CHECK(!mask.has_value() || (mask->scalar_type() == at::kByte && mask->dim() == 4),
              "mask must be a uint8 (B, H, Tq, Tk) view");
  if (dt == at::kFloat) {
    forward_rows<float>(q, k, v, mask, out, lse, b, h, q0, q1, band, q_scale, block_k, diagonal_chunk);
  } else {
    forward_rows<uint16_t>(q, k, v, mask, out, lse, b, h, q0, q1, band, q_scale, block_k, diagonal_chunk);
  }
}

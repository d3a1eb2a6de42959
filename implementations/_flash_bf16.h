// The bf16 GEMM kernel (VDPBF16PS), operand packing and a 16-lane exp2 shared by tiled_fused's bf16
// forward (_flash_bf16.cpp) and backward (_flash_bf16_backward.cpp). Operand layouts ("VNNI"): the
// GEMM C (m x n) += A (m x k) B (k x n) reads A as bf16 rows and B packed in panels of 32 columns;
// within a panel, for each pair of k indices p, 32 32-bit words hold (B[2p][c], B[2p+1][c]).
// Odd sizes are padded with zeros. Every function using AVX-512 carries BF16_TARGET; callers check
// has_avx512bf16() at run time.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace attnbench_bf16 {

constexpr int64_t MR = 8;   // rows of C per kernel call
constexpr int64_t NR = 32;  // columns of C per panel (two 16-lane vectors)

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// C[0:R, 0:32] (+)= A[0:R, 0:2kp] * panel, 16 (R = 8) float32 accumulators in registers.
template <int R>
BF16_TARGET inline void micro(const uint16_t* a, int64_t lda, const uint32_t* panel, int64_t kp, float* c,
                              int64_t ldc, bool add) {
  __m512 acc[R][2];
  for (int i = 0; i < R; ++i) {
    acc[i][0] = add ? _mm512_loadu_ps(c + i * ldc) : _mm512_setzero_ps();
    acc[i][1] = add ? _mm512_loadu_ps(c + i * ldc + 16) : _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < kp; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(panel + p * NR);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(panel + p * NR + 16);
    for (int i = 0; i < R; ++i) {
      int32_t word;
      std::memcpy(&word, a + i * lda + 2 * p, sizeof word);
      const __m512bh x = (__m512bh)_mm512_set1_epi32(word);
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], x, b0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], x, b1);
    }
  }
  for (int i = 0; i < R; ++i) {
    _mm512_storeu_ps(c + i * ldc, acc[i][0]);
    _mm512_storeu_ps(c + i * ldc + 16, acc[i][1]);
  }
}

// The full 8-row case, the hot one: A's pair of bf16 is broadcast by the dot-product instruction itself
// ({1to16}, as oneDNN's kernels do), where GCC emits a separate vpbroadcastd per row. Accumulators are
// named variables: GCC keeps an array of them in memory around inline assembly.
BF16_TARGET inline void micro8(const uint16_t* a, int64_t lda, const uint32_t* panel, int64_t kp, float* c,
                               int64_t ldc, bool add) {
#define ATTNBENCH_ACC(i) \
  __m512 c##i##0 = add ? _mm512_loadu_ps(c + i * ldc) : _mm512_setzero_ps(); \
  __m512 c##i##1 = add ? _mm512_loadu_ps(c + i * ldc + 16) : _mm512_setzero_ps();
  ATTNBENCH_ACC(0) ATTNBENCH_ACC(1) ATTNBENCH_ACC(2) ATTNBENCH_ACC(3)
  ATTNBENCH_ACC(4) ATTNBENCH_ACC(5) ATTNBENCH_ACC(6) ATTNBENCH_ACC(7)
#undef ATTNBENCH_ACC
  for (int64_t p = 0; p < kp; ++p) {
    const __m512 b0 = _mm512_castsi512_ps(_mm512_loadu_si512(panel + p * NR));
    const __m512 b1 = _mm512_castsi512_ps(_mm512_loadu_si512(panel + p * NR + 16));
#define ATTNBENCH_ROW(i)                                                                                         \
  {                                                                                                            \
    const int32_t* w = reinterpret_cast<const int32_t*>(a + i * lda + 2 * p);                                  \
    asm("vdpbf16ps %[w]%{1to16%}, %[b], %[c]" : [c] "+v"(c##i##0) : [b] "v"(b0), [w] "m"(*w));               \
    asm("vdpbf16ps %[w]%{1to16%}, %[b], %[c]" : [c] "+v"(c##i##1) : [b] "v"(b1), [w] "m"(*w));               \
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

// C (m x 32*panels, row stride ldc) (+)= A (m x 2kp bf16, row stride lda) * packed B, whose
// panels hold kp_stride >= kp pairs each (the first kp are used).
BF16_TARGET inline void gemm(int64_t m, int64_t panels, int64_t kp, int64_t kp_stride, const uint16_t* a, int64_t lda,
                      const uint32_t* b, float* c, int64_t ldc, bool add) {
  for (int64_t j = 0; j < panels; ++j) {
    const uint32_t* panel = b + j * kp_stride * NR;
    for (int64_t i = 0; i < m; i += MR) {
      const uint16_t* ai = a + i * lda;
      float* ci = c + i * ldc + j * NR;
      switch (std::min(MR, m - i)) {
        case 8: micro8(ai, lda, panel, kp, ci, ldc, add); break;
        case 7: micro<7>(ai, lda, panel, kp, ci, ldc, add); break;
        case 6: micro<6>(ai, lda, panel, kp, ci, ldc, add); break;
        case 5: micro<5>(ai, lda, panel, kp, ci, ldc, add); break;
        case 4: micro<4>(ai, lda, panel, kp, ci, ldc, add); break;
        case 3: micro<3>(ai, lda, panel, kp, ci, ldc, add); break;
        case 2: micro<2>(ai, lda, panel, kp, ci, ldc, add); break;
        default: micro<1>(ai, lda, panel, kp, ci, ldc, add); break;
      }
    }
  }
}

inline uint32_t pair(uint16_t lo, uint16_t hi) { return uint32_t(lo) | (uint32_t(hi) << 16); }

// K rows [0, n) (row stride ld, d columns) as B = K^T: panels of 32 keys, kp = ceil(d / 2) pairs.
inline void pack_kt(const uint16_t* k, int64_t ld, int64_t n, int64_t d, uint32_t* out) {
  const int64_t kp = (d + 1) / 2;
  for (int64_t j0 = 0; j0 < round_up(n, NR); j0 += NR) {
    uint32_t* panel = out + (j0 / NR) * kp * NR;
    for (int64_t c = 0; c < NR; ++c) {
      const int64_t key = j0 + c;
      for (int64_t p = 0; p < kp; ++p) {
        const uint16_t lo = key < n ? k[key * ld + 2 * p] : 0;
        const uint16_t hi = key < n && 2 * p + 1 < d ? k[key * ld + 2 * p + 1] : 0;
        panel[p * NR + c] = pair(lo, hi);
      }
    }
  }
}

// V rows [0, n) as B = V: panels of 32 columns of d, kp = ceil(n / 2) pairs of keys.
inline void pack_v(const uint16_t* v, int64_t ld, int64_t n, int64_t d, uint32_t* out) {
  const int64_t kp = (n + 1) / 2;
  for (int64_t c0 = 0; c0 < round_up(d, NR); c0 += NR) {
    uint32_t* panel = out + (c0 / NR) * kp * NR;
    for (int64_t p = 0; p < kp; ++p) {
      const uint16_t* r0 = v + 2 * p * ld;
      const bool second = 2 * p + 1 < n;
      for (int64_t c = 0; c < NR; ++c) {
        const int64_t col = c0 + c;
        panel[p * NR + c] = col < d ? pair(r0[col], second ? r0[ld + col] : 0) : 0;
      }
    }
  }
}

// 2^x for x <= 0, as exp2_nonpositive in _flash_fused.cpp (same polynomial), 16 lanes.
BF16_TARGET inline __m512 exp2_nonpositive(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-126.0f);
  const __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  const __m512 xc = _mm512_max_ps(x, lo);
  const __m512 n = _mm512_roundscale_ps(xc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(xc, n);
  __m512 p = _mm512_set1_ps(1.3266970636323094e-3f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.675459936261177e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550742521882057e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022121727466583e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931469440460205e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0000001192092896e0f));
  return _mm512_maskz_scalef_ps(static_cast<__mmask16>(~under), p, n);  // p * 2^n in one instruction
}

inline __mmask16 tail(int64_t n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1); }

}  // namespace attnbench_bf16

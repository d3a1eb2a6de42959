// The AVX-512 pieces of tiled_fused's avx512f (_flash_f32.cpp) and avx512_bf16 (_flash_bf16.cpp,
// _flash_bf16_backward.cpp) kernels: the register-blocked tile GEMM on float32 FMA or on VDPBF16PS
// (pairs of bf16 products summed into float32 lanes), the 16-lane exponentials, and the lane type the
// shared softmax row (_flash_softmax.h) runs on.
//
// GEMM: C (m x NR*panels) (+)= A (m x k) B, B packed in panels of NR = 32 columns (two 16-lane
// vectors), each k rows of 32 B elements: floats (Op = F32), or for bf16 32-bit words holding the pair
// (B[2p][c], B[2p+1][c]) (Op = Bf16, k counted in pairs, A read as pairs of bf16 along its rows).
// Only for the extensions compiled whole at the avx512f or avx512_bf16 level (_cpp_build.ISAS), which are
// loaded only on a CPU that has it. In an anonymous namespace: each translation unit its own copy.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "_flash_exp2.h"
#include "_flash_pack.h"
#include "_flash_softmax.h"

namespace attnbench_avx512 {
namespace {

constexpr int64_t NR = 32;  // columns of C per panel (two 16-lane vectors)
constexpr int64_t MR = 8;   // rows of C per kernel call

struct F32 {
  using A = float;
  using B = float;
  static constexpr int64_t step = 1;  // A elements per k index
};
struct Bf16 {
  using A = uint16_t;
  using B = uint32_t;
  static constexpr int64_t step = 2;
};

inline __mmask16 tail(int64_t n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1); }

// acc + a[0] * b (F32), or + a[0] b[lo] + a[1] b[hi] per lane (Bf16).
template <class Op>
inline __m512 madd(__m512 acc, const typename Op::A* a, __m512 b) {
  if constexpr (std::is_same_v<Op, F32>) {
    return _mm512_fmadd_ps(_mm512_set1_ps(*a), b, acc);
  } else {
    int32_t word;
    std::memcpy(&word, a, sizeof word);
    return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_set1_epi32(word), (__m512bh)b);
  }
}

// C[0:R, 0:32] (+)= A[0:R, 0:kk] * panel, 2R float32 accumulators in registers.
template <class Op, int R>
inline void micro(const typename Op::A* a, int64_t lda, const typename Op::B* panel, int64_t kk, float* c, int64_t ldc,
                  bool add) {
  __m512 acc[R][2];
  for (int i = 0; i < R; ++i) {
    acc[i][0] = add ? _mm512_loadu_ps(c + i * ldc) : _mm512_setzero_ps();
    acc[i][1] = add ? _mm512_loadu_ps(c + i * ldc + 16) : _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < kk; ++p) {
    const __m512 b0 = _mm512_castsi512_ps(_mm512_loadu_si512(panel + p * NR));
    const __m512 b1 = _mm512_castsi512_ps(_mm512_loadu_si512(panel + p * NR + 16));
    for (int i = 0; i < R; ++i) {
      acc[i][0] = madd<Op>(acc[i][0], a + i * lda + Op::step * p, b0);
      acc[i][1] = madd<Op>(acc[i][1], a + i * lda + Op::step * p, b1);
    }
  }
  for (int i = 0; i < R; ++i) {
    _mm512_storeu_ps(c + i * ldc, acc[i][0]);
    _mm512_storeu_ps(c + i * ldc + 16, acc[i][1]);
  }
}

// acc += *w broadcast to every lane times b, by the FMA (F32) or dot-product (Bf16) instruction itself
// ({1to16}, as oneDNN's kernels do), where GCC emits a separate broadcast per row. W is the type A's memory
// was written with where it was float32: an int32_t view of it would let the compiler move the asm before
// the stores of A it reads.
template <class Op>
inline void broadcast_madd(__m512& acc, const typename Op::A* a, __m512 b) {
  if constexpr (std::is_same_v<Op, F32>) {
    asm("vfmadd231ps %[w]%{1to16%}, %[b], %[c]" : [c] "+v"(acc) : [b] "v"(b), [w] "m"(*a));
  } else {
    const int32_t* w = reinterpret_cast<const int32_t*>(a);
    asm("vdpbf16ps %[w]%{1to16%}, %[b], %[c]" : [c] "+v"(acc) : [b] "v"(b), [w] "m"(*w));
  }
}

// The full 8-row case, the hot one: A's element (F32) or pair of bf16 (Bf16) broadcast by the instruction
// (broadcast_madd). Row I of C in lo[I], hi[I]; every index is a constant of the pack expansion, never a loop
// variable, so GCC keeps the 16 accumulators in registers (an array indexed in a loop it keeps in memory
// around inline assembly).
template <class Op, int... I>
inline void micro8_rows(const typename Op::A* a, int64_t lda, const typename Op::B* panel, int64_t kk, float* c,
                        int64_t ldc, bool add, std::integer_sequence<int, I...>) {
  __m512 lo[sizeof...(I)], hi[sizeof...(I)];
  ((lo[I] = add ? _mm512_loadu_ps(c + I * ldc) : _mm512_setzero_ps(),
    hi[I] = add ? _mm512_loadu_ps(c + I * ldc + 16) : _mm512_setzero_ps()),
   ...);
  for (int64_t p = 0; p < kk; ++p) {
    const __m512 b0 = _mm512_castsi512_ps(_mm512_loadu_si512(panel + p * NR));
    const __m512 b1 = _mm512_castsi512_ps(_mm512_loadu_si512(panel + p * NR + 16));
    ((broadcast_madd<Op>(lo[I], a + I * lda + Op::step * p, b0), broadcast_madd<Op>(hi[I], a + I * lda + Op::step * p, b1)),
     ...);
  }
  ((_mm512_storeu_ps(c + I * ldc, lo[I]), _mm512_storeu_ps(c + I * ldc + 16, hi[I])), ...);
}

template <class Op>
inline void micro8(const typename Op::A* a, int64_t lda, const typename Op::B* panel, int64_t kk, float* c,
                   int64_t ldc, bool add) {
  micro8_rows<Op>(a, lda, panel, kk, c, ldc, add, std::make_integer_sequence<int, MR>{});
}

// C (m x 32*panels, row stride ldc) (+)= A (m x kk, row stride lda) * packed B, whose panels hold
// kstride >= kk rows each (the first kk are used).
template <class Op>
inline void gemm(int64_t m, int64_t panels, int64_t kk, int64_t kstride, const typename Op::A* a, int64_t lda,
                 const typename Op::B* b, float* c, int64_t ldc, bool add) {
  for (int64_t j = 0; j < panels; ++j) {
    const typename Op::B* panel = b + j * kstride * NR;
    for (int64_t i = 0; i < m; i += MR) {
      const typename Op::A* ai = a + i * lda;
      float* ci = c + i * ldc + j * NR;
      attnbench_pack::with_rows<MR>(m - i, [&](auto rows) {
        constexpr int R = decltype(rows)::value;
        if constexpr (R == MR) {
          micro8<Op>(ai, lda, panel, kk, ci, ldc, add);
        } else {
          micro<Op, R>(ai, lda, panel, kk, ci, ldc, add);
        }
      });
    }
  }
}

// 2^x on the lanes in `keep` (0 on the others) for x at most a rounding above 0 and finite on them: no
// clamp, below -149 scalef underflows to 0 by itself. Degree 5: the fit of _flash_exp2.h (two float32
// ulps); degree 3 (relative error 7.7e-5, measured on 200k points) for P that is rounded to bf16
// (relative step 2^-8) right after.
template <int Degree = 5>
inline __m512 exp2_masked(__mmask16 keep, __m512 x) {
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p;
  if constexpr (Degree == 5) {
    p = exp2_poly5(f, [](__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); },
                   [](float x) { return _mm512_set1_ps(x); });
  } else {
    p = _mm512_set1_ps(5.508876591920853e-2f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4260465800762177e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.932762861251831e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.99928891658783e-1f));
  }
  return _mm512_maskz_scalef_ps(keep, p, n);  // p * 2^n in one instruction
}

// 2^x for x <= 0, as exp2_nonpositive in _flash_exp2.h (exact 0 below -126), 16 lanes.
inline __m512 exp2_nonpositive(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-126.0f);
  return exp2_masked<5>(static_cast<__mmask16>(~_mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ)), _mm512_max_ps(x, lo));
}

// The lane type of softmax_row (_flash_softmax.h): 16 lanes, P stored as float32 (PT = float, the degree-5
// exponential) or rounded to bf16 (PT = uint16_t, degree 3).
template <typename PT>
struct Lanes {
  using P = PT;
  using Vec = __m512;
  static constexpr int64_t W = 16;
  static float reduce_max(__m512 x) { return _mm512_reduce_max_ps(x); }
  static float reduce_add(__m512 x) { return _mm512_reduce_add_ps(x); }
  static __m512 load(const float* s) { return _mm512_loadu_ps(s); }
  static __m512 set1(float x) { return _mm512_set1_ps(x); }
  static __m512 mul(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
  static __m512 fma(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
  static __m512 add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
  static int64_t padded(int64_t n) { return std::is_same_v<PT, float> ? n : (n + 1) / 2 * 2; }
  static __mmask16 allowed(int64_t j, int64_t lo, int64_t lim, const uint8_t* mrow, int64_t ms) {
    __mmask16 ok = tail(lim - j);
    if (lo > j) ok &= static_cast<__mmask16>(~tail(lo - j));
    if (mrow != nullptr) {
      for (int64_t u = 0; u < 16 && j + u < lim; ++u)
        if (!mrow[(j + u) * ms]) ok &= static_cast<__mmask16>(~(1u << u));
    }
    return ok;
  }
  static __m512 max_where(__m512 mx, __mmask16 ok, __m512 x) { return _mm512_mask_max_ps(mx, ok, mx, x); }
  static __m512 exp2_where(__mmask16 ok, __m512 x) { return exp2_masked<std::is_same_v<PT, float> ? 5 : 3>(ok, x); }
  static void store_p(PT* dst, __m512 p) {
    if constexpr (std::is_same_v<PT, float>) {
      _mm512_storeu_ps(dst, p);
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), (__m256i)_mm512_cvtneps_pbh(p));
    }
  }
};

inline void scale_row(float* a, int64_t n, float f) {
  const __m512 fv = _mm512_set1_ps(f);
  for (int64_t j = 0; j < n; j += 16) _mm512_storeu_ps(a + j, _mm512_mul_ps(_mm512_loadu_ps(a + j), fv));
}

}  // namespace
}  // namespace attnbench_avx512

// The AVX2 + FMA tile GEMM (6 x 16 register block), operand packing and lane masks shared by
// tiled_fused's avx2 forward (_flash_avx2.cpp) and backward (_flash_avx2_backward.cpp). B operands are
// packed in panels of 16 columns (zero-padded); A is read in place, row by row. Operands may be float32
// or bf16 (T = uint16_t, its bits), converted to float32 as they are packed: bf16 -> float32 is a shift.
// Only for translation units compiled with -mavx2 -mfma (see _cpp_build.py).
#pragma once

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace attnbench_avx2 {

constexpr int64_t NR = 16;  // columns of C per panel (two 8-lane vectors)
constexpr int64_t MR = 6;   // rows of C per kernel call

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

inline float to_float(float x) { return x; }
inline float to_float(uint16_t bits) {  // bf16 -> float32: the bits are the float's upper half
  const uint32_t u = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline float hsum(__m256 x) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

inline float hmax(__m256 x) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}

// C[0:R, 0:16] (+)= A[0:R, 0:kk] * panel (kk rows of 16 floats), R <= 6. Accumulators are named
// variables, not an array, so that all 2R stay in registers (with the two B vectors and the
// broadcast: at most 15 of 16; GCC keeps an array in memory and reloads it every step).
template <int R>
inline void micro(const float* a, int64_t lda, const float* panel, int64_t kk, float* c, int64_t ldc, bool add) {
  const __m256 z = _mm256_setzero_ps();
#define ATTNBENCH_ACC(i)                                                                 \
  __m256 c##i##0 = z, c##i##1 = z;                                                       \
  if constexpr (R > i) {                                                                 \
    if (add) c##i##0 = _mm256_loadu_ps(c + i * ldc), c##i##1 = _mm256_loadu_ps(c + i * ldc + 8); \
  }
  ATTNBENCH_ACC(0) ATTNBENCH_ACC(1) ATTNBENCH_ACC(2) ATTNBENCH_ACC(3) ATTNBENCH_ACC(4) ATTNBENCH_ACC(5)
#undef ATTNBENCH_ACC
  const float* a0 = a;
  const float* a3 = a + 3 * lda;
  for (int64_t p = 0; p < kk; ++p) {
    const __m256 b0 = _mm256_loadu_ps(panel + p * NR);
    const __m256 b1 = _mm256_loadu_ps(panel + p * NR + 8);
#define ATTNBENCH_ROW(i, base, off)                          \
  if constexpr (R > i) {                                     \
    const __m256 x = _mm256_broadcast_ss(base + off + p);    \
    c##i##0 = _mm256_fmadd_ps(x, b0, c##i##0);               \
    c##i##1 = _mm256_fmadd_ps(x, b1, c##i##1);               \
  }
    ATTNBENCH_ROW(0, a0, 0) ATTNBENCH_ROW(1, a0, lda) ATTNBENCH_ROW(2, a0, 2 * lda)
    ATTNBENCH_ROW(3, a3, 0) ATTNBENCH_ROW(4, a3, lda) ATTNBENCH_ROW(5, a3, 2 * lda)
#undef ATTNBENCH_ROW
  }
#define ATTNBENCH_STORE(i) \
  if constexpr (R > i) _mm256_storeu_ps(c + i * ldc, c##i##0), _mm256_storeu_ps(c + i * ldc + 8, c##i##1);
  ATTNBENCH_STORE(0) ATTNBENCH_STORE(1) ATTNBENCH_STORE(2) ATTNBENCH_STORE(3) ATTNBENCH_STORE(4) ATTNBENCH_STORE(5)
#undef ATTNBENCH_STORE
}

constexpr int64_t KC = 256;  // k per pass: a B panel of KC x 16 floats (16 KiB) stays in L1 beside A's rows

// C (m x 16 panels) (+)= A (m x kk, row stride lda) * packed B, whose panels hold kstride >= kk rows each;
// in passes of KC rows of B (P V with 512 keys: one panel alone would fill L1).
inline void gemm(int64_t m, int64_t panels, int64_t kk, int64_t kstride, const float* a, int64_t lda, const float* b,
                 float* c, int64_t ldc, bool add) {
  for (int64_t k0 = 0; k0 < kk; k0 += KC) {
    const int64_t kc = std::min(KC, kk - k0);
    const bool acc = add || k0 > 0;
    for (int64_t j = 0; j < panels; ++j) {
      const float* panel = b + j * kstride * NR + k0 * NR;
      for (int64_t i = 0; i < m; i += MR) {
        const float* ai = a + i * lda + k0;
        float* ci = c + i * ldc + j * NR;
        switch (std::min(MR, m - i)) {
          case 6: micro<6>(ai, lda, panel, kc, ci, ldc, acc); break;
          case 5: micro<5>(ai, lda, panel, kc, ci, ldc, acc); break;
          case 4: micro<4>(ai, lda, panel, kc, ci, ldc, acc); break;
          case 3: micro<3>(ai, lda, panel, kc, ci, ldc, acc); break;
          case 2: micro<2>(ai, lda, panel, kc, ci, ldc, acc); break;
          default: micro<1>(ai, lda, panel, kc, ci, ldc, acc); break;
        }
      }
    }
  }
}

// Eight consecutive values as float32 (bf16: widened and shifted into the upper half).
inline __m256 load8(const float* src) { return _mm256_loadu_ps(src); }
inline __m256 load8(const uint16_t* src) {
  const __m256i x = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
}

// Rows r[0..7] transposed in place (r[i][j] becomes r[j][i]).
inline void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

// K rows [0, n) as B = K^T: panels of 16 keys, each d rows of 16 floats (keys past n zero). Blocks of
// 8 keys x 8 columns by an in-register transpose (the scalar loop was a few % of the forward), the
// edges one value at a time.
template <typename T>
inline void pack_kt(const T* k, int64_t ld, int64_t n, int64_t d, float* out) {
  for (int64_t j0 = 0; j0 < round_up(n, NR); j0 += NR) {
    float* panel = out + (j0 / NR) * d * NR;
    for (int64_t h = 0; h < NR; h += 8) {
      const int64_t key = j0 + h;
      int64_t p0 = 0;
      if (key + 8 <= n) {
        for (; p0 + 8 <= d; p0 += 8) {
          __m256 r[8];
          for (int i = 0; i < 8; ++i) r[i] = load8(k + (key + i) * ld + p0);
          transpose8(r);
          for (int i = 0; i < 8; ++i) _mm256_storeu_ps(panel + (p0 + i) * NR + h, r[i]);
        }
      }
      for (int64_t c = h; c < h + 8; ++c) {
        const T* row = j0 + c < n ? k + (j0 + c) * ld : nullptr;
        for (int64_t p = p0; p < d; ++p) panel[p * NR + c] = row ? to_float(row[p]) : 0.0f;
      }
    }
  }
}

// V rows [0, n) as B = V: panels of 16 columns of d (columns past d zero), each n rows.
template <typename T>
inline void pack_v(const T* v, int64_t ld, int64_t n, int64_t d, float* out) {
  for (int64_t c0 = 0; c0 < round_up(d, NR); c0 += NR) {
    float* panel = out + (c0 / NR) * n * NR;
    const int64_t w = std::min(NR, d - c0);
    for (int64_t p = 0; p < n; ++p) {
      const T* row = v + p * ld + c0;
      if (w == NR) {
        _mm256_storeu_ps(panel + p * NR, load8(row));
        _mm256_storeu_ps(panel + p * NR + 8, load8(row + 8));
      } else {
        for (int64_t c = 0; c < NR; ++c) panel[p * NR + c] = c < w ? to_float(row[c]) : 0.0f;
      }
    }
  }
}

// Lanes j .. j + 7 of a row that lie in [lo, lim) and that the mask (if any) allows: all ones or zeros.
inline __m256 allowed(int64_t j, int64_t lo, int64_t lim, const uint8_t* mrow, int64_t mstride) {
  if (mrow == nullptr && j >= lo && j + 8 <= lim) return _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  const __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int32_t>(j)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  __m256i ok = _mm256_and_si256(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32(static_cast<int32_t>(lo - 1))),
                                _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(lim)), idx));
  if (mrow != nullptr) {
    alignas(32) int32_t bits[8];
    for (int64_t u = 0; u < 8; ++u) bits[u] = j + u < lim && mrow[(j + u) * mstride] ? -1 : 0;
    ok = _mm256_and_si256(ok, _mm256_load_si256(reinterpret_cast<const __m256i*>(bits)));
  }
  return _mm256_castsi256_ps(ok);
}

// Element (b, h, 0, 0) of a (B, H, T, d) tensor of float32 (T = float) or bf16 (T = uint16_t).
template <typename T, typename Tensor>
inline const T* base(const Tensor& t, int64_t b, int64_t h) {
  return reinterpret_cast<const T*>(t.data_ptr()) + b * t.stride(0) + h * t.stride(1);
}

}  // namespace attnbench_avx2

#endif  // __AVX2__ && __FMA__

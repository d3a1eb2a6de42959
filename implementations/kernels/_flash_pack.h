// What every tiled_fused kernel with its own tile GEMMs (the avx2, avx512f forward and backward) does the
// same way: float32 operands from float32 or bf16 input (bf16 -> float32 is a 16-bit shift), K^T and V
// packed into panels of NR columns for the GEMM kernel, the row-count dispatch to a register block, and
// the mask row of a query. The bf16 kernels pack pairs of bf16 instead (_flash_bf16.h).
// Compiled at the level of the extension that includes it (_cpp_build.ISAS): the AVX2 paths wherever that
// level has AVX2 + FMA.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace attnbench_pack {

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

inline float to_float(float x) { return x; }
inline float to_float(uint16_t bits) {  // bf16 -> float32: the bits are the float's upper half
  const uint32_t u = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Element (b, h, 0, 0) of a (B, H, T, d) tensor of float32 (T = float) or bf16 (T = uint16_t).
template <typename T, typename Tensor>
inline const T* base(const Tensor& t, int64_t b, int64_t h) {
  return reinterpret_cast<const T*>(t.data_ptr()) + b * t.stride(0) + h * t.stride(1);
}

// Row i's mask from key k0 on (uint8, keys `stride(3)` apart), or nullptr without a mask.
template <typename OptionalTensor>
inline const uint8_t* mask_row(const OptionalTensor& mask, int64_t b, int64_t h, int64_t i, int64_t k0) {
  if (!mask.has_value()) return nullptr;
  return mask->template data_ptr<uint8_t>() + b * mask->stride(0) + h * mask->stride(1) + i * mask->stride(2) +
         k0 * mask->stride(3);
}

// f(std::integral_constant<int, R>{}) with R = min(rows, MR) >= 1: the GEMM kernels' register blocks have
// a row count fixed at compile time, the last block of a tile fewer rows.
template <int MR, typename F>
inline void with_rows(int64_t rows, F&& f) {
  if constexpr (MR > 1) {
    if (rows < MR) return with_rows<MR - 1>(rows, f);
  }
  f(std::integral_constant<int, MR>{});
}

#if defined(__AVX2__) && defined(__FMA__)
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
#endif

// K rows [0, n) (row stride ld, d columns) as B = K^T: panels of NR keys, each d rows of NR floats (keys
// past n zero). With AVX2, blocks of 8 keys x 8 columns by an in-register transpose (the scalar loop was
// a few % of the forward); the edges one value at a time.
template <int64_t NR, typename T>
inline void pack_kt(const T* k, int64_t ld, int64_t n, int64_t d, float* out) {
  for (int64_t j0 = 0; j0 < round_up(n, NR); j0 += NR) {
    float* panel = out + (j0 / NR) * d * NR;
    for (int64_t h = 0; h < NR; h += 8) {
      int64_t p0 = 0;
#if defined(__AVX2__) && defined(__FMA__)
      if (j0 + h + 8 <= n) {
        for (; p0 + 8 <= d; p0 += 8) {
          __m256 r[8];
          for (int i = 0; i < 8; ++i) r[i] = load8(k + (j0 + h + i) * ld + p0);
          transpose8(r);
          for (int i = 0; i < 8; ++i) _mm256_storeu_ps(panel + (p0 + i) * NR + h, r[i]);
        }
      }
#endif
      for (int64_t c = h; c < h + 8; ++c) {
        const T* row = j0 + c < n ? k + (j0 + c) * ld : nullptr;
        for (int64_t p = p0; p < d; ++p) panel[p * NR + c] = row ? to_float(row[p]) : 0.0f;
      }
    }
  }
}

// V rows [0, n) as B = V: panels of NR columns of d (columns past d zero), each n rows.
template <int64_t NR, typename T>
inline void pack_v(const T* v, int64_t ld, int64_t n, int64_t d, float* out) {
  for (int64_t c0 = 0; c0 < round_up(d, NR); c0 += NR) {
    float* panel = out + (c0 / NR) * n * NR;
    const int64_t w = std::min(NR, d - c0);
    for (int64_t p = 0; p < n; ++p) {
      const T* row = v + p * ld + c0;
      float* dst = panel + p * NR;
      int64_t c = 0;
#if defined(__AVX2__) && defined(__FMA__)
      for (; c + 8 <= w; c += 8) _mm256_storeu_ps(dst + c, load8(row + c));
#endif
      for (; c < w; ++c) dst[c] = to_float(row[c]);
      std::fill(dst + w, dst + NR, 0.0f);
    }
  }
}

}  // namespace attnbench_pack

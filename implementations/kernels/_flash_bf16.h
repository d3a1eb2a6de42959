// The bf16 operand packing of tiled_fused's bf16 forward (_flash_bf16.cpp) and backward
// (_flash_bf16_backward.cpp), and the AVX-512 GEMM kernel and exponentials of _flash_avx512.h compiled for
// the bf16 units (VDPBF16PS). Operand layouts ("VNNI"): the GEMM C (m x n) += A (m x k) B (k x n) reads A
// as bf16 rows and B packed in panels of 32 columns; within a panel, for each pair of k indices p, 32
// 32-bit words hold (B[2p][c], B[2p+1][c]). Odd sizes are padded with zeros. Only for the avx512_bf16
// extension, compiled whole at that level (_cpp_build.ISAS) and loaded only on a CPU that has it.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "_flash_exp2.h"
#include "_flash_pack.h"

#ifndef __AVX512BF16__
#error "compile at the avx512_bf16 level (implementations/_cpp_build.py: ISAS)"
#endif

#include "_flash_avx512.h"

namespace attnbench_bf16 {

using attnbench_avx512::NR;
using attnbench_pack::round_up;

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

}  // namespace attnbench_bf16

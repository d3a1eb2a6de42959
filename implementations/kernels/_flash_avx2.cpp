// attnbench's FlashAttention-2 forward on AVX2 + FMA with its own tile GEMMs: tiled_fused's avx2 tier,
// for float32 input and for bf16 input converted to float32 as it is loaded (bf16 -> float32 is a
// 16-bit shift), accumulated in float32 either way.
//
// The work item is _flash_forward.h's, as for the AVX-512 kernels, on 8-lane registers: K^T and V of a
// key block are packed once into panels of 16 columns and serve all the item's rows; the GEMM kernel
// keeps a 6 x 16 block of C in 12 registers (the shape BLIS uses on AVX2), A broadcast from memory;
// the softmax of each row is _flash_softmax.h's two passes over the float32 scores with the
// exponential of _flash_exp2.h.
// This file is part of the baseline extension, compiled at the avx2 level where the CPU has it (never
// -march=native: see _cpp_build.py); elsewhere it compiles to a stub the loader never offers, and the
// caller takes the generic MKL path.
#include <torch/extension.h>

#include <cstdint>
#include <vector>

#include "_flash_avx2.h"
#include "_flash_band.h"
#include "_flash_forward.h"
#include "_flash_items.h"
#include "_flash_softmax.h"

#if defined(__AVX2__) && defined(__FMA__)

namespace {

struct Kernel : attnbench_forward::Float32Operands<attnbench_avx2::NR> {
  static void gemm(int64_t m, int64_t panels, int64_t kk, int64_t kstride, const float* a, int64_t lda, const float* b,
                   float* c, int64_t ldc, bool add) {
    attnbench_avx2::gemm(m, panels, kk, kstride, a, lda, b, c, ldc, add);
  }
  static float softmax_row(const float* s, float* prow, int64_t lo, int64_t lim, int64_t need, const uint8_t* mrow,
                           int64_t ms, float c, float& m, float& l) {
    return attnbench_softmax::softmax_row<attnbench_avx2::Lanes>(s, prow, lo, lim, need, mrow, ms, c, m, l);
  }
  static void scale_row(float* a, int64_t n, float f) {
    const __m256 fv = _mm256_set1_ps(f);
    for (int64_t j = 0; j < n; j += 8) _mm256_storeu_ps(a + j, _mm256_mul_ps(_mm256_loadu_ps(a + j), fv));
  }
};

}  // namespace

// q, k, v, out: float32, or bf16 (converted to float32 as it loads); see forward_item in _flash_forward.h.
void forward_avx2(const attnbench_items::ForwardParams& p) {
  attnbench_forward::forward_item<Kernel>("forward_avx2", p);
}

#else  // no AVX2 + FMA in this build: the caller takes the generic path

void forward_avx2(const attnbench_items::ForwardParams&) {
  TORCH_CHECK(false, "forward_avx2: this build has no AVX2 + FMA");
}

#endif

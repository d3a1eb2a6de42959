// attnbench's float32 FlashAttention-2 forward on AVX-512 with its own tile GEMMs (tiled_fused's avx512f
// tier: float32 input, and bf16 input converted to float32 as it is packed where the CPU has no bf16
// units; elsewhere the MKL path of _flash_fused.cpp runs).
//
// Why not MKL, as _flash_fused.cpp: an MKL sgemm call packs both operands on every call, and a work
// item makes two calls per tile (S = Q K^T, O += P V): at T = 4,096, d = 128 the packing and C's
// scaling were 12% of the forward, beside 78% in MKL's kernel. Here K^T and V are packed once per key
// block and serve all the item's rows (_flash_forward.h), and the GEMM kernel (8 rows x 32 columns in
// 16 registers, A broadcast by the FMA itself; _flash_avx512.h) runs straight from the packed panels.
// Scores, P, the running sums and the accumulator are float32.
// An extension of its own, compiled whole at the avx512f level (_cpp_build.ISAS) and loaded only on a CPU
// that has it.
#include <torch/extension.h>

#include <cstdint>
#include <vector>

#include "_flash_band.h"
#include "_flash_exp2.h"
#include "_flash_items.h"
#include "_flash_pack.h"

#ifndef __AVX512F__
#error "compile at the avx512f level (implementations/_cpp_build.py: ISAS)"
#endif

#include "_flash_avx512.h"
#include "_flash_forward.h"
#include "_flash_softmax.h"

namespace {

struct Kernel : attnbench_forward::Float32Operands<attnbench_avx512::NR> {
  static void gemm(int64_t m, int64_t panels, int64_t kk, int64_t kstride, const float* a, int64_t lda, const float* b,
                   float* c, int64_t ldc, bool add) {
    attnbench_avx512::gemm<attnbench_avx512::F32>(m, panels, kk, kstride, a, lda, b, c, ldc, add);
  }
  static float softmax_row(const float* s, float* prow, int64_t lo, int64_t lim, int64_t need, const uint8_t* mrow,
                           int64_t ms, float c, float& m, float& l) {
    return attnbench_softmax::softmax_row<attnbench_avx512::Lanes<float>>(s, prow, lo, lim, need, mrow, ms, c, m, l);
  }
  static void scale_row(float* a, int64_t n, float f) { attnbench_avx512::scale_row(a, n, f); }
};

}  // namespace

// q, k, v, out: float32, or bf16 (converted to float32 as it loads); see forward_item in _flash_forward.h.
void forward_f32(const attnbench_items::ForwardParams& p) {
  attnbench_forward::forward_item<Kernel>("forward_f32", p);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  attnbench_items::def_item(module, "forward_items_f32", &attnbench_items::forward_items<forward_f32>,
                            "Every item of the AVX-512 float32 forward, on torch's threads");
}

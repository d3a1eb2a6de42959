// attnbench's bfloat16 FlashAttention-2 forward on the CPU's bf16 dot-product units (AVX512_BF16).
//
// Both tile GEMMs run on VDPBF16PS (_mm512_dpbf16_ps: pairs of bf16 products summed into float32
// lanes) in the register-blocked kernel of _flash_avx512.h; scores, the softmax, the running max/sum
// and the output accumulator are float32; P is rounded to bf16 for the second GEMM (as FlashAttention
// does on GPUs) and the output is rounded to bf16 once, at the end. The work item is _flash_forward.h's;
// operands are packed as _flash_bf16.h says: for S = Q K^T, B = K^T is packed from K's rows (pack_kt);
// for O += P V, B = V (pack_v). An extension of its own with the bf16 backward, compiled whole at the
// avx512_bf16 level (_cpp_build.ISAS) and loaded only on a CPU that has it.
#include <ATen/native/CPUBlas.h>
#include <torch/extension.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "_flash_band.h"
#include "_flash_bf16.h"
#include "_flash_items.h"
#include "_flash_pack.h"

#include "_flash_forward.h"
#include "_flash_softmax.h"

namespace {

using attnbench_avx512::tail;

struct Kernel {
  static constexpr int64_t NR = attnbench_avx512::NR;
  static constexpr bool float32_input = false;
  using A = uint16_t;
  using Packed = uint32_t;
  using P = uint16_t;
  static int64_t depth(int64_t d) { return (d + 1) / 2; }  // pairs of columns of Q and K
  static int64_t pairs(int64_t n) { return (n + 1) / 2; }

  // The item's Q rows, each zero-padded to an even length.
  static void load_q(const uint16_t* src, int64_t ld, int64_t rows, int64_t d, std::vector<uint16_t>& buf,
                     const uint16_t*& qp, int64_t& lq) {
    const int64_t dp = 2 * depth(d);
    buf.assign(rows * dp, 0);
    for (int64_t r = 0; r < rows; ++r) std::memcpy(&buf[r * dp], src + r * ld, d * sizeof(uint16_t));
    qp = buf.data(), lq = dp;
  }
  static void pack_kt(const uint16_t* k, int64_t ld, int64_t n, int64_t d, uint32_t* out) {
    attnbench_bf16::pack_kt(k, ld, n, d, out);
  }
  static void pack_v(const uint16_t* v, int64_t ld, int64_t n, int64_t d, uint32_t* out) {
    attnbench_bf16::pack_v(v, ld, n, d, out);
  }
  static void gemm(int64_t m, int64_t panels, int64_t kk, int64_t kstride, const uint16_t* a, int64_t lda,
                   const uint32_t* b, float* c, int64_t ldc, bool add) {
    attnbench_avx512::gemm<attnbench_avx512::Bf16>(m, panels, kk, kstride, a, lda, b, c, ldc, add);
  }
  static float softmax_row(const float* s, uint16_t* prow, int64_t lo, int64_t lim, int64_t need, const uint8_t* mrow,
                           int64_t ms, float c, float& m, float& l) {
    return attnbench_softmax::softmax_row<attnbench_avx512::Lanes<uint16_t>>(s, prow, lo, lim, need, mrow, ms, c, m, l);
  }
  static void scale_row(float* a, int64_t n, float f) { attnbench_avx512::scale_row(a, n, f); }
  static void store_row(uint16_t* dst, const float* acc, float inv, int64_t d) {
    for (int64_t j = 0; j < d; j += 16) {
      const __mmask16 t = tail(d - j);
      const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(t, acc + j), _mm512_set1_ps(inv));
      _mm256_mask_storeu_epi16(dst + j, t, (__m256i)_mm512_cvtneps_pbh(x));
    }
  }
};

// The same item with both tile GEMMs on oneDNN's brgemm micro-kernel, as torch exports it
// (at::native::cpublas::brgemm): AMX tiles where the CPU has them (could_pack(bfloat16) is true only then; the
// Python side uses these traits only there). Its operands are row-major VNNI pairs: K^T as [depth][columns]
// (leading dimension: the block's keys rounded up to NR), V as [pairs of keys][dw]; padding is zero, so a
// padded key adds nothing and an odd head dim's last pair is (value, 0). The softmax, its running sums and
// the output are the bf16 kernel's own (float32, AVX-512).
struct Amx : Kernel {
  static constexpr bool ROW_MAJOR = true;
  static inline thread_local int64_t kt_ld = 0;  // the leading dimension pack_kt used: the K^T GEMM's ld_b

  static void pack_kt(const uint16_t* k, int64_t ld, int64_t n, int64_t d, uint32_t* out) {
    const int64_t kp = depth(d), cols = attnbench_pack::round_up(n, NR);
    kt_ld = cols;
    for (int64_t p = 0; p < kp; ++p) {
      uint32_t* row = out + p * cols;
      for (int64_t j = 0; j < cols; ++j) {
        const uint16_t lo = j < n ? k[j * ld + 2 * p] : 0;
        const uint16_t hi = j < n && 2 * p + 1 < d ? k[j * ld + 2 * p + 1] : 0;
        row[j] = attnbench_bf16::pair(lo, hi);
      }
    }
  }
  static void pack_v(const uint16_t* v, int64_t ld, int64_t n, int64_t d, uint32_t* out) {
    const int64_t kp = pairs(n), dw = attnbench_pack::round_up(d, NR);
    for (int64_t p = 0; p < kp; ++p) {
      const uint16_t* r0 = v + 2 * p * ld;
      const bool second = 2 * p + 1 < n;
      uint32_t* row = out + p * dw;
      for (int64_t c = 0; c < dw; ++c) row[c] = c < d ? attnbench_bf16::pair(r0[c], second ? r0[ld + c] : 0) : 0;
    }
  }
  // C (m x NR*panels) (+)= A (m x 2kk, bf16) B (VNNI pairs). add is false for S = Q K^T (B: K^T, ld kt_ld) and
  // true for O += P V (B: V, as wide as C).
  static void gemm(int64_t m, int64_t panels, int64_t kk, int64_t, const uint16_t* a, int64_t lda, const uint32_t* b,
                   float* c, int64_t ldc, bool add) {
    const int64_t n = panels * NR;
    at::native::cpublas::brgemm(m, n, 2 * kk, lda, add ? n : kt_ld, ldc, add, reinterpret_cast<const at::BFloat16*>(a),
                                reinterpret_cast<const at::BFloat16*>(b), c, true);
  }
};

}  // namespace

// One work item (_flash_forward.h): query rows [q0, q1) of head h of batch b. q, k, v: bfloat16 with
// contiguous rows; out: bfloat16 (B, H, Tq, d) contiguous; lse: float32.
void forward_bf16(const attnbench_items::ForwardParams& p) {
  attnbench_forward::forward_item<Kernel>("forward_bf16", p);
}

// The item on oneDNN's brgemm (AMX); the thread's tile state is released after it.
void forward_amx(const attnbench_items::ForwardParams& p) {
  attnbench_forward::forward_item<Amx>("forward_amx", p);
  at::native::cpublas::brgemm_release(true);
}

// Whether oneDNN's brgemm runs bfloat16 on AMX tiles on this CPU (what could_pack answers: the VNNI layout only
// pays there; elsewhere these GEMMs would fall back to torch's own).
bool amx_ready() { return at::native::cpublas::could_pack(at::kBFloat16); }

// A module of its own, built apart from the float32 kernels: a compiler without AVX512_BF16 intrinsics
// fails this build only, and bf16 input then takes the float32 kernels.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  using namespace attnbench_items;  // NOLINT
  def_item(module, "forward_items_bf16", &forward_items<forward_bf16>, "Every item of the bf16 forward, on torch's threads");
  def_item(module, "forward_items_amx", &forward_items<forward_amx>, "Every item of the bf16 forward on oneDNN's brgemm (AMX)");
  module.def("amx_ready", &amx_ready, "whether oneDNN's brgemm runs bfloat16 on AMX tiles here");
  def_item(module, "backward_item_bf16", &backward_item<backward_bf16>, "backward_item on the bf16 units (AVX512_BF16)");
  def_item(module, "backward_item_amx", &backward_item<backward_amx>, "backward_item on oneDNN's brgemm (AMX)");
}

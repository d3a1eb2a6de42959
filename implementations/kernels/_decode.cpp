// tiled_decode's kernel: attention of a few new queries against a long KV cache, read once.
//
// A work item is (batch element b, kv head h, key range [k0, k1)). Its tile holds every query row
// that reads kv head h: the G = H / Hkv query heads of the group times the Tq new queries, R = G * Tq
// rows. For each block of keys, the scores of all R rows are computed against the block's K rows
// (each K row loaded once from memory, reused from L1 by the rows), the online softmax updates the
// running max and sum, and the block's V rows update the R accumulators. An item ends with its
// normalised partial output and log-sum-exp (base 2); ``merge`` combines the items of one (b, h)
// by log-sum-exp (flash-decoding's split-KV), so a long cache is split across threads when there
// are fewer (b, h) than threads.
//
// K and V may be float32, bfloat16 or float16 (the cache's dtype); they are converted to fp32 as they
// are loaded and every sum is fp32. The query arrives as fp32 (the Python side converts its few rows).
// Keys are reached through one row pointer per key, so a contiguous cache (B, Hkv, Tk, d) and a
// paged one (pages (P, Hkv, page, d) and a block table (B, pages per sequence)) run the same loops.
// Threads: ``work`` runs on torch's own threads (at::parallel_for); each pulls items from a shared counter
// (fetch-and-add), so ragged caches balance themselves.
//
// The inner loops (_decode_kernel.h) are templates over the vector width. This file is compiled whole
// once per tier, as an extension of its own (implementations/_cpp_build.py: ISAS; never -march=native):
// at the avx2 level it holds the 256-bit loops, at the avx512f level the 512-bit ones beside them (float32
// caches may run on either: tiled_decode.FLOAT32_512). The Python side loads a tier's build only on a CPU
// that has its features.
#include <torch/extension.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "_flash_exp2.h"

namespace {

constexpr int BLOCK = 64;  // keys per block: the K and V rows of a block stay in L1/L2 while R rows use them
constexpr float NEG_INF = -std::numeric_limits<float>::infinity();
constexpr int KV_F32 = 0, KV_BF16 = 1, KV_F16 = 2, KV_E4M3 = 3, KV_E5M2 = 4;  // the cache's element type
int g_prefetch = 2;              // 0 none, 1 T0, 2 T1, 3 T2, 4 NTA
bool g_sparse = false;           // prefetch one line per 4 KiB page only (the hardware streams the rest)
int g_block = BLOCK;             // keys per block (<= BLOCK)
int64_t g_ahead_bytes = 32768;   // how far ahead of the rows in use each of K and V is prefetched
int64_t g_warm_blocks = 2;       // paged caches: how many blocks past the prefetch distance pages are warmed
bool g_v_in_scores = true;       // the 512-bit loops: V's rows prefetched during the scores pass (else during P V)
int g_isa = 0;                   // 0: AVX2 + FMA + F16C; 1: AVX-512F
bool g_f32_512 = false;          // tier 1: float32 caches on the 512-bit loops too (else on the 256-bit ones)

constexpr bool is_fp8(int kind) { return kind == KV_E4M3 || kind == KV_E5M2; }
constexpr int64_t kv_size(int kind) { return kind == KV_F32 ? 4 : is_fp8(kind) ? 1 : 2; }

struct Problem {
  const float* q;
  int64_t qs[4];  // strides of q (B, H, Tq, d)
  const char* k;
  const char* v;
  int64_t ks[4];  // strides (elements) of k: (B, Hkv, Tk, d), or pages (P, Hkv, page, d)
  int64_t vs[4];
  int kind;       // KV_F32, KV_BF16, KV_F16, KV_E4M3, KV_E5M2
  // FP8 caches: each K and V row's float32 scale, strided as the rows are (B or pages, Hkv, Tk or slot; a
  // stride of 0 broadcasts a per-tensor or per-head scale); null otherwise. v_factor multiplies the output.
  const float* ksc = nullptr;
  const float* vsc = nullptr;
  int64_t kss[3] = {0, 0, 0};
  int64_t vss[3] = {0, 0, 0};
  float v_factor = 1.0f;
  const int32_t* table;  // block table (B, per_seq) or null
  int64_t per_seq;
  int64_t page;  // 0: contiguous
  const int64_t* lens;  // valid keys per batch element
  int64_t tq, g, d, dp;
  float scale_log2;
  bool causal, bottom_right;
  int64_t wl, wr;  // window (left, right); wl < 0: none
};

// One row's cache lines, into the cache level g_prefetch names. A row's bytes need not start on a line.
// Inline assembly, not _mm_prefetch: GCC 12 at -O3 deletes a loop whose only statements are prefetch
// builtins (they have no side effects it must keep), and did so here, silently.
inline void prefetch_row(const char* row, int64_t bytes) {
  if (row == nullptr || g_prefetch == 0) return;
  if (g_sparse) {  // one line per 4 KiB page: the page walk and the start of the hardware's stream, early
    if ((reinterpret_cast<uintptr_t>(row) & 4095) >= static_cast<uintptr_t>(bytes)) return;
    bytes = 1;
  }
  const uintptr_t first = reinterpret_cast<uintptr_t>(row) & ~uintptr_t(63);
  const uintptr_t last = reinterpret_cast<uintptr_t>(row) + static_cast<uintptr_t>(bytes) - 1;
  for (uintptr_t line = first; line <= last; line += 64) {
    const char* at = reinterpret_cast<const char*>(line);
    if (g_prefetch == 1) asm volatile("prefetcht0 (%0)" : : "r"(at));
    else if (g_prefetch == 2) asm volatile("prefetcht1 (%0)" : : "r"(at));
    else if (g_prefetch == 3) asm volatile("prefetcht2 (%0)" : : "r"(at));
    else asm volatile("prefetchnta (%0)" : : "r"(at));
  }
}

// Shuffled pages put every page of a sequence in a different place, each a TLB miss whose page walk is not
// cached (a contiguous cache's walks read neighbouring entries); one line per 4 KiB of the pages that keys
// [from, to) live on is prefetched a few blocks early so that the walks are done before the rows are needed.
inline void warm_pages(const Problem& P, int64_t b, int64_t h, int64_t from, int64_t to) {
  const int64_t size = kv_size(P.kind);
  const int64_t bytes = P.page * P.ks[2] * size;
  for (int64_t index = from / P.page; index * P.page < to; ++index) {
    const int64_t slot = P.table[b * P.per_seq + index];
    const char* kpage = P.k + (slot * P.ks[0] + h * P.ks[1]) * size;
    const char* vpage = P.v + (slot * P.vs[0] + h * P.vs[1]) * size;
    for (int64_t off = 0; off < bytes; off += 4096) {
      asm volatile("prefetcht2 (%0)" : : "r"(kpage + off));
      asm volatile("prefetcht2 (%0)" : : "r"(vpage + off));
    }
  }
}

// Keys [lo, hi) query t of element b may attend (hi <= lo: none).
inline void row_range(const Problem& P, int64_t len, int64_t t, int64_t* lo, int64_t* hi) {
  const int64_t i = t + (P.bottom_right ? len - P.tq : 0);  // the query's position in key coordinates
  int64_t a = 0, z = len;
  if (P.causal) z = std::min(z, i + 1);
  if (P.wl >= 0) {
    a = std::max<int64_t>(a, i - P.wl);
    z = std::min(z, i + P.wr + 1);
  }
  *lo = a;
  *hi = z;
}

struct Scratch {
  std::vector<float> q, s, acc, m, l;
  std::vector<int64_t> lo, hi;
  std::vector<const char*> kp, vp, ka, va;  // rows of this block, and the rows `ahead` keys on
  std::vector<float> ksc, vsc;               // FP8 caches: the scales of this block's K and V rows
  void prepare(int64_t rows, int64_t dp) {
    q.assign(rows * dp, 0.0f);
    acc.assign(rows * dp, 0.0f);
    s.resize(rows * BLOCK);
    m.assign(rows, NEG_INF);
    l.assign(rows, 0.0f);
    lo.resize(rows);
    hi.resize(rows);
    for (auto* p : {&kp, &vp, &ka, &va}) p->resize(BLOCK);
    ksc.resize(BLOCK);
    vsc.resize(BLOCK);
  }
};

struct Bounds {
  int64_t k0, k1;          // the item's keys some row may attend
  int64_t all_lo, all_hi;  // keys every row may attend: blocks inside need no mask
};

Bounds item_bounds(const Problem& P, int64_t b, int64_t k0, int64_t k1, Scratch& w) {
  const int64_t len = P.lens[b];
  Bounds out{k0, k1, k1, k0};
  int64_t min_lo = k1, max_hi = k0;
  for (int64_t gi = 0; gi < P.g; ++gi)
    for (int64_t t = 0; t < P.tq; ++t) {
      const int64_t r = gi * P.tq + t;
      row_range(P, len, t, &w.lo[r], &w.hi[r]);
      if (r == 0) {
        out.all_lo = w.lo[r];
        out.all_hi = w.hi[r];
      }
      out.all_lo = std::max(out.all_lo, w.lo[r]);
      out.all_hi = std::min(out.all_hi, w.hi[r]);
      min_lo = std::min(min_lo, w.lo[r]);
      max_hi = std::max(max_hi, w.hi[r]);
    }
  out.k0 = std::max(k0, min_lo);
  out.k1 = std::min(k1, max_hi);
  return out;
}

// Row pointers of keys kb .. (at most one block, before k1), paged or not; returns how many.
// FP8 caches: the scales of keys [kb, kb + nk) of (b, h), found as fill_rows finds their rows (a paged cache's
// pages walked: one division per block, not one per key).
void fill_scales(const Problem& P, int64_t b, int64_t h, int64_t kb, int64_t nk, float* ks, float* vs) {
  int64_t index = P.page ? kb / P.page : 0, slot = P.page ? kb % P.page : kb;
  for (int64_t j = 0; j < nk; ++j, ++slot) {
    if (P.page && slot == P.page) {
      slot = 0;
      ++index;
    }
    const int64_t first = P.page ? P.table[b * P.per_seq + index] : b;
    ks[j] = P.ksc[first * P.kss[0] + h * P.kss[1] + slot * P.kss[2]];
    vs[j] = P.vsc[first * P.vss[0] + h * P.vss[1] + slot * P.vss[2]];
  }
}

int64_t fill_rows(const Problem& P, int64_t b, int64_t h, int64_t kb, int64_t k1, const char** kp, const char** vp) {
  const int64_t nk = std::min<int64_t>(g_block, k1 - kb), size = kv_size(P.kind);
  if (P.page) {  // walk the pages: one division per block, not two per key
    int64_t index = kb / P.page, slot = kb % P.page;
    auto page_of = [&](const char* base, const int64_t* st) {
      return base + (P.table[b * P.per_seq + index] * st[0] + h * st[1]) * size;
    };
    const char* kpage = page_of(P.k, P.ks);
    const char* vpage = page_of(P.v, P.vs);
    for (int64_t j = 0; j < nk; ++j) {
      if (slot == P.page) {
        slot = 0;
        ++index;
        kpage = page_of(P.k, P.ks);
        vpage = page_of(P.v, P.vs);
      }
      kp[j] = kpage + slot * P.ks[2] * size;
      vp[j] = vpage + slot * P.vs[2] * size;
      ++slot;
    }
  } else {
    const char* krow = P.k + (b * P.ks[0] + h * P.ks[1] + kb * P.ks[2]) * size;
    const char* vrow = P.v + (b * P.vs[0] + h * P.vs[1] + kb * P.vs[2]) * size;
    for (int64_t j = 0; j < nk; ++j) {
      kp[j] = krow + j * P.ks[2] * size;
      vp[j] = vrow + j * P.vs[2] * size;
    }
  }
  return nk;
}

// The largest of s[0 .. n), eight lanes at a time: a scalar loop is one chain of dependent max operations,
// a few cycles each, which for 64 keys and 4 rows cost as much as a tenth of a bf16 block's arithmetic.
inline float row_max(const float* s, int64_t n) {
  __m256 m8 = _mm256_set1_ps(NEG_INF);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) m8 = _mm256_max_ps(m8, _mm256_loadu_ps(s + j));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  float m = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
  for (; j < n; ++j) m = std::max(m, s[j]);
  return m;
}

// The online softmax over one block's scores (base 2): mask, new running max, exponentials in place,
// the running sum, and the accumulators rescaled where the max moved.
void softmax_block(const Problem& P, Scratch& w, int64_t kb, int64_t nk, int64_t rows, const Bounds& bounds) {
  const int64_t dp = P.dp;
  const bool masked = !(kb >= bounds.all_lo && kb + nk <= bounds.all_hi);
  for (int64_t r = 0; r < rows; ++r) {
    float* s = w.s.data() + r * BLOCK;
    if (masked) {
      for (int64_t j = 0; j < nk; ++j)
        if (kb + j < w.lo[r] || kb + j >= w.hi[r]) s[j] = NEG_INF;
    }
    const float mb = row_max(s, nk);
    const float m_new = std::max(w.m[r], mb);
    if (m_new == NEG_INF) {  // no allowed key yet: nothing to add
      for (int64_t j = 0; j < nk; ++j) s[j] = 0.0f;
      continue;
    }
    const float alpha = w.m[r] == m_new ? 1.0f : exp2_nonpositive(w.m[r] - m_new);  // 0 when m was -inf
    int64_t j = 0;
    const __m256 mv = _mm256_set1_ps(m_new);
    __m256 sv = _mm256_setzero_ps();
    for (; j + 8 <= nk; j += 8) {
      const __m256 e = exp2_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv));
      _mm256_storeu_ps(s + j, e);
      sv = _mm256_add_ps(sv, e);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, sv);
    float sum = ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
    for (; j < nk; ++j) {
      s[j] = exp2_nonpositive(s[j] - m_new);
      sum += s[j];
    }
    if (alpha != 1.0f) {
      float* a = w.acc.data() + r * dp;
      for (int64_t c = 0; c < dp; ++c) a[c] *= alpha;
    }
    w.l[r] = w.l[r] * alpha + sum;
    w.m[r] = m_new;
  }
}

}  // namespace

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "compile at the avx2 level or above (implementations/_cpp_build.py: ISAS)"
#endif

// The inner loops, written once over the vector width (_decode_kernel.h): run<Vec8> (256-bit) in every build,
// run<Vec16> (512-bit) in the build at the avx512f level. Internal linkage, so calls between them are direct
// (no PLT) and the compiler inlines what it sees fit.
#include "_decode_kernel.h"

namespace {

const char* const ISA_NAMES[] = {"avx2", "avx512"};

int kind_of(const torch::Tensor& x) {
  switch (x.scalar_type()) {
    case torch::kFloat32: return KV_F32;
    case torch::kBFloat16: return KV_BF16;
    case torch::kFloat16: return KV_F16;
    case torch::kFloat8_e4m3fn: return KV_E4M3;
    case torch::kFloat8_e5m2: return KV_E5M2;
    default: TORCH_CHECK(false, "tiled_decode's kernel takes K and V in float32, bfloat16, float16, float8_e4m3fn or "
                                "float8_e5m2");
  }
  return KV_F32;
}

Problem problem(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                const c10::optional<torch::Tensor>& table, const torch::Tensor& lens, int64_t tq, int64_t g,
                double scale_log2, bool causal, bool bottom_right, int64_t wl, int64_t wr) {
  TORCH_CHECK(q.scalar_type() == torch::kFloat32, "tiled_decode's kernel takes q in float32");
  TORCH_CHECK(k.scalar_type() == v.scalar_type(), "k and v need one dtype");
  TORCH_CHECK(k.stride(3) == 1 && v.stride(3) == 1, "k and v need contiguous rows");
  Problem P;
  P.kind = kind_of(k);
  P.q = q.data_ptr<float>();
  P.k = static_cast<const char*>(k.data_ptr());
  P.v = static_cast<const char*>(v.data_ptr());
  for (int i = 0; i < 4; ++i) {
    P.qs[i] = q.stride(i);
    P.ks[i] = k.stride(i);
    P.vs[i] = v.stride(i);
  }
  P.table = table.has_value() ? table->data_ptr<int32_t>() : nullptr;
  P.per_seq = table.has_value() ? table->size(1) : 0;
  P.page = table.has_value() ? k.size(2) : 0;
  P.lens = lens.data_ptr<int64_t>();
  P.tq = tq;
  P.g = g;
  P.d = q.size(3);
  P.dp = (P.d + 31) & ~int64_t(31);  // rows padded to whole chunks of either instruction set
  P.scale_log2 = static_cast<float>(scale_log2);
  P.causal = causal;
  P.bottom_right = bottom_right;
  P.wl = wl;
  P.wr = wr;
  return P;
}

// An FP8 cache's scales: float32, one per row of `x` (its shape without d), any strides (0 broadcasts).
void set_scales(Problem& P, const c10::optional<torch::Tensor>& ks, const c10::optional<torch::Tensor>& vs,
                const torch::Tensor& k, double v_factor) {
  TORCH_CHECK(is_fp8(P.kind) == (ks.has_value() && vs.has_value()), "an FP8 cache, and only one, takes k and v scales");
  if (!is_fp8(P.kind)) return;
  for (const auto* x : {&*ks, &*vs}) {
    TORCH_CHECK(x->scalar_type() == torch::kFloat32 && x->dim() == 3, "scales: float32, one per K and V row (3 dims)");
    for (int i = 0; i < 3; ++i) TORCH_CHECK(x->size(i) == k.size(i), "scales: one per K and V row");
  }
  P.ksc = ks->data_ptr<float>();
  P.vsc = vs->data_ptr<float>();
  for (int i = 0; i < 3; ++i) {
    P.kss[i] = ks->stride(i);
    P.vss[i] = vs->stride(i);
  }
  P.v_factor = static_cast<float>(v_factor);
}

#ifdef __AVX512F__
constexpr bool WIDE_BUILD = true;  // this build holds the 512-bit loops
#else
constexpr bool WIDE_BUILD = false;
#endif

}  // namespace

// Items (n, 4) = (b, h, k0, k1): each (b, h)'s attended keys cut into pieces of at most ``chunk``,
// the longest first. Rows with no attended key get no item (merge writes zeros).
torch::Tensor plan(torch::Tensor lens, int64_t hkv, int64_t tq, bool causal, bool bottom_right, int64_t wl,
                   int64_t wr, int64_t chunk) {
  const int64_t* n = lens.data_ptr<int64_t>();
  std::vector<std::array<int64_t, 4>> items;
  for (int64_t b = 0; b < lens.size(0); ++b) {
    const int64_t off = bottom_right ? n[b] - tq : 0;
    int64_t lo = 0, hi = n[b];
    if (causal) hi = std::min(hi, std::max<int64_t>(0, tq - 1 + off + 1));
    if (wl >= 0) {
      lo = std::max<int64_t>(lo, off - wl);
      hi = std::min(hi, tq - 1 + off + wr + 1);
    }
    if (hi <= lo) continue;
    const int64_t pieces = (hi - lo + chunk - 1) / chunk, size = (hi - lo + pieces - 1) / pieces;
    for (int64_t h = 0; h < hkv; ++h)
      for (int64_t k0 = lo; k0 < hi; k0 += size) items.push_back({b, h, k0, std::min(hi, k0 + size)});
  }
  std::stable_sort(items.begin(), items.end(), [](const auto& x, const auto& y) { return x[3] - x[2] > y[3] - y[2]; });
  auto out = torch::empty({static_cast<int64_t>(items.size()), 4}, torch::kInt64);
  auto* o = out.data_ptr<int64_t>();
  for (size_t i = 0; i < items.size(); ++i)
    for (int c = 0; c < 4; ++c) o[4 * i + c] = items[i][c];
  return out;
}

// Every item, on torch's own threads (at::parallel_for: the OpenMP team that torch's other operations use, so
// the step never competes with that team's threads while they spin after the previous operation); each
// thread pulls items from a shared counter until none is left. Partial outputs (n, R, d) and LSE (n, R).
void work(torch::Tensor q, torch::Tensor k, torch::Tensor v, c10::optional<torch::Tensor> table, torch::Tensor lens,
          torch::Tensor items, torch::Tensor part_o, torch::Tensor part_lse, int64_t tq, int64_t g, double scale_log2,
          bool causal, bool bottom_right, int64_t wl, int64_t wr, c10::optional<torch::Tensor> k_scale,
          c10::optional<torch::Tensor> v_scale, double v_factor) {
  Problem P = problem(q, k, v, table, lens, tq, g, scale_log2, causal, bottom_right, wl, wr);
  set_scales(P, k_scale, v_scale, k, v_factor);
  const int64_t n = items.size(0), rows = g * tq;
  const int64_t* it = items.data_ptr<int64_t>();
  float* po = part_o.data_ptr<float>();
  float* pl = part_lse.data_ptr<float>();
  [[maybe_unused]] const bool wide = g_isa == 1 && (P.kind != KV_F32 || g_f32_512);
  int64_t next = 0;
  const int64_t workers = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), n));
  at::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
    Scratch w;
    for (;;) {
      const int64_t i = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED);
      if (i >= n) break;
      float* o = po + i * rows * P.d;
#ifdef __AVX512F__
      if (wide) {
        run<Vec16>(P, it[4 * i], it[4 * i + 1], it[4 * i + 2], it[4 * i + 3], o, pl + i * rows, w);
        continue;
      }
#endif
      run<Vec8>(P, it[4 * i], it[4 * i + 1], it[4 * i + 2], it[4 * i + 3], o, pl + i * rows, w);
    }
  });
}

// out (B, H, Tq, d): per (b, h), the items' partial outputs weighted by 2^(lse - max lse) / sum.
void merge(torch::Tensor items, torch::Tensor part_o, torch::Tensor part_lse, torch::Tensor out, int64_t g) {
  const int64_t n = items.size(0), hq = out.size(1), tq = out.size(2), d = out.size(3), hkv = hq / g;
  const int64_t rows = g * tq;
  const int64_t* it = items.data_ptr<int64_t>();
  const float* po = part_o.data_ptr<float>();
  const float* pl = part_lse.data_ptr<float>();
  float* o = out.data_ptr<float>();
  out.zero_();
  std::vector<std::vector<int64_t>> of(out.size(0) * hkv);
  for (int64_t i = 0; i < n; ++i) of[it[4 * i] * hkv + it[4 * i + 1]].push_back(i);
  std::vector<float> weight;
  for (int64_t bh = 0; bh < static_cast<int64_t>(of.size()); ++bh) {
    const auto& parts = of[bh];
    if (parts.empty()) continue;
    const int64_t b = bh / hkv, h = bh % hkv;
    for (int64_t r = 0; r < rows; ++r) {
      float top = NEG_INF;
      for (int64_t i : parts) top = std::max(top, pl[i * rows + r]);
      if (top == NEG_INF) continue;  // no key for this row in any piece: zeros
      weight.assign(parts.size(), 0.0f);
      float total = 0.0f;
      for (size_t s = 0; s < parts.size(); ++s) total += weight[s] = exp2_nonpositive(pl[parts[s] * rows + r] - top);
      float* dst = o + ((b * hq + h * g + r / tq) * tq + r % tq) * d;
      for (size_t s = 0; s < parts.size(); ++s) {
        const float wgt = weight[s] / total;
        const float* src = po + (parts[s] * rows + r) * d;
        for (int64_t c = 0; c < d; ++c) dst[c] += wgt * src[c];
      }
    }
  }
}

// The tiers this build holds, lowest first.
std::vector<std::string> tiers() {
  std::vector<std::string> out{ISA_NAMES[0]};
  if (WIDE_BUILD) out.push_back(ISA_NAMES[1]);
  return out;
}

std::string tune(const std::string& isa, int64_t prefetch, int64_t block, int64_t ahead_bytes, int64_t warm_blocks,
                 bool v_in_scores, bool sparse, bool f32_512) {
  TORCH_CHECK(isa == "avx2" || isa == "avx512", "isa must be avx2 or avx512, not ", isa);
  TORCH_CHECK(isa != "avx512" || WIDE_BUILD, "this build holds no 512-bit loops (the avx2 tier's)");
  g_isa = isa == "avx512" ? 1 : 0;
  g_warm_blocks = std::max<int64_t>(warm_blocks, 0);
  g_ahead_bytes = std::max<int64_t>(ahead_bytes, 0);
  g_prefetch = static_cast<int>(prefetch);
  g_block = static_cast<int>(std::min<int64_t>(std::max<int64_t>(block, 1), BLOCK));
  g_v_in_scores = v_in_scores;
  g_sparse = sparse;
  g_f32_512 = f32_512;
  return ISA_NAMES[g_isa];
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.def("tiers", &tiers, "the instruction-set tiers this build holds (avx2, avx512), lowest first");
  module.def("tune", &tune, "tier (avx2 or avx512), prefetch hint (0 none, 1 T0, 2 T1, 3 T2), keys per block (<= 64), "
             "prefetch distance in bytes, blocks past it to warm a paged cache's pages, whether the 512-bit loops "
             "prefetch V during the scores pass, whether only one line per 4 KiB is prefetched, whether the avx512 tier runs float32 "
             "caches on its 512-bit loops (else the 256-bit ones); returns the tier in use");
  module.def("plan", &plan, "work items (b, h, k0, k1) of a decode call");
  module.def("work", &work, "every item, on torch's threads; FP8 caches with their rows' scales and the output's factor",
             pybind11::arg("q"), pybind11::arg("k"), pybind11::arg("v"), pybind11::arg("table"), pybind11::arg("lens"),
             pybind11::arg("items"), pybind11::arg("part_o"), pybind11::arg("part_lse"), pybind11::arg("tq"),
             pybind11::arg("g"), pybind11::arg("scale_log2"), pybind11::arg("causal"), pybind11::arg("bottom_right"),
             pybind11::arg("wl"), pybind11::arg("wr"), pybind11::arg("k_scale") = pybind11::none(),
             pybind11::arg("v_scale") = pybind11::none(), pybind11::arg("v_factor") = 1.0,
             pybind11::call_guard<pybind11::gil_scoped_release>());
  module.def("merge", &merge, "combine the items of each (b, h) by log-sum-exp",
             pybind11::call_guard<pybind11::gil_scoped_release>());
}

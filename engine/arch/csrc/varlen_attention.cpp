// Packed variable-length self-attention on the CPU in bfloat16: AMX tiles where the CPU has them, else
// AVX512-BF16 dot products.
//
// One (sequence, head) pair is one unit of work: keys and values are laid out once for the dot-product
// instructions (pairs along the reduced dimension), then blocks of query rows get their scores, a softmax in
// float32 and their outputs. No padding between sequences and no mask: a sequence sees only itself. Units run
// on torch's intra-op threads, longest first, taken from a shared counter so long and short ones balance.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <c10/util/BFloat16.h>
#include <immintrin.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {

constexpr int kRows = 4;  // query rows per block

// 2^t for finite t <= 0, float32: t = n + f with f = t - round(t) in [-0.5, 0.5] (one vreduceps), a degree-3
// polynomial on f and scalef for n. Relative error under 1e-4, far inside bfloat16's rounding (4e-3), which
// every probability goes through next; a very negative t gives 0.
inline __m512 exp2_neg(__m512 t) {
  const __m512 f = _mm512_reduce_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 p = _mm512_set1_ps(5.517166108e-02f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.426111549e-01f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.932609677e-01f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.999280572e-01f));
  return _mm512_scalef_ps(p, _mm512_sub_ps(t, f));
}

inline __m512i bcast_pair(const uint16_t* p) {  // two bf16 values repeated in every 32-bit lane
  uint32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm512_set1_epi32(static_cast<int>(v));
}

inline __m512 dot(__m512 acc, __m512i a, __m512i b) {
  return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(a), reinterpret_cast<__m512bh>(b));
}

struct Unit {
  int64_t start, length, keys, head;
};

struct Buffers {
  std::vector<uint16_t> kt;      // [D/2][KP][2] keys, pairs along D
  std::vector<uint16_t> vp;      // [KP/2][D][2] values, pairs along keys
  std::vector<float> scores;     // [kRows][KP]
  std::vector<uint16_t> probs;   // [kRows][KP] bf16, unnormalised
  std::vector<uint16_t> queries; // AMX: the last block's queries, [16][D] zero-padded
  std::vector<float> outputs;    // AMX: [16][D]
};

// Scores of R query rows against keys [j0, j0 + 16*NV): acc[r][c] over the D/2 pairs.
template <int R, int NV>
inline void score_block(const uint16_t* const* qrows, const uint16_t* kt, int64_t kp, int64_t half_d, int64_t j0,
                        float* scores) {
  __m512 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NV; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int64_t p = 0; p < half_d; ++p) {
    const uint16_t* krow = kt + (p * kp + j0) * 2;
    __m512i kv[NV];
    for (int c = 0; c < NV; ++c) kv[c] = _mm512_loadu_si512(krow + 32 * c);
    for (int r = 0; r < R; ++r) {
      __m512i qb = bcast_pair(qrows[r] + 2 * p);
      for (int c = 0; c < NV; ++c) acc[r][c] = dot(acc[r][c], kv[c], qb);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NV; ++c) _mm512_storeu_ps(scores + r * kp + j0 + 16 * c, acc[r][c]);
}

template <int R>
inline void scores_rows(const uint16_t* const* qrows, const uint16_t* kt, int64_t kp, int64_t half_d, float* scores) {
  int64_t j0 = 0;
  for (; j0 + 64 <= kp; j0 += 64) score_block<R, 4>(qrows, kt, kp, half_d, j0, scores);
  for (; j0 < kp; j0 += 16) score_block<R, 1>(qrows, kt, kp, half_d, j0, scores);
}

inline __mmask16 live_lanes(int64_t j, int64_t n_keys) {  // lanes of keys [j, j+16) below n_keys
  if (j + 16 <= n_keys) return 0xFFFF;
  return j < n_keys ? static_cast<__mmask16>((1u << (n_keys - j)) - 1) : 0;
}

// Softmax numerators exp(scale * (s - max)) of one row of raw scores as bf16, keys past n_keys 0 (up to kp,
// a multiple of 16); returns their sum. Whole vectors of live keys run unmasked, two at a time (two max and
// sum chains, one conversion to bf16 for 32 values); only the vectors at and past n_keys are masked.
inline float softmax_row(const float* s, int64_t n_keys, int64_t kp, float scale, uint16_t* out) {
  const int64_t whole = n_keys / 32 * 32;  // keys [0, whole) in unmasked pairs of vectors
  __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0;
  for (int64_t j = 0; j < whole; j += 32) {
    m0 = _mm512_max_ps(m0, _mm512_loadu_ps(s + j));
    m1 = _mm512_max_ps(m1, _mm512_loadu_ps(s + j + 16));
  }
  for (int64_t j = whole; j < n_keys; j += 16) m0 = _mm512_mask_max_ps(m0, live_lanes(j, n_keys), m0, _mm512_loadu_ps(s + j));
  const float c = scale * 1.44269504088896341f;  // scale and log2(e) in one factor
  const __m512 cv = _mm512_set1_ps(c), shift = _mm512_set1_ps(-c * _mm512_reduce_max_ps(_mm512_max_ps(m0, m1)));
  __m512 sum0 = _mm512_setzero_ps(), sum1 = sum0;
  int64_t j = 0;
  for (; j < whole; j += 32) {
    const __m512 e0 = exp2_neg(_mm512_fmadd_ps(_mm512_loadu_ps(s + j), cv, shift));
    const __m512 e1 = exp2_neg(_mm512_fmadd_ps(_mm512_loadu_ps(s + j + 16), cv, shift));
    sum0 = _mm512_add_ps(sum0, e0);
    sum1 = _mm512_add_ps(sum1, e1);
    _mm512_storeu_si512(out + j, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(e1, e0)));  // e0 low, e1 high
  }
  for (; j < kp; j += 16) {  // the vector holding the last keys, then zeros
    const __mmask16 live = live_lanes(j, n_keys);
    const __m512 e = _mm512_maskz_mov_ps(live, exp2_neg(_mm512_fmadd_ps(_mm512_loadu_ps(s + j), cv, shift)));
    sum0 = _mm512_add_ps(sum0, e);
    __m256bh b = _mm512_cvtneps_pbh(e);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j), reinterpret_cast<__m256i&>(b));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(sum0, sum1));
}

// Outputs of R rows for head columns [d0, d0 + 16*NC): sum over key pairs of probs x values.
template <int R, int NC>
inline void output_block(const uint16_t* probs, int64_t kp, const uint16_t* vp, int64_t d, int64_t d0,
                         const float* inv, uint16_t* const* orows) {
  __m512 acc[R][NC];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int64_t jp = 0; jp < kp / 2; ++jp) {
    const uint16_t* vrow = vp + (jp * d + d0) * 2;
    __m512i vv[NC];
    for (int c = 0; c < NC; ++c) vv[c] = _mm512_loadu_si512(vrow + 32 * c);
    for (int r = 0; r < R; ++r) {
      __m512i pb = bcast_pair(probs + r * kp + 2 * jp);
      for (int c = 0; c < NC; ++c) acc[r][c] = dot(acc[r][c], vv[c], pb);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NC; ++c) {
      __m256bh b = _mm512_cvtneps_pbh(_mm512_mul_ps(acc[r][c], _mm512_set1_ps(inv[r])));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(orows[r] + d0 + 16 * c), reinterpret_cast<__m256i&>(b));
    }
}

template <int R>
inline void output_rows(const uint16_t* probs, int64_t kp, const uint16_t* vp, int64_t d, const float* inv,
                        uint16_t* const* orows) {
  int64_t d0 = 0;
  for (; d0 + 64 <= d; d0 += 64) output_block<R, 4>(probs, kp, vp, d, d0, inv, orows);
  for (; d0 < d; d0 += 32) output_block<R, 2>(probs, kp, vp, d, d0, inv, orows);
}

template <int R>
void rows(const Unit& u, int64_t i0, const uint16_t* q, uint16_t* o, int64_t row_stride, int64_t d, int64_t kp,
          float scale, Buffers& b) {
  const uint16_t* qrows[R];
  uint16_t* orows[R];
  float inv[R];
  for (int r = 0; r < R; ++r) {
    qrows[r] = q + (u.start + i0 + r) * row_stride + u.head * d;
    orows[r] = o + (u.start + i0 + r) * row_stride + u.head * d;
  }
  scores_rows<R>(qrows, b.kt.data(), kp, d / 2, b.scores.data());
  for (int r = 0; r < R; ++r)
    inv[r] = 1.0f / softmax_row(b.scores.data() + r * kp, u.keys, kp, scale, b.probs.data() + r * kp);
  output_rows<R>(b.probs.data(), kp, b.vp.data(), d, inv, orows);
}

// 16 rows of 16 32-bit values transposed in registers (r[i] lane j -> r[j] lane i): 32-bit and 64-bit unpacks
// make 4x4 blocks inside each 128-bit lane, two rounds of 128-bit shuffles move the blocks.
inline void transpose16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int m = 0; m < 16; m += 4) {  // u[m + c], lane L: column 4L + c of rows m .. m+3
    u[m] = _mm512_unpacklo_epi64(t[m], t[m + 2]);
    u[m + 1] = _mm512_unpackhi_epi64(t[m], t[m + 2]);
    u[m + 2] = _mm512_unpacklo_epi64(t[m + 1], t[m + 3]);
    u[m + 3] = _mm512_unpackhi_epi64(t[m + 1], t[m + 3]);
  }
  for (int c = 0; c < 4; ++c) {  // row 4L + c of the result: lane L of u[c], u[4 + c], u[8 + c], u[12 + c]
    const __m512i v0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44), v1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xEE);
    const __m512i v2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44);
    const __m512i v3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xEE);
    r[c] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    r[4 + c] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
    r[8 + c] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
  }
}

// Keys as [D/2][kp][2] and values as [kp/2][D][2] (pairs along the reduced dimension), zero past the keys;
// the score and probability buffers sized for blocks of `block_rows` queries.
void pack(const Unit& u, const uint16_t* k, const uint16_t* v, int64_t row_stride, int64_t d, int64_t kp,
          int64_t block_rows, Buffers& b) {
  b.scores.resize(block_rows * kp);
  b.probs.resize(block_rows * kp);
  b.kt.assign(d * kp, 0);
  b.vp.assign(kp * d, 0);
  uint32_t* kt32 = reinterpret_cast<uint32_t*>(b.kt.data());
  const __m512i zero = _mm512_setzero_si512();
  for (int64_t j0 = 0; j0 < u.keys; j0 += 16) {  // 16 keys x 16 pairs a block, transposed in registers
    for (int64_t p0 = 0; p0 < d / 2; p0 += 16) {
      __m512i r[16];
      for (int i = 0; i < 16; ++i)
        r[i] = j0 + i < u.keys ? _mm512_loadu_si512(k + (u.start + j0 + i) * row_stride + u.head * d + 2 * p0) : zero;
      transpose16(r);  // r[p]: pair p0 + p of keys j0 .. j0 + 15
      for (int p = 0; p < 16; ++p) _mm512_storeu_si512(kt32 + (p0 + p) * kp + j0, r[p]);
    }
  }
  // values: rows j and j+1 interleaved element by element, 16 dims (32 values) a store
  const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37,
                                      5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
  for (int64_t j = 0; j < u.keys; j += 2) {
    const uint16_t* v0 = v + (u.start + j) * row_stride + u.head * d;
    const uint16_t* v1 = v0 + row_stride;
    uint16_t* dst = b.vp.data() + (j / 2) * d * 2;
    for (int64_t c = 0; c < d; c += 32) {
      __m512i a = _mm512_loadu_si512(v0 + c), n = j + 1 < u.keys ? _mm512_loadu_si512(v1 + c) : zero;
      _mm512_storeu_si512(dst + 2 * c, _mm512_permutex2var_epi16(a, lo, n));
      _mm512_storeu_si512(dst + 2 * c + 32, _mm512_permutex2var_epi16(a, hi, n));
    }
  }
}

void attend(const Unit& u, const uint16_t* q, const uint16_t* k, const uint16_t* v, uint16_t* o,
            int64_t row_stride, int64_t d, float scale, Buffers& b) {
  const int64_t kp = (u.keys + 15) / 16 * 16;  // keys padded to whole vectors; padding is zero
  pack(u, k, v, row_stride, d, kp, kRows, b);
  int64_t i0 = 0;
  for (; i0 + kRows <= u.length; i0 += kRows) rows<kRows>(u, i0, q, o, row_stride, d, kp, scale, b);
  for (; i0 < u.length; ++i0) rows<1>(u, i0, q, o, row_stride, d, kp, scale, b);
}


// ---- AMX: 16x16 score and output tiles, 16 rows x 64 bytes each ------------------------------------------

constexpr int kTile = 16;  // rows of a tile; a row is 64 bytes (32 bf16 or 16 float32)

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Runs on one thread: keeps the caller's tile configuration (oneDNN's) and puts it back when done.
struct TileScope {
  alignas(64) uint8_t saved[64];
  TileScope() {
    _tile_storeconfig(saved);
    TileConfig cfg;
    for (int t = 0; t < 8; ++t) cfg.colsb[t] = 64, cfg.rows[t] = kTile;
    _tile_loadconfig(&cfg);
  }
  ~TileScope() {
    if (saved[0] == 0)
      _tile_release();
    else
      _tile_loadconfig(saved);
  }
};

// Scores of 16 query rows (tiles 0..nc-1 hold their head dims) against keys [j0, j0+32), into scores.
template <int NC>
inline void amx_scores(const uint16_t* kt, int64_t kp, int64_t j0, float* scores) {
  const int64_t stride = kp * 4;  // bytes between rows of kt: one row holds kp key pairs
  _tile_zero(6);
  _tile_zero(7);
#define SHOAL_QK(c)                                                   \
  if (NC > c) {                                                       \
    _tile_loadd(4, kt + ((16 * c) * kp + j0) * 2, stride);            \
    _tile_loadd(5, kt + ((16 * c) * kp + j0 + 16) * 2, stride);       \
    _tile_dpbf16ps(6, c, 4);                                          \
    _tile_dpbf16ps(7, c, 5);                                          \
  }
  SHOAL_QK(0) SHOAL_QK(1) SHOAL_QK(2) SHOAL_QK(3)
#undef SHOAL_QK
  _tile_stored(6, scores + j0, kp * 4);
  _tile_stored(7, scores + j0 + 16, kp * 4);
}

template <int NC>
void amx_rows(const Unit& u, int64_t i0, const uint16_t* q, int64_t q_stride, int64_t d, int64_t kp, float scale,
              uint16_t* o, int64_t row_stride, Buffers& b) {
#define SHOAL_LOAD_Q(c) \
  if (NC > c) _tile_loadd(c, q + 32 * c, q_stride * 2);
  SHOAL_LOAD_Q(0) SHOAL_LOAD_Q(1) SHOAL_LOAD_Q(2) SHOAL_LOAD_Q(3)
#undef SHOAL_LOAD_Q
  float* scores = b.scores.data();
  for (int64_t j0 = 0; j0 < kp; j0 += 32) amx_scores<NC>(b.kt.data(), kp, j0, scores);
  const int rows = static_cast<int>(std::min<int64_t>(kTile, u.length - i0));
  float inv[kTile];
  for (int r = 0; r < rows; ++r) inv[r] = 1.0f / softmax_row(scores + r * kp, u.keys, kp, scale, b.probs.data() + r * kp);
  for (int r = rows; r < kTile; ++r) std::fill_n(b.probs.data() + r * kp, kp, uint16_t{0});
  float* outs = b.outputs.data();
  for (int64_t d0 = 0; d0 < d; d0 += 32) {  // outputs [16 rows][32 dims], summed over 32 keys a step
    _tile_zero(6);
    _tile_zero(7);
    for (int64_t j0 = 0; j0 < kp; j0 += 32) {
      _tile_loadd(0, b.probs.data() + j0, kp * 2);
      _tile_loadd(4, b.vp.data() + ((j0 / 2) * d + d0) * 2, d * 4);
      _tile_loadd(5, b.vp.data() + ((j0 / 2) * d + d0 + 16) * 2, d * 4);
      _tile_dpbf16ps(6, 0, 4);
      _tile_dpbf16ps(7, 0, 5);
    }
    _tile_stored(6, outs + d0, d * 4);
    _tile_stored(7, outs + d0 + 16, d * 4);
  }
  for (int r = 0; r < rows; ++r) {
    uint16_t* dst = o + (u.start + i0 + r) * row_stride + u.head * d;
    const __m512 w = _mm512_set1_ps(inv[r]);
    for (int64_t c = 0; c < d; c += 16) {
      __m256bh v = _mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_loadu_ps(outs + r * d + c), w));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c), reinterpret_cast<__m256i&>(v));
    }
  }
}

// The same unit as attend(), on AMX: keys padded to 32 (a tile's reduced depth), rows to 16.
void attend_amx(const Unit& u, const uint16_t* q, const uint16_t* k, const uint16_t* v, uint16_t* o,
                int64_t row_stride, int64_t d, float scale, Buffers& b) {
  const int64_t kp = (u.keys + 31) / 32 * 32;
  pack(u, k, v, row_stride, d, kp, kTile, b);
  b.outputs.resize(kTile * d);
  for (int64_t i0 = 0; i0 < u.length; i0 += kTile) {
    // whole blocks of 16 queries load straight from q; the last, shorter one from a zero-padded copy
    const uint16_t* qb = q + (u.start + i0) * row_stride + u.head * d;
    int64_t q_stride = row_stride;
    if (i0 + kTile > u.length) {
      b.queries.assign(kTile * d, 0);
      for (int64_t i = 0; i < u.length - i0; ++i) std::copy_n(qb + i * row_stride, d, b.queries.data() + i * d);
      qb = b.queries.data();
      q_stride = d;
    }
    switch (d / 32) {
      case 1: amx_rows<1>(u, i0, qb, q_stride, d, kp, scale, o, row_stride, b); break;
      case 2: amx_rows<2>(u, i0, qb, q_stride, d, kp, scale, o, row_stride, b); break;
      case 3: amx_rows<3>(u, i0, qb, q_stride, d, kp, scale, o, row_stride, b); break;
      default: amx_rows<4>(u, i0, qb, q_stride, d, kp, scale, o, row_stride, b); break;
    }
  }
}

// q, k, v: [T, H, D] bf16 contiguous; cu_seqlens: [B+1] int32; key_lengths: [B] int32 or empty.
at::Tensor varlen_attention_bf16(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& cu_seqlens, const at::Tensor& key_lengths, double scale,
                                 bool use_amx) {
  TORCH_CHECK(q.scalar_type() == at::kBFloat16 && k.scalar_type() == at::kBFloat16 &&
                  v.scalar_type() == at::kBFloat16, "bfloat16 q, k, v expected");
  TORCH_CHECK(q.dim() == 3 && q.sizes() == k.sizes() && q.sizes() == v.sizes(), "q, k, v must be [T, H, D] alike");
  TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && v.is_contiguous(), "q, k, v must be contiguous");
  const int64_t heads = q.size(1), d = q.size(2);
  TORCH_CHECK(d % 32 == 0, "head size must be a multiple of 32");
  TORCH_CHECK(cu_seqlens.scalar_type() == at::kInt && cu_seqlens.is_contiguous(), "int32 cu_seqlens expected");
  const int64_t batch = cu_seqlens.numel() - 1;
  const int32_t* cu = cu_seqlens.data_ptr<int32_t>();
  const int32_t* kl = key_lengths.numel() ? key_lengths.data_ptr<int32_t>() : nullptr;
  TORCH_CHECK(!kl || key_lengths.numel() == batch, "one key length per sequence expected");
  std::vector<Unit> units;
  units.reserve(batch * heads);
  for (int64_t s = 0; s < batch; ++s) {
    const int64_t length = cu[s + 1] - cu[s];
    const int64_t keys = kl ? std::min<int64_t>(kl[s], length) : length;
    if (length == 0) continue;
    TORCH_CHECK(keys > 0, "every sequence needs at least one key");
    for (int64_t h = 0; h < heads; ++h) units.push_back({cu[s], length, keys, h});
  }
  std::stable_sort(units.begin(), units.end(),
                   [](const Unit& a, const Unit& b) { return a.length * a.keys > b.length * b.keys; });
  at::Tensor out = at::empty_like(q);
  const auto* qp = reinterpret_cast<const uint16_t*>(q.data_ptr<at::BFloat16>());
  const auto* kp = reinterpret_cast<const uint16_t*>(k.data_ptr<at::BFloat16>());
  const auto* vp = reinterpret_cast<const uint16_t*>(v.data_ptr<at::BFloat16>());
  auto* op = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  const int64_t row_stride = heads * d;
  const float fscale = static_cast<float>(scale);
  std::atomic<int64_t> next{0};
  const int64_t n = static_cast<int64_t>(units.size());
  at::parallel_for(0, at::get_num_threads(), 1, [&](int64_t, int64_t) {
    thread_local Buffers b;  // kept between calls: allocating per call cost more than the work on 2 threads
    if (use_amx) {  // the caller has checked the CPU and asked Linux for the tile registers
      TileScope tiles;
      for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1))
        attend_amx(units[i], qp, kp, vp, op, row_stride, d, fscale, b);
    } else {
      for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1))
        attend(units[i], qp, kp, vp, op, row_stride, d, fscale, b);
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY(shoal_cpu, m) {
  m.def("varlen_attention_bf16(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens, Tensor key_lengths, float scale, bool use_amx) -> Tensor");
}

TORCH_LIBRARY_IMPL(shoal_cpu, CPU, m) { m.impl("varlen_attention_bf16", &varlen_attention_bf16); }

// Reference attention: for each (token, head) all scores first, then an exact softmax and
// the weighted sum of values, everything in double. Deliberately shares nothing with the
// optimized kernel so that the two can check each other.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "kernels/attention.h"

namespace moe {

void attention_ref(const AttentionShape& s, const float* q, int64_t q_stride, int64_t n_tokens,
                   int64_t pos0, const KvView& kv, float* out, int64_t out_stride) {
  if (s.n_kv_heads <= 0 || s.n_q_heads % s.n_kv_heads != 0) {
    fail("attention: {} query heads cannot share {} kv heads", s.n_q_heads, s.n_kv_heads);
  }
  if (kv.format == nullptr) fail("attention: the KV view has no row format");
  const int group = s.n_q_heads / s.n_kv_heads;
  // Every position's row decoded once, with the plain decoder.
  const int64_t n_all = pos0 + n_tokens, width = kv.format->floats();
  std::vector<float> rows(size_t(n_all * width));
  for (int64_t p = 0; p < n_all; ++p) {
    const uint8_t* row = kv.blocks[p / kv.block_size] + (p % kv.block_size) * kv.row_stride;
    kv.format->decode_ref(row, 0, width, rows.data() + p * width);
  }
  std::vector<double> score;
  std::vector<double> acc(size_t(s.dv));
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t n_pos = pos0 + t + 1;
    score.resize(size_t(n_pos));
    for (int h = 0; h < s.n_q_heads; ++h) {
      const int g = h / group;
      const float* qh = q + t * q_stride + h * s.dk;
      for (int64_t p = 0; p < n_pos; ++p) {
        const float* k = rows.data() + p * width + s.k_offset + g * s.k_head_stride;
        double dot = 0.0;
        for (int64_t d = 0; d < s.dk; ++d) dot += double(qh[d]) * double(k[d]);
        score[size_t(p)] = dot * double(s.scale);
      }
      const double max = *std::max_element(score.begin(), score.end());
      double sum = 0.0;
      for (double& x : score) sum += x = std::exp(x - max);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t p = 0; p < n_pos; ++p) {
        const float* v = rows.data() + p * width + s.v_offset + g * s.v_head_stride;
        const double w = score[size_t(p)] / sum;
        for (int64_t d = 0; d < s.dv; ++d) acc[size_t(d)] += w * double(v[d]);
      }
      float* o = out + t * out_stride + h * s.dv;
      for (int64_t d = 0; d < s.dv; ++d) o[d] = float(acc[size_t(d)]);
    }
  }
}

}  // namespace moe

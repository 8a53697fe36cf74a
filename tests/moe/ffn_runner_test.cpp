// FfnRunner runs every job of a step in two parallel phases (gate/up rows, then down rows)
// in which a job's input and hidden rows are converted by whichever thread reaches the job
// first while the others wait for it. Checked here: the sums match a plain reference, they are
// bit-identical whatever the number of threads (more threads than cores included, where a
// waiting thread yields to the one it waits on) and whatever other tokens share the step,
// and rows computed for another rank are readable by handle.
#include "moe/ffn_jobs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/ops.h"
#include "kernels/quant.h"

namespace moe {
namespace {

constexpr int64_t kEmbd = 256;
constexpr int64_t kTokens = 9;

struct Matrix {
  std::vector<uint8_t> bytes;
  QMatrix q;
};

Matrix random_matrix(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 0.1f);
  std::vector<float> f(size_t(rows * cols));
  for (float& v : f) v = d(rng);
  Matrix m;
  const size_t rb = row_bytes(type, cols);
  m.bytes.resize(size_t(rows) * rb);
  for (int64_t r = 0; r < rows; ++r) quantize_row(type, f.data() + r * cols, m.bytes.data() + size_t(r) * rb, cols);
  m.q = make_qmatrix(type, rows, cols, m.bytes.data());
  return m;
}

struct Expert {
  Matrix gate, up, down;
  FfnWeights w() const { return {gate.q, up.q, down.q}; }
};

Expert random_expert(GgmlType gate_up, GgmlType up, int64_t n_ff, std::mt19937& rng) {
  Expert e;
  e.gate = random_matrix(gate_up, n_ff, kEmbd, rng);
  e.up = random_matrix(up, n_ff, kEmbd, rng);
  e.down = random_matrix(GgmlType::Q8_0, kEmbd, n_ff, rng);
  return e;
}

struct Route {
  int32_t token;
  int expert;
  float weight;
};

class FfnRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937 rng(7);
    // Widths that split into several items, and one expert whose up projection needs
    // activations in another format than its gate (the k-quant packing).
    experts_.push_back(random_expert(GgmlType::Q8_0, GgmlType::Q8_0, 96, rng));
    experts_.push_back(random_expert(GgmlType::Q8_0, GgmlType::Q4_K, 64, rng));
    experts_.push_back(random_expert(GgmlType::Q4_0, GgmlType::Q4_0, 160, rng));
    experts_.push_back(random_expert(GgmlType::Q8_0, GgmlType::Q8_0, 32, rng));
    experts_.push_back(random_expert(GgmlType::Q8_0, GgmlType::Q8_0, 192, rng));  // "shared"
    std::uniform_int_distribution<int> pick(0, 3);
    std::uniform_real_distribution<float> wd(0.1f, 1.0f);
    for (int32_t t = 0; t < kTokens; ++t) {
      const int a = pick(rng), b = (a + 1 + pick(rng) % 3) % 4;
      routes_.push_back({t, a, wd(rng)});
      routes_.push_back({t, b, wd(rng)});
      routes_.push_back({t, 4, 1.0f});
    }
    std::normal_distribution<float> d(0.0f, 1.0f);
    x_.resize(size_t(kTokens * kEmbd));
    for (float& v : x_) v = d(rng);
  }

  // The runner's output for the given tokens (each keeps its own routes), rows in order.
  std::vector<float> run(const std::vector<int32_t>& tokens, int threads) {
    ThreadPool pool(threads);
    FfnRunner r;
    r.reset(int64_t(tokens.size()), kEmbd);
    std::vector<float> in(tokens.size() * size_t(kEmbd));
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::copy_n(x_.data() + tokens[i] * kEmbd, kEmbd, in.data() + i * size_t(kEmbd));
      for (const Route& rt : routes_) {
        if (rt.token == tokens[i]) r.add(experts_[size_t(rt.expert)].w(), int32_t(i), rt.weight);
      }
    }
    std::vector<float> out(in.size(), -1.0f);
    r.run(in.data(), kEmbd, out.data(), kEmbd, pool);
    return out;
  }

  std::vector<float> reference(int32_t token) const {
    std::vector<float> out(static_cast<size_t>(kEmbd), 0.0f);
    const float* x = x_.data() + token * kEmbd;
    for (const Route& rt : routes_) {
      if (rt.token != token) continue;
      const Expert& e = experts_[size_t(rt.expert)];
      const int64_t n_ff = e.gate.q.rows;
      std::vector<float> g(static_cast<size_t>(n_ff)), u(g), h(g), y(static_cast<size_t>(kEmbd));
      matmul_ref(e.gate.q, x, 1, g.data());
      matmul_ref(e.up.q, x, 1, u.data());
      swiglu_ref(g.data(), u.data(), h.data(), n_ff);
      matmul_ref(e.down.q, h.data(), 1, y.data());
      for (int64_t i = 0; i < kEmbd; ++i) out[size_t(i)] += rt.weight * y[size_t(i)];
    }
    return out;
  }

  std::vector<int32_t> all_tokens() const {
    std::vector<int32_t> t;
    for (int32_t i = 0; i < kTokens; ++i) t.push_back(i);
    return t;
  }

  std::vector<Expert> experts_;
  std::vector<Route> routes_;
  std::vector<float> x_;
};

TEST_F(FfnRunnerTest, SumsMatchThePlainReference) {
  const std::vector<float> out = run(all_tokens(), 2);
  for (int32_t t = 0; t < kTokens; ++t) {
    const std::vector<float> ref = reference(t);
    double err = 0, norm = 0;
    for (int64_t i = 0; i < kEmbd; ++i) {
      const double d = double(out[size_t(t * kEmbd + i)]) - ref[size_t(i)];
      err += d * d;
      norm += double(ref[size_t(i)]) * ref[size_t(i)];
    }
    // The kernels quantize the activations to 8 bits; the reference keeps them in float.
    EXPECT_LT(std::sqrt(err / norm), 0.03) << "token " << t;
  }
}

TEST_F(FfnRunnerTest, EveryThreadCountGivesTheSameBits) {
  const std::vector<float> one = run(all_tokens(), 1);
  for (int threads : {2, 3, 8}) {
    for (int rep = 0; rep < 10; ++rep) {
      EXPECT_EQ(run(all_tokens(), threads), one) << threads << " threads, run " << rep;
    }
  }
}

TEST_F(FfnRunnerTest, ATokenGetsTheSameBitsAloneAsInTheBatch) {
  const std::vector<float> batch = run(all_tokens(), 3);
  for (int32_t t = 0; t < kTokens; ++t) {
    const std::vector<float> alone = run({t}, 3);
    const std::vector<float> row(batch.begin() + t * kEmbd, batch.begin() + (t + 1) * kEmbd);
    EXPECT_EQ(alone, row) << "token " << t;
  }
}

TEST_F(FfnRunnerTest, RowsComputedForAnotherRankAreReadableByHandle) {
  ThreadPool pool(2);
  FfnRunner r;
  // Token 0 is this rank's; input row 1 is another rank's token 3, sent to expert 2 here.
  r.reset(1, kEmbd, 1);
  std::vector<float> in(size_t(2 * kEmbd));
  std::copy_n(x_.data(), kEmbd, in.data());
  std::copy_n(x_.data() + 3 * kEmbd, kEmbd, in.data() + kEmbd);
  r.add(experts_[0].w(), 0, 0.5f);
  const FfnRunner::RowRef ref = r.compute_only(experts_[2].w(), 1);
  r.compute(in.data(), kEmbd, pool);
  const std::vector<float> remote(r.result(ref), r.result(ref) + kEmbd);

  FfnRunner alone;
  alone.reset(1, kEmbd);
  alone.add(experts_[2].w(), 0, 1.0f);
  std::vector<float> expect(static_cast<size_t>(kEmbd));
  alone.run(in.data() + kEmbd, kEmbd, expect.data(), kEmbd, pool);
  EXPECT_EQ(remote, expect);

  std::vector<float> out(static_cast<size_t>(kEmbd));
  r.combine(out.data(), kEmbd, pool);
  FfnRunner own;
  own.reset(1, kEmbd);
  own.add(experts_[0].w(), 0, 0.5f);
  std::vector<float> own_out(static_cast<size_t>(kEmbd));
  own.run(in.data(), kEmbd, own_out.data(), kEmbd, pool);
  EXPECT_EQ(out, own_out);
}

}  // namespace
}  // namespace moe

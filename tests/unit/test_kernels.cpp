// The plexus_kernels static library (plugins/common/kernels): every kernel in float64 against a
// naive reference on small, odd sizes (and sizes large enough to take the OpenMP-parallel paths);
// backward kernels against central finite differences; the float32 approximations (exp, erf)
// against float64.
//
// Tolerances: forward kernels compute the same sums as the references in another order, so
// float64 results agree to ~1e-15 relative; 1e-12 leaves room for sums of a few hundred terms.
// Finite differences use h = 1e-6 on functionals of magnitude <= ~100: rounding error ~1e-16 *
// 100 / 1e-6 = 1e-8, truncation ~h^2 = 1e-12; they are checked at 1e-6 relative + 1e-7 absolute.
#define BOOST_TEST_MODULE kernels
#include <boost/test/unit_test.hpp>

#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "plexus_kernels/activation.hpp"
#include "plexus_kernels/attention.hpp"
#include "plexus_kernels/cross_entropy.hpp"
#include "plexus_kernels/embedding.hpp"
#include "plexus_kernels/gemm.hpp"
#include "plexus_kernels/norm.hpp"
#include "plexus_kernels/rope.hpp"
#include "plexus_kernels/threading.hpp"

namespace k = plexus::kernels;
using k::Trans;
using Vec = std::vector<double>;

namespace {

Vec random_vec(std::size_t n, std::mt19937_64& rng, double scale = 1.0) {
  std::normal_distribution<double> normal(0.0, 1.0);
  Vec v(n);
  for (double& x : v) x = normal(rng) * scale;
  return v;
}

std::size_t sz(int64_t v) {
  return static_cast<std::size_t>(v);
}

void expect_close(const Vec& a, const Vec& b, double rel, double abs, const std::string& what) {
  BOOST_TEST_CONTEXT(what) {
    BOOST_TEST_REQUIRE(a.size() == b.size());
    std::size_t bad = 0;
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      const double err = std::abs(a[i] - b[i]);
      worst = std::max(worst, err);
      if (err > rel * std::abs(b[i]) + abs && ++bad <= 5)
        BOOST_ERROR("element " << i << ": " << a[i] << " vs " << b[i]);
    }
    BOOST_TEST_MESSAGE(what << ": max |diff| " << worst);
    BOOST_TEST(bad == 0u);
  }
}

// Central differences of f over every element of x.
Vec numeric_grad(Vec& x, const std::function<double()>& f, double h = 1e-6) {
  Vec g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double plus = f();
    x[i] = saved - h;
    const double minus = f();
    x[i] = saved;
    g[i] = (plus - minus) / (2 * h);
  }
  return g;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

constexpr double kFdRel = 1e-6;
constexpr double kFdAbs = 1e-7;

// C = alpha op(A) op(B) + beta C, naive, row-major with leading dimensions.
void naive_gemm(Trans ta, Trans tb, int64_t m, int64_t n, int64_t kk, double alpha, const Vec& a, int64_t lda,
                const Vec& b, int64_t ldb, double beta, Vec& c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < kk; ++p) {
        const double av = ta == Trans::N ? a[sz(i * lda + p)] : a[sz(p * lda + i)];
        const double bv = tb == Trans::N ? b[sz(p * ldb + j)] : b[sz(j * ldb + p)];
        s += av * bv;
      }
      c[sz(i * ldc + j)] = alpha * s + beta * c[sz(i * ldc + j)];
    }
}

}  // namespace

BOOST_AUTO_TEST_CASE(gemm_all_transposes_padded_and_parallel) {
  std::mt19937_64 rng(1);
  for (Trans ta : {Trans::N, Trans::T}) {
    for (Trans tb : {Trans::N, Trans::T}) {
      // Small odd sizes with padded rows (ld > row length), and sizes that take the parallel split
      // by rows (m >= n) and by columns (n > m).
      struct Size {
        int64_t m, n, kk;
      };
      for (const Size s : {Size{7, 5, 3}, Size{131, 97, 83}, Size{67, 149, 101}}) {
        BOOST_TEST_CONTEXT("ta " << static_cast<int>(ta) << " tb " << static_cast<int>(tb) << " m " << s.m
                                 << " n " << s.n << " k " << s.kk) {
          const int64_t a_rows = ta == Trans::N ? s.m : s.kk, a_cols = ta == Trans::N ? s.kk : s.m;
          const int64_t b_rows = tb == Trans::N ? s.kk : s.n, b_cols = tb == Trans::N ? s.n : s.kk;
          const int64_t lda = a_cols + 2, ldb = b_cols + 1, ldc = s.n + 3;
          const Vec a = random_vec(sz(a_rows * lda), rng), b = random_vec(sz(b_rows * ldb), rng);
          const Vec c0 = random_vec(sz(s.m * ldc), rng);
          Vec expected = c0;
          naive_gemm(ta, tb, s.m, s.n, s.kk, 0.7, a, lda, b, ldb, 0.3, expected, ldc);
          Vec c = c0;
          k::gemm<double>(ta, tb, s.m, s.n, s.kk, 0.7, a.data(), lda, b.data(), ldb, 0.3, c.data(), ldc);
          expect_close(c, expected, 1e-12, 1e-12, "gemm");
          c = c0;
          k::gemm_parallel<double>(ta, tb, s.m, s.n, s.kk, 0.7, a.data(), lda, b.data(), ldb, 0.3, c.data(),
                                   ldc);
          expect_close(c, expected, 1e-12, 1e-12, "gemm_parallel");
        }
      }
    }
  }
  // k == 0: C = beta C.
  Vec c = {1, 2, 3, 4};
  const Vec none(1, 0.0);
  k::gemm<double>(Trans::N, Trans::N, 2, 2, 0, 1.0, none.data(), 1, none.data(), 2, 0.5, c.data(), 2);
  BOOST_TEST(c == Vec({0.5, 1, 1.5, 2}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(norms_forward_and_backward) {
  std::mt19937_64 rng(2);
  const double eps = 1e-5;
  for (bool rms : {true, false}) {
    // Small (serial) and large enough for the parallel paths (rows * cols >= 16384).
    for (int64_t rows : {7, 1031}) {
      const int64_t cols = rows == 7 ? 13 : 17;
      BOOST_TEST_CONTEXT((rms ? "RMSNorm" : "LayerNorm") << " rows " << rows) {
        Vec x = random_vec(sz(rows * cols), rng, 2.0), w = random_vec(sz(cols), rng),
            b = random_vec(sz(cols), rng);
        const auto naive = [&](const Vec& xv, const Vec& wv, const Vec& bv, Vec& y, Vec& xhat, Vec& rstd) {
          for (int64_t r = 0; r < rows; ++r) {
            double mean = 0, var = 0;
            for (int64_t c = 0; c < cols; ++c) mean += xv[sz(r * cols + c)] / static_cast<double>(cols);
            if (rms) mean = 0;  // RMSNorm: mean of squares, no centering
            for (int64_t c = 0; c < cols; ++c)
              var +=
                  (xv[sz(r * cols + c)] - mean) * (xv[sz(r * cols + c)] - mean) / static_cast<double>(cols);
            rstd[sz(r)] = 1 / std::sqrt(var + eps);
            for (int64_t c = 0; c < cols; ++c) {
              xhat[sz(r * cols + c)] = (xv[sz(r * cols + c)] - mean) * rstd[sz(r)];
              y[sz(r * cols + c)] = xhat[sz(r * cols + c)] * wv[sz(c)] + (rms ? 0.0 : bv[sz(c)]);
            }
          }
        };
        Vec ye(x.size()), he(x.size()), re(sz(rows)), y(x.size()), h(x.size()), rs(sz(rows));
        naive(x, w, b, ye, he, re);
        if (rms)
          k::rmsnorm_forward<double>(rows, cols, x.data(), w.data(), eps, y.data(), h.data(), rs.data());
        else
          k::layernorm_forward<double>(rows, cols, x.data(), w.data(), b.data(), eps, y.data(), h.data(),
                                       rs.data());
        expect_close(y, ye, 1e-12, 1e-12, "y");
        expect_close(h, he, 1e-12, 1e-12, "xhat");
        expect_close(rs, re, 1e-12, 1e-12, "rstd");
        Vec apply(x.size());
        k::norm_apply<double>(rows, cols, h.data(), w.data(), rms ? nullptr : b.data(), apply.data());
        expect_close(apply, ye, 1e-12, 1e-12, "norm_apply");
        Vec y_only(x.size());  // without xhat/rstd (inference)
        if (rms)
          k::rmsnorm_forward<double>(rows, cols, x.data(), w.data(), eps, y_only.data(), nullptr, nullptr);
        else
          k::layernorm_forward<double>(rows, cols, x.data(), w.data(), b.data(), eps, y_only.data(), nullptr,
                                       nullptr);
        expect_close(y_only, ye, 1e-12, 1e-12, "y without saving");

        // Backward of L = sum(r * y); gradients of w and b start at 1 (accumulated into).
        const Vec rv = random_vec(x.size(), rng);
        Vec dx(x.size(), 99.0), dw(sz(cols), 1.0), db(sz(cols), 1.0);
        if (rms)
          k::rmsnorm_backward<double>(rows, cols, rv.data(), h.data(), rs.data(), w.data(), dx.data(),
                                      dw.data());
        else
          k::layernorm_backward<double>(rows, cols, rv.data(), h.data(), rs.data(), w.data(), dx.data(),
                                        dw.data(), db.data());
        if (rows > 7) continue;  // finite differences on the small case only
        const auto objective = [&] {
          Vec yy(x.size()), hh(x.size()), rr(sz(rows));
          naive(x, w, b, yy, hh, rr);
          return dot(rv, yy);
        };
        expect_close(dx, numeric_grad(x, objective), kFdRel, kFdAbs, "dx");
        Vec gw = numeric_grad(w, objective);
        for (double& g : gw) g += 1.0;
        expect_close(dw, gw, kFdRel, kFdAbs, "dw (+= onto 1)");
        if (!rms) {
          Vec gb = numeric_grad(b, objective);
          for (double& g : gb) g += 1.0;
          expect_close(db, gb, kFdRel, kFdAbs, "db (+= onto 1)");
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(norm_backward_parallel_equals_serial_formula) {
  // The large case above only ran; here its result is compared with the closed form.
  std::mt19937_64 rng(3);
  const int64_t rows = 1031, cols = 17;
  const Vec x = random_vec(sz(rows * cols), rng), w = random_vec(sz(cols), rng),
            dy = random_vec(sz(rows * cols), rng);
  Vec y(x.size()), h(x.size()), rs(sz(rows)), dx(x.size()), dw(sz(cols), 0.0);
  k::rmsnorm_forward<double>(rows, cols, x.data(), w.data(), 1e-6, y.data(), h.data(), rs.data());
  k::rmsnorm_backward<double>(rows, cols, dy.data(), h.data(), rs.data(), w.data(), dx.data(), dw.data());
  Vec dx_e(x.size()), dw_e(sz(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0;
    for (int64_t c = 0; c < cols; ++c)
      m += dy[sz(r * cols + c)] * w[sz(c)] * h[sz(r * cols + c)] / static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c) {
      dx_e[sz(r * cols + c)] = rs[sz(r)] * (dy[sz(r * cols + c)] * w[sz(c)] - h[sz(r * cols + c)] * m);
      dw_e[sz(c)] += dy[sz(r * cols + c)] * h[sz(r * cols + c)];
    }
  }
  expect_close(dx, dx_e, 1e-12, 1e-12, "dx");
  expect_close(dw, dw_e, 1e-12, 1e-12, "dw");
}

// The kernels' reductions and products give the same float32 bits with any number of OpenMP
// threads (plexus_kernels/parts.hpp; gemm_parallel's slices follow the machine's CPUs): the
// norms' weight gradients, the cross-entropy's loss sum and a product large enough to be sliced.
BOOST_AUTO_TEST_CASE(results_do_not_depend_on_the_thread_count) {
  std::mt19937_64 rng(12);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const auto floats = [&](std::size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng);
    return v;
  };
  const int64_t rows = 1031, cols = 96, vocab = 64, m = 300, n = 200, kk = 150;
  const std::vector<float> x = floats(sz(rows * cols)), w = floats(sz(cols)), dy = floats(sz(rows * cols));
  const std::vector<float> logits = floats(sz(rows * vocab)), a = floats(sz(m * kk)), b = floats(sz(kk * n));
  std::vector<int32_t> targets(sz(rows));
  for (int64_t r = 0; r < rows; ++r) targets[sz(r)] = r % 11 == 0 ? -1 : static_cast<int32_t>(r % vocab);
  struct Result {
    std::vector<float> dw, db, grad, c;
    double loss = 0;
  };
  const auto run = [&] {
    Result out;
    std::vector<float> y(x.size()), h(x.size()), rs(sz(rows)), dx(x.size());
    out.dw.assign(sz(cols), 0.0f);
    out.db.assign(sz(cols), 0.0f);
    k::layernorm_forward<float>(rows, cols, x.data(), w.data(), w.data(), 1e-5f, y.data(), h.data(),
                                rs.data());
    k::layernorm_backward<float>(rows, cols, dy.data(), h.data(), rs.data(), w.data(), dx.data(),
                                 out.dw.data(), out.db.data());
    k::rmsnorm_backward<float>(rows, cols, dy.data(), h.data(), rs.data(), w.data(), dx.data(),
                               out.dw.data());
    out.grad.resize(logits.size());
    out.loss =
        k::cross_entropy_forward<float>(rows, vocab, logits.data(), targets.data(), out.grad.data()).loss_sum;
    out.c.assign(sz(m * n), 0.0f);
    k::gemm_parallel<float>(k::Trans::N, k::Trans::N, m, n, kk, 1.0f, a.data(), kk, b.data(), n, 0.0f,
                            out.c.data(), n);
    return out;
  };
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const Result one = run();
  for (int threads : {2, 3}) {
    omp_set_num_threads(threads);
    const Result other = run();
    BOOST_TEST(other.dw == one.dw, threads << " threads: norm weight gradients");
    BOOST_TEST(other.db == one.db, threads << " threads: norm bias gradients");
    BOOST_TEST(other.grad == one.grad, threads << " threads: cross-entropy gradient");
    BOOST_TEST(std::memcmp(&other.loss, &one.loss, sizeof(double)) == 0, threads << " threads: loss sum");
    BOOST_TEST(other.c == one.c, threads << " threads: product");
  }
  omp_set_num_threads(saved);
}

BOOST_AUTO_TEST_CASE(rope_tables_rotation_and_inverse) {
  std::mt19937_64 rng(4);
  const int64_t seq = 7, hd = 6, half = 3, rows = 2 * seq, ld = 15;
  const double base = 500.0;
  Vec cs(sz(seq * half)), sn(sz(seq * half));
  k::rope_tables<double>(seq, hd, base, cs.data(), sn.data());
  for (int64_t p = 0; p < seq; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) * std::pow(base, -2.0 * static_cast<double>(i) / hd);
      BOOST_TEST(cs[sz(p * half + i)] == std::cos(angle), boost::test_tools::tolerance(1e-14));
      BOOST_TEST(sn[sz(p * half + i)] == std::sin(angle), boost::test_tools::tolerance(1e-14));
    }
  const Vec x0 = random_vec(sz(rows * ld), rng);
  const std::vector<int64_t> cols = {1, 8};  // two heads; columns 0 and 7 and 14 untouched
  Vec x = x0;
  k::rope_apply<double>(x.data(), rows, seq, ld, cols.data(), 2, hd, cs.data(), sn.data(), false);
  Vec expected = x0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t pos = r % seq;
    for (int64_t c : cols)
      for (int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(pos) * std::pow(base, -2.0 * static_cast<double>(i) / hd);
        const double a = x0[sz(r * ld + c + i)], b = x0[sz(r * ld + c + i + half)];
        expected[sz(r * ld + c + i)] = a * std::cos(angle) - b * std::sin(angle);
        expected[sz(r * ld + c + i + half)] = b * std::cos(angle) + a * std::sin(angle);
      }
  }
  expect_close(x, expected, 1e-13, 1e-13, "rotation");
  k::rope_apply<double>(x.data(), rows, seq, ld, cols.data(), 2, hd, cs.data(), sn.data(), true);
  expect_close(x, x0, 1e-13, 1e-13, "inverse after rotation");
}

namespace {

// Naive GQA attention over the layout, causal or (l.causal false) over every key with a full
// softmax; returns out [B*S, H*hd].
Vec naive_attention(const k::AttentionLayout& l, const Vec& qkv) {
  const int64_t S = l.seq, hd = l.head_dim, H = l.heads, per = l.heads / l.groups;
  Vec out(sz(l.batch * S * H * hd), 0.0);
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / per;
      const int64_t qc = l.q_offset + g * l.q_group_stride + (h % per) * hd;
      const int64_t kc = l.k_offset + g * l.kv_group_stride, vc = l.v_offset + g * l.kv_group_stride;
      for (int64_t s = 0; s < S; ++s) {
        const int64_t seen = l.causal ? s + 1 : S;  // keys 0..seen-1
        Vec p(sz(seen));
        double mx = -1e300, sum = 0;
        for (int64_t t = 0; t < seen; ++t) {
          double d = 0;
          for (int64_t i = 0; i < hd; ++i)
            d += qkv[sz((b * S + s) * l.ld + qc + i)] * qkv[sz((b * S + t) * l.ld + kc + i)];
          p[sz(t)] = d / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, p[sz(t)]);
        }
        for (double& e : p) sum += (e = std::exp(e - mx));
        for (int64_t t = 0; t < seen; ++t)
          for (int64_t i = 0; i < hd; ++i)
            out[sz((b * S + s) * H * hd + h * hd + i)] +=
                p[sz(t)] / sum * qkv[sz((b * S + t) * l.ld + vc + i)];
      }
    }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(attention_forward_matches_naive) {
  std::mt19937_64 rng(5);
  // Megatron layout, sequences over one and two query blocks, MHA and GQA, odd head dim.
  for (int64_t seq : {5, 70}) {
    for (int64_t groups : {4, 2, 1}) {
      BOOST_TEST_CONTEXT("seq " << seq << " groups " << groups) {
        const auto l = k::AttentionLayout::megatron(2, seq, 4, groups, 5);
        const Vec qkv = random_vec(sz(l.batch * seq * l.ld), rng);
        const Vec expected = naive_attention(l, qkv);
        Vec out(expected.size(), 7.0), probs(sz(l.batch * l.heads * seq * seq), 7.0);
        k::attention_forward<double>(l, qkv.data(), out.data(), probs.data());
        expect_close(out, expected, 1e-12, 1e-12, "out");
        for (int64_t row = 0; row < l.batch * l.heads * seq; ++row) {
          const int64_t s = row % seq;
          double sum = 0;
          for (int64_t t = 0; t < seq; ++t) {
            const double p = probs[sz(row * seq + t)];
            if (t > s) BOOST_TEST(p == 0.0);  // masked
            sum += p;
          }
          BOOST_TEST(sum == 1.0, boost::test_tools::tolerance(1e-12));
        }
        Vec out2(expected.size(), 7.0);  // without keeping probabilities
        k::attention_forward<double>(l, qkv.data(), out2.data(), nullptr);
        expect_close(out2, expected, 1e-12, 1e-12, "out without probs");
      }
    }
  }
  // A different layout: separate q, k and v blocks in one row, padding at the end.
  k::AttentionLayout l;
  l.batch = 1;
  l.seq = 9;
  l.heads = 3;
  l.groups = 1;
  l.head_dim = 2;
  l.q_offset = 0;
  l.q_group_stride = 6;
  l.k_offset = 6;
  l.v_offset = 8;
  l.kv_group_stride = 4;
  l.ld = 11;
  const Vec qkv = random_vec(sz(9 * 11), rng);
  Vec out(sz(9 * 6));
  k::attention_forward<double>(l, qkv.data(), out.data(), nullptr);
  expect_close(out, naive_attention(l, qkv), 1e-12, 1e-12, "custom layout");
}

BOOST_AUTO_TEST_CASE(attention_backward_matches_finite_differences) {
  std::mt19937_64 rng(6);
  for (int64_t seq : {6, 67}) {
    for (int64_t groups : {2, 1}) {
      BOOST_TEST_CONTEXT("seq " << seq << " groups " << groups) {
        const auto l = k::AttentionLayout::megatron(seq > 10 ? 1 : 2, seq, 2, groups, 3);
        Vec qkv = random_vec(sz(l.batch * seq * l.ld), rng);
        const int64_t out_size = l.batch * seq * l.heads * l.head_dim;
        const Vec r = random_vec(sz(out_size), rng);
        Vec out(sz(out_size)), probs(sz(l.batch * l.heads * seq * seq));
        k::attention_forward<double>(l, qkv.data(), out.data(), probs.data());
        Vec dqkv(qkv.size(), 99.0);
        k::attention_backward<double>(l, qkv.data(), probs.data(), out.data(), r.data(), dqkv.data());
        const auto objective = [&] {
          Vec o(sz(out_size));
          k::attention_forward<double>(l, qkv.data(), o.data(), nullptr);
          return dot(r, o);
        };
        expect_close(dqkv, numeric_grad(qkv, objective), kFdRel, kFdAbs, "dqkv");
      }
    }
  }
}

namespace {

// The naive backward of naive_attention, straight from the formulas in float64 (no shared code
// with the kernel, which uses rowsum(dO * O) where this sums P dP): for each query row s and the
// keys t it sees (all S without the causal mask), P = softmax(q_s k_t * scale), then
//   dV_t += P_st dO_s,  dP_st = dO_s . v_t,  dS_st = P_st (dP_st - sum_u P_su dP_su),
//   dQ_s = scale sum_t dS_st k_t,  dK_t += scale sum_s dS_st q_s.
// Returns dqkv in the layout of qkv (columns outside q, k and v stay zero).
Vec naive_attention_backward(const k::AttentionLayout& l, const Vec& qkv, const Vec& dout) {
  const int64_t S = l.seq, hd = l.head_dim, H = l.heads, per = l.heads / l.groups;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  Vec dqkv(qkv.size(), 0.0);
  const auto at = [&](int64_t b, int64_t s, int64_t col) { return sz((b * S + s) * l.ld + col); };
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / per;
      const int64_t qc = l.q_offset + g * l.q_group_stride + (h % per) * hd;
      const int64_t kc = l.k_offset + g * l.kv_group_stride, vc = l.v_offset + g * l.kv_group_stride;
      for (int64_t s = 0; s < S; ++s) {
        const int64_t seen = l.causal ? s + 1 : S;
        Vec p(sz(seen)), dp(sz(seen));
        double mx = -1e300, sum = 0;
        for (int64_t t = 0; t < seen; ++t) {
          double d = 0;
          for (int64_t i = 0; i < hd; ++i) d += qkv[at(b, s, qc + i)] * qkv[at(b, t, kc + i)];
          p[sz(t)] = d * scale;
          mx = std::max(mx, p[sz(t)]);
        }
        for (double& e : p) sum += (e = std::exp(e - mx));
        for (double& e : p) e /= sum;
        const double* go = &dout[sz((b * S + s) * H * hd + h * hd)];
        double pdp = 0;
        for (int64_t t = 0; t < seen; ++t) {
          double d = 0;
          for (int64_t i = 0; i < hd; ++i) d += go[i] * qkv[at(b, t, vc + i)];
          dp[sz(t)] = d;
          pdp += p[sz(t)] * d;
        }
        for (int64_t t = 0; t < seen; ++t) {
          const double ds = p[sz(t)] * (dp[sz(t)] - pdp);
          for (int64_t i = 0; i < hd; ++i) {
            dqkv[at(b, t, vc + i)] += p[sz(t)] * go[i];
            dqkv[at(b, s, qc + i)] += scale * ds * qkv[at(b, t, kc + i)];
            dqkv[at(b, t, kc + i)] += scale * ds * qkv[at(b, s, qc + i)];
          }
        }
      }
    }
  return dqkv;
}

struct AttentionShape {
  int64_t batch, seq, heads, groups, head_dim;
};

// Bidirectional (no_mask) cases: one query block (5, 64: exactly one block), several with a
// partial last block (70, 130: seq not a multiple of the kernel's 64-row query block), one token;
// MHA (groups = heads) and GQA (groups < heads, down to one group), odd and even head dims.
const AttentionShape kBidirectionalShapes[] = {
    {2, 5, 4, 4, 5}, {2, 70, 4, 2, 5}, {1, 130, 4, 1, 3}, {1, 64, 6, 3, 4}, {3, 1, 2, 1, 3}};

k::AttentionLayout bidirectional(const AttentionShape& c) {
  k::AttentionLayout l = k::AttentionLayout::megatron(c.batch, c.seq, c.heads, c.groups, c.head_dim);
  l.causal = false;
  return l;
}

}  // namespace

// Without the causal mask every query sees every key: the output and the kept probabilities
// against the naive full softmax (float64; forward tolerance as at the top: 1e-12), every
// probability row sums to 1 and has no masked (zero) entry, in particular above the diagonal.
BOOST_AUTO_TEST_CASE(bidirectional_attention_forward_matches_naive_full_softmax) {
  std::mt19937_64 rng(15);
  for (const AttentionShape& c : kBidirectionalShapes) {
    BOOST_TEST_CONTEXT("batch " << c.batch << " seq " << c.seq << " heads " << c.heads << " groups "
                                << c.groups << " head_dim " << c.head_dim) {
      const k::AttentionLayout l = bidirectional(c);
      const int64_t S = c.seq;
      const Vec qkv = random_vec(sz(c.batch * S * l.ld), rng);
      const Vec expected = naive_attention(l, qkv);
      Vec out(expected.size(), 7.0), probs(sz(c.batch * c.heads * S * S), 7.0);
      k::attention_forward<double>(l, qkv.data(), out.data(), probs.data());
      expect_close(out, expected, 1e-12, 1e-12, "out");
      std::size_t zeros = 0;
      for (int64_t row = 0; row < c.batch * c.heads * S; ++row) {
        double sum = 0;
        for (int64_t t = 0; t < S; ++t) {
          const double p = probs[sz(row * S + t)];
          if (!(p > 0.0)) ++zeros;
          sum += p;
        }
        BOOST_TEST(sum == 1.0, boost::test_tools::tolerance(1e-12));
      }
      BOOST_TEST(zeros == 0u, zeros << " probabilities are not > 0 (masked)");
      // The probabilities are the naive softmax's: O = P V with them gives the naive output.
      Vec from_probs(expected.size(), 0.0);
      const int64_t per = c.heads / c.groups, hd = c.head_dim;
      for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t h = 0; h < c.heads; ++h)
          for (int64_t s = 0; s < S; ++s)
            for (int64_t t = 0; t < S; ++t)
              for (int64_t i = 0; i < hd; ++i)
                from_probs[sz((b * S + s) * c.heads * hd + h * hd + i)] +=
                    probs[sz(((b * c.heads + h) * S + s) * S + t)] *
                    qkv[sz((b * S + t) * l.ld + l.v_column(h / per) + i)];
      expect_close(from_probs, expected, 1e-12, 1e-12, "P V from the kept probabilities");
      Vec out2(expected.size(), 7.0);  // without keeping probabilities (per-thread score blocks)
      k::attention_forward<double>(l, qkv.data(), out2.data(), nullptr);
      expect_close(out2, expected, 1e-12, 1e-12, "out without probs");
    }
  }
}

// The bidirectional backward against the naive backward of the full softmax and against central
// differences of the forward (with the finite-difference tolerances at the top of this file).
// Tolerance against the naive backward: 1e-12 relative + 1e-12 absolute. Both are float64 sums of
// the same terms in other orders (the kernel's rowsum(dO * O) is the naive sum_u P dP), and dS
// subtracts two such sums of magnitude up to ~10: a cancellation error of a few 1e-15 absolute
// (the largest seen: 5e-15), which 1e-12 covers two hundred times; a wrong term (a masked key, a
// missing group head) is off by O(0.1).
BOOST_AUTO_TEST_CASE(bidirectional_attention_backward_matches_naive_and_finite_differences) {
  std::mt19937_64 rng(16);
  for (const AttentionShape& c : kBidirectionalShapes) {
    BOOST_TEST_CONTEXT("batch " << c.batch << " seq " << c.seq << " heads " << c.heads << " groups "
                                << c.groups << " head_dim " << c.head_dim) {
      const k::AttentionLayout l = bidirectional(c);
      Vec qkv = random_vec(sz(c.batch * c.seq * l.ld), rng);
      const int64_t out_size = c.batch * c.seq * c.heads * c.head_dim;
      const Vec r = random_vec(sz(out_size), rng);
      Vec out(sz(out_size)), probs(sz(c.batch * c.heads * c.seq * c.seq));
      k::attention_forward<double>(l, qkv.data(), out.data(), probs.data());
      Vec dqkv(qkv.size(), 99.0);  // written, not accumulated
      k::attention_backward<double>(l, qkv.data(), probs.data(), out.data(), r.data(), dqkv.data());
      expect_close(dqkv, naive_attention_backward(l, qkv, r), 1e-12, 1e-12,
                   "dqkv against the naive backward");
      if (c.seq <= 70) {  // the central differences run 2 forwards per element of qkv
        const auto objective = [&] {
          Vec o(sz(out_size));
          k::attention_forward<double>(l, qkv.data(), o.data(), nullptr);
          return dot(r, o);
        };
        expect_close(dqkv, numeric_grad(qkv, objective), kFdRel, kFdAbs, "dqkv against finite differences");
      }
    }
  }
}

// float32 without the mask (the path the layers train in) against the float64 naive reference.
// Tolerance 2e-5 relative + 2e-5 absolute: float32 rounds each stored value by 6e-8 relative and
// the fp32 exp is within 1e-7; scores, softmax sums and P V / dS products accumulate up to
// S = 130 such errors on values of magnitude ~1..10, a few 1e-6 at worst (the largest seen:
// 8e-7); a masked key or a missing group is off by O(0.1).
BOOST_AUTO_TEST_CASE(bidirectional_attention_in_float32) {
  std::mt19937_64 rng(17);
  for (const AttentionShape& c : kBidirectionalShapes) {
    BOOST_TEST_CONTEXT("seq " << c.seq << " groups " << c.groups) {
      const k::AttentionLayout l = bidirectional(c);
      const Vec qkv = random_vec(sz(c.batch * c.seq * l.ld), rng);
      const int64_t out_size = c.batch * c.seq * c.heads * c.head_dim;
      const Vec r = random_vec(sz(out_size), rng);
      const std::vector<float> qkv32(qkv.begin(), qkv.end()), r32(r.begin(), r.end());
      std::vector<float> out(sz(out_size)), probs(sz(c.batch * c.heads * c.seq * c.seq)), dqkv(qkv.size());
      k::attention_forward<float>(l, qkv32.data(), out.data(), probs.data());
      k::attention_backward<float>(l, qkv32.data(), probs.data(), out.data(), r32.data(), dqkv.data());
      // The reference on the float32-rounded inputs.
      const Vec q64(qkv32.begin(), qkv32.end()), r64(r32.begin(), r32.end());
      expect_close(Vec(out.begin(), out.end()), naive_attention(l, q64), 2e-5, 2e-5, "out");
      expect_close(Vec(dqkv.begin(), dqkv.end()), naive_attention_backward(l, q64, r64), 2e-5, 2e-5, "dqkv");
    }
  }
}

namespace {

// One forward (keeping the probabilities) and backward in T of float64 inputs.
template <class T>
struct AttentionResult {
  std::vector<T> out, probs, dqkv;
};
template <class T>
AttentionResult<T> run_attention(const k::AttentionLayout& l, const Vec& qkv, const Vec& dout) {
  const std::vector<T> x(qkv.begin(), qkv.end()), d(dout.begin(), dout.end());
  AttentionResult<T> r;
  r.out.assign(dout.size(), T(7));
  r.probs.assign(sz(l.batch * l.heads * l.seq * l.seq), T(7));
  r.dqkv.assign(qkv.size(), T(7));
  k::attention_forward<T>(l, x.data(), r.out.data(), r.probs.data());
  k::attention_backward<T>(l, x.data(), r.probs.data(), r.out.data(), d.data(), r.dqkv.data());
  return r;
}

}  // namespace

// The causal mask is the default and its path is the one it was: megatron() and a default layout
// are causal; causal = true set explicitly gives the default's bits (float32 and float64, forward
// and backward); the causal results still match the causal naive reference (1e-12, as above) with
// exact zeros above the diagonal. Against that, the bidirectional results differ everywhere but
// in each sequence's last query row, which sees every key either way (equal to rounding: 1e-12).
BOOST_AUTO_TEST_CASE(causal_stays_the_default_and_unchanged) {
  BOOST_TEST(k::AttentionLayout{}.causal);
  BOOST_TEST(k::AttentionLayout::megatron(1, 4, 2, 1, 4).causal);
  std::mt19937_64 rng(18);
  for (const AttentionShape& c : {AttentionShape{2, 70, 4, 2, 5}, AttentionShape{1, 130, 4, 1, 8}}) {
    BOOST_TEST_CONTEXT("seq " << c.seq << " groups " << c.groups) {
      const k::AttentionLayout def =
          k::AttentionLayout::megatron(c.batch, c.seq, c.heads, c.groups, c.head_dim);
      k::AttentionLayout causal = def;
      causal.causal = true;
      const k::AttentionLayout none = bidirectional(c);
      const Vec qkv = random_vec(sz(c.batch * c.seq * def.ld), rng);
      const Vec dout = random_vec(sz(c.batch * c.seq * c.heads * c.head_dim), rng);
      const auto a32 = run_attention<float>(def, qkv, dout), b32 = run_attention<float>(causal, qkv, dout);
      const auto a64 = run_attention<double>(def, qkv, dout), b64 = run_attention<double>(causal, qkv, dout);
      BOOST_TEST((a32.out == b32.out && a32.probs == b32.probs && a32.dqkv == b32.dqkv), "float32 bits");
      BOOST_TEST((a64.out == b64.out && a64.probs == b64.probs && a64.dqkv == b64.dqkv), "float64 bits");
      expect_close(b64.out, naive_attention(causal, qkv), 1e-12, 1e-12, "causal out");
      expect_close(b64.dqkv, naive_attention_backward(causal, qkv, dout), 1e-12, 1e-12, "causal dqkv");
      std::size_t above_diagonal_not_zero = 0;
      for (int64_t row = 0; row < c.batch * c.heads * c.seq; ++row)
        for (int64_t t = row % c.seq + 1; t < c.seq; ++t)
          if (b64.probs[sz(row * c.seq + t)] != 0.0) ++above_diagonal_not_zero;
      BOOST_TEST(above_diagonal_not_zero == 0u);

      const auto n64 = run_attention<double>(none, qkv, dout);
      const int64_t width = c.heads * c.head_dim;
      double last_rows = 0, other_rows = 0;
      for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t s = 0; s < c.seq; ++s)
          for (int64_t i = 0; i < width; ++i) {
            const std::size_t e = sz((b * c.seq + s) * width + i);
            const double diff = std::abs(n64.out[e] - b64.out[e]);
            if (s == c.seq - 1)
              last_rows = std::max(last_rows, diff);
            else
              other_rows = std::max(other_rows, diff);
          }
      BOOST_TEST(last_rows <= 1e-12, "the last query row: " << last_rows);
      BOOST_TEST(other_rows > 1e-2, "the other rows differ with the mask: " << other_rows);
    }
  }
}

BOOST_AUTO_TEST_CASE(activations_forward_backward_and_float_accuracy) {
  std::mt19937_64 rng(7);
  const int64_t rows = 3, f = 11, n = rows * f;
  Vec a = random_vec(sz(rows * 2 * f), rng, 2.0);
  // gelu, float64 against the formula.
  Vec x(a.begin(), a.begin() + n), y(sz(n));
  k::gelu_forward<double>(n, x.data(), y.data());
  Vec expected(sz(n));
  for (std::size_t i = 0; i < expected.size(); ++i)
    expected[i] = 0.5 * x[i] * (1 + std::erf(x[i] / std::sqrt(2.0)));
  expect_close(y, expected, 1e-14, 1e-15, "gelu");
  const Vec r = random_vec(sz(n), rng);
  Vec dx(sz(n));
  k::gelu_backward<double>(n, x.data(), r.data(), dx.data());
  const auto gelu_objective = [&] {
    Vec yy(sz(n));
    k::gelu_forward<double>(n, x.data(), yy.data());
    return dot(r, yy);
  };
  expect_close(dx, numeric_grad(x, gelu_objective), kFdRel, kFdAbs, "gelu backward");
  // swiglu
  Vec s(sz(n));
  k::swiglu_forward<double>(rows, f, a.data(), s.data());
  for (int64_t rr = 0; rr < rows; ++rr)
    for (int64_t i = 0; i < f; ++i) {
      const double g = a[sz(rr * 2 * f + i)], u = a[sz(rr * 2 * f + f + i)];
      expected[sz(rr * f + i)] = g / (1 + std::exp(-g)) * u;
    }
  expect_close(s, expected, 1e-14, 1e-15, "swiglu");
  Vec da(a.size(), 99.0);
  k::swiglu_backward<double>(rows, f, a.data(), r.data(), da.data());
  const auto swiglu_objective = [&] {
    Vec yy(sz(n));
    k::swiglu_forward<double>(rows, f, a.data(), yy.data());
    return dot(r, yy);
  };
  expect_close(da, numeric_grad(a, swiglu_objective), kFdRel, kFdAbs, "swiglu backward");

  // float32 paths (vectorized exp and erf approximations) against float64 over [-12, 12], large
  // enough to run in parallel. Tolerance 3e-7 * (|y| + 1): a few float ulps of the value plus the
  // approximations' absolute error (< 1e-7).
  const int64_t m = 24001;
  std::vector<float> xf(sz(2 * m)), yf(sz(m)), dyf(sz(m), 1.0f), dxf(sz(m)), daf(sz(2 * m));
  for (int64_t i = 0; i < 2 * m; ++i)
    xf[sz(i)] = static_cast<float>(-12.0 + 24.0 * static_cast<double>(i % m) / (m - 1));
  Vec xd(xf.begin(), xf.begin() + m), yd(sz(m)), dxd(sz(m)), ones(sz(m), 1.0);
  k::gelu_forward<float>(m, xf.data(), yf.data());
  k::gelu_forward<double>(m, xd.data(), yd.data());
  expect_close(Vec(yf.begin(), yf.end()), yd, 3e-7, 3e-7, "gelu float32");
  k::gelu_backward<float>(m, xf.data(), dyf.data(), dxf.data());
  k::gelu_backward<double>(m, xd.data(), ones.data(), dxd.data());
  expect_close(Vec(dxf.begin(), dxf.end()), dxd, 3e-7, 3e-7, "gelu backward float32");
  Vec ad(xf.begin(), xf.end()), sd(sz(m)), dad(sz(2 * m));
  k::swiglu_forward<float>(1, m, xf.data(), yf.data());
  k::swiglu_forward<double>(1, m, ad.data(), sd.data());
  expect_close(Vec(yf.begin(), yf.end()), sd, 3e-7, 3e-7, "swiglu float32");
  k::swiglu_backward<float>(1, m, xf.data(), dyf.data(), daf.data());
  k::swiglu_backward<double>(1, m, ad.data(), ones.data(), dad.data());
  expect_close(Vec(daf.begin(), daf.end()), dad, 3e-7, 3e-7, "swiglu backward float32");
}

BOOST_AUTO_TEST_CASE(embedding_lookup_and_scatter_add) {
  std::mt19937_64 rng(8);
  for (int64_t n : {9, 300}) {  // 300 x 77: the parallel column split
    const int64_t dim = 77, vocab = 13;
    std::vector<int32_t> ids(sz(n));
    std::uniform_int_distribution<int32_t> id(0, 12);
    for (int32_t& v : ids) v = id(rng);
    ids[0] = ids[1];  // a repeated id
    const Vec w = random_vec(sz(vocab * dim), rng);
    Vec out(sz(n * dim));
    k::embedding_forward<double>(n, dim, ids.data(), w.data(), out.data());
    Vec expected(out.size());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < dim; ++c) expected[sz(i * dim + c)] = w[sz(ids[sz(i)] * dim + c)];
    BOOST_TEST(out == expected, boost::test_tools::per_element());
    const Vec g = random_vec(out.size(), rng);
    Vec dw(w.size(), 1.0), dw_e(w.size(), 1.0);
    k::embedding_backward<double>(n, dim, ids.data(), g.data(), dw.data());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < dim; ++c) dw_e[sz(ids[sz(i)] * dim + c)] += g[sz(i * dim + c)];
    expect_close(dw, dw_e, 1e-13, 1e-13, "scatter-add");
  }
  const std::vector<int32_t> ids = {0, 4, -1, 5, 2};
  BOOST_TEST(k::first_invalid_id(5, ids.data(), 5) == 2);
  BOOST_TEST(k::first_invalid_id(5, ids.data(), 5, true, -1) == 3);
  BOOST_TEST(k::first_invalid_id(5, ids.data(), 6, true, -1) == -1);
}

BOOST_AUTO_TEST_CASE(cross_entropy_loss_gradient_and_ignored_rows) {
  std::mt19937_64 rng(9);
  for (int64_t rows : {7, 400}) {  // 400 x 61: parallel
    const int64_t vocab = 61;
    Vec logits = random_vec(sz(rows * vocab), rng, 3.0);
    for (int64_t v = 0; v < vocab; ++v) logits[sz(v)] += 1000.0;  // row 0 needs the max subtraction
    std::vector<int32_t> t(sz(rows));
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab - 1));
    for (int32_t& v : t) v = id(rng);
    t[1] = -1;
    Vec grad(logits.size(), 99.0);
    const k::CrossEntropyResult res =
        k::cross_entropy_forward<double>(rows, vocab, logits.data(), t.data(), grad.data());
    double sum = 0;
    Vec grad_e(logits.size(), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      if (t[sz(r)] == -1) continue;
      double mx = -1e300, z = 0;
      for (int64_t v = 0; v < vocab; ++v) mx = std::max(mx, logits[sz(r * vocab + v)]);
      for (int64_t v = 0; v < vocab; ++v) z += std::exp(logits[sz(r * vocab + v)] - mx);
      sum += mx + std::log(z) - logits[sz(r * vocab + t[sz(r)])];
      for (int64_t v = 0; v < vocab; ++v)
        grad_e[sz(r * vocab + v)] = std::exp(logits[sz(r * vocab + v)] - mx) / z;
      grad_e[sz(r * vocab + t[sz(r)])] -= 1.0;
    }
    BOOST_TEST(res.count == rows - 1);
    BOOST_TEST(res.loss_sum == sum, boost::test_tools::tolerance(1e-12));
    expect_close(grad, grad_e, 1e-12, 1e-14, "softmax - onehot");
    // float32 (polynomial exp) against float64.
    std::vector<float> lf(logits.begin(), logits.end()), gf(logits.size());
    Vec ld(lf.begin(), lf.end()), gd(logits.size());
    const auto rf = k::cross_entropy_forward<float>(rows, vocab, lf.data(), t.data(), gf.data());
    const auto rd = k::cross_entropy_forward<double>(rows, vocab, ld.data(), t.data(), gd.data());
    BOOST_TEST(rf.loss_sum == rd.loss_sum, boost::test_tools::tolerance(1e-5));
    expect_close(Vec(gf.begin(), gf.end()), gd, 1e-5, 1e-6, "float32 gradient");
    // No gradient buffer: the same loss.
    const auto no_grad = k::cross_entropy_forward<double>(rows, vocab, logits.data(), t.data(), nullptr);
    BOOST_TEST(no_grad.loss_sum == res.loss_sum, boost::test_tools::tolerance(1e-14));
  }
}

// The split cross-entropy over column blocks (tensor parallelism), with the ranks' reductions done
// here by hand (max, then sum), against the whole-row kernel: the same loss and, block by block,
// the same softmax - onehot. 61 columns in blocks of 20, 20 and 21; a target in each block, an
// ignored row, and row 0 needing the max subtraction.
BOOST_AUTO_TEST_CASE(split_cross_entropy_equals_the_whole_rows) {
  std::mt19937_64 rng(10);
  for (int64_t rows : {7, 400}) {  // 400 x 61: parallel
    const int64_t vocab = 61;
    const std::vector<int64_t> first = {0, 20, 40}, cols = {20, 20, 21};
    Vec logits = random_vec(sz(rows * vocab), rng, 3.0);
    for (int64_t v = 0; v < vocab; ++v) logits[sz(v)] += 1000.0;
    std::vector<int32_t> t(sz(rows));
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab - 1));
    for (int32_t& v : t) v = id(rng);
    t[1] = -1;
    Vec whole_grad(logits.size());
    const auto whole =
        k::cross_entropy_forward<double>(rows, vocab, logits.data(), t.data(), whole_grad.data());
    // Each block's logits, contiguous as a rank holds them.
    std::vector<Vec> blocks(3), grads(3);
    for (std::size_t b = 0; b < 3; ++b) {
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols[b]; ++c) blocks[b].push_back(logits[sz(r * vocab + first[b] + c)]);
      grads[b].assign(blocks[b].size(), 0.0);
    }
    Vec max(sz(rows), -1e300), part(sz(rows)), sums(sz(2 * rows), 0.0), part_sums(sz(2 * rows));
    for (std::size_t b = 0; b < 3; ++b) {
      k::split_cross_entropy_max<double>(rows, cols[b], blocks[b].data(), part.data());
      for (std::size_t r = 0; r < part.size(); ++r) max[r] = std::max(max[r], part[r]);
    }
    for (std::size_t b = 0; b < 3; ++b) {
      k::split_cross_entropy_sums<double>(rows, cols[b], first[b], blocks[b].data(), t.data(), max.data(),
                                          grads[b].data(), part_sums.data());
      for (std::size_t i = 0; i < sums.size(); ++i) sums[i] += part_sums[i];
    }
    for (std::size_t b = 0; b < 3; ++b) {
      const auto split = k::split_cross_entropy_finish<double>(rows, cols[b], first[b], t.data(), max.data(),
                                                               sums.data(), grads[b].data());
      BOOST_TEST(split.count == whole.count);
      BOOST_TEST(split.loss_sum == whole.loss_sum, boost::test_tools::tolerance(1e-12));
      Vec expected;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols[b]; ++c) expected.push_back(whole_grad[sz(r * vocab + first[b] + c)]);
      expect_close(grads[b], expected, 1e-12, 1e-14, "block's softmax - onehot");
    }
  }
}

BOOST_AUTO_TEST_CASE(threading_reports) {
  k::use_single_threaded_blas();
  const std::string d = k::threading_description();
  BOOST_TEST_MESSAGE(d);
  BOOST_TEST(d.find("OpenMP") != std::string::npos);
}

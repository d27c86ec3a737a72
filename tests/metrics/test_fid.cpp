// FID against closed forms, the feature statistics against a direct two-pass mean and
// covariance, and the feature network's determinism and cache key.
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "models/metrics/feature_net.h"
#include "models/metrics/fid.h"
#include "runtime/checkpoint.h"
#include "runtime/error.h"
#include "runtime/rng.h"
#include "tests/test_files.h"

using namespace tandem;
using namespace tandem::metrics;

namespace {

using Matrix = std::vector<std::vector<double>>;

Tensor vec(const std::vector<double>& v) {
  return Tensor::from_values({static_cast<int64_t>(v.size())}, v, DType::f64);
}

Tensor mat(const Matrix& m) {
  std::vector<double> flat;
  for (const auto& row : m) flat.insert(flat.end(), row.begin(), row.end());
  return Tensor::from_values({static_cast<int64_t>(m.size()), static_cast<int64_t>(m.size())}, flat,
                             DType::f64);
}

Matrix multiply(const Matrix& a, const Matrix& b) {
  const size_t n = a.size();
  Matrix c(n, std::vector<double>(n, 0.0));
  for (size_t i = 0; i < n; ++i)
    for (size_t k = 0; k < n; ++k)
      for (size_t j = 0; j < n; ++j) c[i][j] += a[i][k] * b[k][j];
  return c;
}

Matrix transpose(const Matrix& a) {
  Matrix t = a;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a.size(); ++j) t[i][j] = a[j][i];
  return t;
}

Matrix diagonal(const std::vector<double>& d) {
  Matrix m(d.size(), std::vector<double>(d.size(), 0.0));
  for (size_t i = 0; i < d.size(); ++i) m[i][i] = d[i];
  return m;
}

// A rotation of R^n: a product of Givens rotations with angles from `gen`.
Matrix random_rotation(size_t n, Generator& gen) {
  Matrix q = diagonal(std::vector<double>(n, 1.0));
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      const double angle = gen.uniform(0.0, 6.283185307179586);
      Matrix g = diagonal(std::vector<double>(n, 1.0));
      g[i][i] = g[j][j] = std::cos(angle);
      g[i][j] = -std::sin(angle);
      g[j][i] = std::sin(angle);
      q = multiply(g, q);
    }
  }
  return q;
}

std::vector<double> apply(const Matrix& q, const std::vector<double>& v) {
  std::vector<double> out(v.size(), 0.0);
  for (size_t i = 0; i < v.size(); ++i)
    for (size_t j = 0; j < v.size(); ++j) out[i] += q[i][j] * v[j];
  return out;
}

std::vector<double> uniforms(size_t n, double lo, double hi, Generator& gen) {
  std::vector<double> v(n);
  for (auto& x : v) x = gen.uniform(lo, hi);
  return v;
}

// |mu1 - mu2|^2 + sum (sqrt a_i - sqrt b_i)^2: FID of Gaussians whose covariances share
// their eigenvectors, with eigenvalues a and b.
double commuting_fid(const std::vector<double>& mu1, const std::vector<double>& mu2,
                     const std::vector<double>& a, const std::vector<double>& b) {
  double out = 0.0;
  for (size_t i = 0; i < mu1.size(); ++i) out += (mu1[i] - mu2[i]) * (mu1[i] - mu2[i]);
  for (size_t i = 0; i < a.size(); ++i)
    out += (std::sqrt(a[i]) - std::sqrt(b[i])) * (std::sqrt(a[i]) - std::sqrt(b[i]));
  return out;
}

}  // namespace

TEST_CASE("fid of diagonal covariances is |dmu|^2 + sum (sqrt a - sqrt b)^2", "[metrics][fid]") {
  Generator gen(11);
  const size_t d = 6;
  const auto mu1 = uniforms(d, -1, 1, gen), mu2 = uniforms(d, -1, 1, gen);
  const auto a = uniforms(d, 0.1, 3, gen), b = uniforms(d, 0.1, 3, gen);
  const double expected = commuting_fid(mu1, mu2, a, b);
  CHECK(fid(vec(mu1), mat(diagonal(a)), vec(mu2), mat(diagonal(b))) == Approx(expected).epsilon(1e-12));
  // A zero eigenvalue (a singular covariance) is allowed.
  auto a0 = a;
  a0[2] = 0.0;
  CHECK(fid(vec(mu1), mat(diagonal(a0)), vec(mu2), mat(diagonal(b))) ==
        Approx(commuting_fid(mu1, mu2, a0, b)).epsilon(1e-12));
}

TEST_CASE("fid of rotated commuting covariances keeps the diagonal closed form", "[metrics][fid]") {
  Generator gen(12);
  const size_t d = 5;
  const Matrix q = random_rotation(d, gen);
  const auto mu1 = uniforms(d, -2, 2, gen), mu2 = uniforms(d, -2, 2, gen);
  const auto a = uniforms(d, 0.05, 4, gen), b = uniforms(d, 0.05, 4, gen);
  const Matrix c1 = multiply(multiply(q, diagonal(a)), transpose(q));
  const Matrix c2 = multiply(multiply(q, diagonal(b)), transpose(q));
  CHECK(fid(vec(mu1), mat(c1), vec(mu2), mat(c2)) == Approx(commuting_fid(mu1, mu2, a, b)).epsilon(1e-10));
}

TEST_CASE("fid of non-commuting 2x2 covariances matches the explicit 2x2 formula", "[metrics][fid]") {
  // For 2x2 symmetric PSD M, tr sqrt(M) = sqrt(tr M + 2 sqrt(det M)); with M = A^1/2 B A^1/2,
  // tr M = tr(AB) and det M = det A det B.
  const Matrix a = {{2.0, 0.7}, {0.7, 1.0}};
  const Matrix b = {{0.5, -0.3}, {-0.3, 1.5}};
  const std::vector<double> mu1 = {0.3, -1.0}, mu2 = {1.1, 0.4};
  const Matrix ab = multiply(a, b);
  REQUIRE(ab != multiply(b, a));
  const double det_a = a[0][0] * a[1][1] - a[0][1] * a[1][0];
  const double det_b = b[0][0] * b[1][1] - b[0][1] * b[1][0];
  const double tr_sqrt = std::sqrt(ab[0][0] + ab[1][1] + 2.0 * std::sqrt(det_a * det_b));
  const double dmu = (mu1[0] - mu2[0]) * (mu1[0] - mu2[0]) + (mu1[1] - mu2[1]) * (mu1[1] - mu2[1]);
  const double expected = dmu + a[0][0] + a[1][1] + b[0][0] + b[1][1] - 2.0 * tr_sqrt;
  CHECK(fid(vec(mu1), mat(a), vec(mu2), mat(b)) == Approx(expected).epsilon(1e-12));
  CHECK(fid(vec(mu2), mat(b), vec(mu1), mat(a)) == Approx(expected).epsilon(1e-12));
}

TEST_CASE("fid of general covariances is rotation invariant, symmetric and 0 for equal Gaussians",
          "[metrics][fid]") {
  Generator gen(13);
  const size_t d = 7;
  auto random_psd = [&] {
    Matrix f(d, std::vector<double>(d));
    for (auto& row : f) row = uniforms(d, -1, 1, gen);
    return multiply(f, transpose(f));
  };
  const Matrix c1 = random_psd(), c2 = random_psd();
  const auto mu1 = uniforms(d, -1, 1, gen), mu2 = uniforms(d, -1, 1, gen);
  const double value = fid(vec(mu1), mat(c1), vec(mu2), mat(c2));
  CHECK(value > 0.0);
  CHECK(fid(vec(mu2), mat(c2), vec(mu1), mat(c1)) == Approx(value).epsilon(1e-10));
  const Matrix q = random_rotation(d, gen);
  const Matrix r1 = multiply(multiply(q, c1), transpose(q)), r2 = multiply(multiply(q, c2), transpose(q));
  CHECK(fid(vec(apply(q, mu1)), mat(r1), vec(apply(q, mu2)), mat(r2)) == Approx(value).epsilon(1e-10));
  CHECK(std::abs(fid(vec(mu1), mat(c1), vec(mu1), mat(c1))) < 1e-10);
  // sqrt_psd squares back to the matrix.
  const Tensor root = sqrt_psd(mat(c1));
  Matrix s(d, std::vector<double>(d));
  for (size_t i = 0; i < d; ++i)
    for (size_t j = 0; j < d; ++j) s[i][j] = root.at(static_cast<int64_t>(i * d + j));
  const Matrix back = multiply(s, s);
  for (size_t i = 0; i < d; ++i)
    for (size_t j = 0; j < d; ++j) CHECK(back[i][j] == Approx(c1[i][j]).margin(1e-10));
  CHECK_THROWS_WITH(fid(vec(mu1), mat(c1), vec({1.0, 2.0}), mat(c2)), Catch::Contains("mu2 [2]"));
}

TEST_CASE("FeatureStats equals a direct two-pass float64 mean and covariance", "[metrics][stats]") {
  const int64_t n = 257, d = 9;
  Tensor x = randn_rows({n, d}, 0, 21, 0, DType::f64);
  double* p = x.data<double>();
  for (int64_t i = 0; i < n * d; ++i)
    p[i] = 3.0 + 0.5 * p[i] * (1 + i % d);  // an offset mean, unequal spreads
  FeatureStats stats(d);
  // Uneven pieces, one of them empty, one float32 (exactly representable? no: converted).
  stats.add(x.narrow_rows(0, 100));
  stats.add(x.narrow_rows(100, 0));
  stats.add(x.narrow_rows(100, 157));
  const GaussianStats g = stats.gaussian();
  REQUIRE(g.count == n);
  std::vector<double> mean(static_cast<size_t>(d), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) mean[static_cast<size_t>(j)] += p[i * d + j] / static_cast<double>(n);
  for (int64_t j = 0; j < d; ++j) CHECK(g.mean.at(j) == Approx(mean[static_cast<size_t>(j)]).epsilon(1e-12));
  for (int64_t j = 0; j < d; ++j) {
    for (int64_t k = 0; k < d; ++k) {
      double c = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        c += (p[i * d + j] - mean[static_cast<size_t>(j)]) * (p[i * d + k] - mean[static_cast<size_t>(k)]);
      }
      c /= static_cast<double>(n - 1);  // unbiased, as the standard FID
      CHECK(g.cov.at(j * d + k) == Approx(c).epsilon(1e-10).margin(1e-12));
    }
  }
  CHECK_THROWS_WITH(stats.add(Tensor::zeros({3, d + 1})), Catch::Contains("[3, 10]"));
  FeatureStats one(d);
  one.add(x.narrow_rows(0, 1));
  CHECK_THROWS_WITH(one.gaussian(), Catch::Contains("at least 2 samples"));
}

TEST_CASE("the feature network is deterministic and its cache key names data, net and training",
          "[metrics][feature-net]") {
  FeatureNet a(5), b(5), c(6);
  const Tensor images = randn_rows({12, 1, 28, 28}, 0, 3, 0);
  // Same seed, rows split anywhere (given their global index): bitwise equal.
  const Tensor fa = embed(a, images, 8);
  REQUIRE(fa.shape() == Shape{12, kFeatureDim});
  auto fb = embed(b, images.narrow_rows(0, 5), 8, 0).to_vector();
  const auto rest = embed(b, images.narrow_rows(5, 7), 8, 5).to_vector();
  fb.insert(fb.end(), rest.begin(), rest.end());
  CHECK(fa.to_vector() == fb);
  CHECK(fa.to_vector() != embed(c, images).to_vector());
  CHECK_THROWS_WITH(embed(a, Tensor::zeros({2, 3, 28, 28})), Catch::Contains("[2, 3, 28, 28]"));

  const FeatureNetConfig base;
  const std::string h = feature_net_hash("data 1", base);
  CHECK(h.size() == 16);
  CHECK(short_hash(h) == h.substr(0, 8));
  CHECK(feature_net_hash("data 1", base) == h);
  CHECK(feature_net_hash("data 2", base) != h);
  FeatureNetConfig other = base;
  other.seed += 1;
  CHECK(feature_net_hash("data 1", other) != h);
  other = base;
  other.epochs += 1;
  CHECK(feature_net_hash("data 1", other) != h);
}

TEST_CASE(
    "a cached feature network is verified: its recipe, its weights and its numbers, naming what is wrong",
    "[metrics][feature-net]") {
  testing::TempDir dir("fid-verify");
  const FeatureNetConfig config;
  const std::string hash = feature_net_hash("data 1", config);
  auto at = [&](const std::string& name, uint64_t seed) {
    LoadedFeatureNet net;
    net.net = std::make_shared<FeatureNet>(seed);
    net.hash = hash;
    net.path = dir.file(name);
    return net;
  };
  LoadedFeatureNet good = at("good.ckpt", config.seed);
  good.test_accuracy = 0.8125;
  save_feature_net(good, config);
  LoadedFeatureNet reader = at("good.ckpt", config.seed + 1);  // other weights until loaded
  CHECK(load_verified_feature_net(reader) == "");
  CHECK(weights_hash(*reader.net) == weights_hash(*good.net));
  CHECK(reader.test_accuracy == 0.8125);

  // Another network's valid file copied over this name: its recorded recipe gives it away.
  LoadedFeatureNet other = at("swapped.ckpt", config.seed);
  other.hash = feature_net_hash("data 2", config);
  save_feature_net(other, config);
  LoadedFeatureNet swapped = at("swapped.ckpt", config.seed);
  CHECK_THAT(load_verified_feature_net(swapped),
             Catch::StartsWith("it records the recipe " + other.hash + ", not " + hash));

  // Weights changed after the file was written; a number that is not one; no identity at all.
  auto rewrite = [&](const std::string& name, const std::function<void(SafetensorsFile&)>& change) {
    SafetensorsFile file = load_safetensors(good.path);
    change(file);
    save_safetensors(dir.file(name), file.tensors, file.metadata);
    LoadedFeatureNet net = at(name, config.seed);
    return load_verified_feature_net(net);
  };
  CHECK_THAT(
      rewrite("tampered.ckpt", [](SafetensorsFile& f) { f.tensors.begin()->second.fill_(0.5); }),
      Catch::Contains("not the recorded " + weights_hash(*good.net) + " (changed after it was written)"));
  CHECK(rewrite("accuracy.ckpt", [](SafetensorsFile& f) { f.metadata["fid.test_accuracy"] = "about 0.8"; }) ==
        "metadata key fid.test_accuracy is 'about 0.8', not a number");
  CHECK_THAT(rewrite("bare.ckpt", [](SafetensorsFile& f) { f.metadata.clear(); }),
             Catch::StartsWith("it records the recipe (none)"));
}

TEST_CASE("statistics that cannot be a Gaussian's are named", "[metrics][fid]") {
  const int64_t d = 3;
  auto stats = [&](int64_t count, std::vector<double> mean, std::vector<double> cov) {
    return GaussianStats{
        .count = count, .mean = vec(mean), .cov = Tensor::from_values({d, d}, cov, DType::f64)};
  };
  const std::vector<double> identity = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  CHECK(check_gaussian(stats(10, {0, 1, 2}, identity), d) == "");
  CHECK(check_gaussian(stats(10, {0, 1, 2}, std::vector<double>(9, 0.0)), d) == "");  // a point mass
  CHECK(check_gaussian(stats(-7, {0, 1, 2}, identity), d) == "a count of -7 samples");
  CHECK(check_gaussian(stats(10, {0, NAN, 2}, identity), d) == "a mean that is not finite");
  CHECK(check_gaussian(stats(10, {0, 1, 2}, std::vector<double>(9, -1.0)), d)
            .starts_with("a covariance that is not positive semi-definite"));
  CHECK(check_gaussian(stats(10, {0, 1, 2}, {1, 0.5, 0, 0, 1, 0, 0, 0, 1}), d) ==
        "a covariance that is not symmetric");
  CHECK(check_gaussian(stats(10, {0, 1, 2}, identity), 4) == "a mean of shape [3], not [4]");
}

TEST_CASE("a few feature-network steps on a small set lower its loss and beat chance",
          "[metrics][feature-net]") {
  // Ten classes, each a fixed random image plus noise: learnable in one short epoch.
  data::ImageDataset set;
  const int64_t n = 640;
  const Tensor prototypes = randn_rows({10, 1, 28, 28}, 0, 8, 0);
  set.images = randn_rows({n, 1, 28, 28}, 0, 9, 0);
  float* x = set.images.data<float>();
  const float* proto = prototypes.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    set.labels.push_back(i % 10);
    for (int64_t k = 0; k < 784; ++k) x[i * 784 + k] = 0.5f * x[i * 784 + k] + proto[(i % 10) * 784 + k];
  }
  FeatureNet net(1);
  const double before = test_accuracy(net, set);
  FeatureNetConfig config;
  config.epochs = 3;
  config.batch = 32;
  train_feature_net(net, set, config);
  const double after = test_accuracy(net, set);
  INFO("accuracy before " << before << ", after " << after);
  CHECK(after > 0.9);
}

#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "models/data/dataset.h"
#include "models/data/sampler.h"
#include "tests/test_files.h"
using namespace tandem;
using namespace tandem::data;
namespace fs = std::filesystem;
using namespace tandem::testing;

namespace {

// 5 images of 4x3 whose pixels count up from 3*k, wrapping, with 0 and 255 present.
IdxArray small_images() {
  IdxArray a;
  a.dims = {5, 4, 3};
  for (int i = 0; i < 60; ++i) a.data.push_back(static_cast<uint8_t>((i * 37) % 256));
  a.data[0] = 0;
  a.data[1] = 255;
  return a;
}

IdxArray small_labels(int count = 5) {
  IdxArray a;
  a.dims = {count};
  for (int i = 0; i < count; ++i) a.data.push_back(static_cast<uint8_t>(9 - i));
  return a;
}

// Plain (uncompressed) IDX bytes; zlib reads plain files as well as gzip ones.
std::string plain_idx(const IdxArray& a) {
  std::string s = {0, 0, 8, static_cast<char>(a.dims.size())};
  for (int64_t d : a.dims) {
    for (int shift = 24; shift >= 0; shift -= 8) s += static_cast<char>((d >> shift) & 0xff);
  }
  s.append(a.data.begin(), a.data.end());
  return s;
}

double distance_to_nearest_mode(double x, double y) {
  double best = 1e9;
  for (const auto& [mx, my] : ring8_modes()) best = std::min(best, std::hypot(x - mx, y - my));
  return best;
}

}  // namespace

TEST_CASE("ring8 modes lie on a circle of radius 2", "[datasets][ring8]") {
  auto modes = ring8_modes();
  REQUIRE(modes.size() == 8);
  CHECK(modes[0].first == Approx(2.0));
  CHECK(modes[0].second == Approx(0.0).margin(1e-12));
  CHECK(modes[2].first == Approx(0.0).margin(1e-12));
  CHECK(modes[2].second == Approx(2.0));
  CHECK(modes[5].first == Approx(-std::sqrt(2.0)));
  CHECK(modes[5].second == Approx(-std::sqrt(2.0)));
}

TEST_CASE("ring8 samples sit near the modes, evenly spread, reproducibly", "[datasets][ring8]") {
  Generator gen(3);
  const int64_t n = 16000;
  Tensor s = make_ring8(n, gen);
  CHECK(s.shape() == Shape{n, 2});
  CHECK(s.dtype() == DType::f32);
  std::vector<double> v = s.to_vector();
  double max_dist = 0, sum_sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    double d = distance_to_nearest_mode(v[static_cast<size_t>(2 * i)], v[static_cast<size_t>(2 * i + 1)]);
    max_dist = std::max(max_dist, d);
    sum_sq += d * d;
  }
  CHECK(max_dist < 6 * kRing8Sigma);
  // E[d^2] = 2 sigma^2 for an isotropic 2-D Gaussian.
  CHECK(std::sqrt(sum_sq / n / 2) == Approx(kRing8Sigma).epsilon(0.03));
  Ring8Quality q = ring8_quality(s);
  for (int64_t c : q.per_mode_counts) CHECK(std::abs(c - n / 8) < n / 8 / 10);

  Generator a(3), b(3), c(4);
  CHECK((make_ring8(100, a).to_vector() == make_ring8(100, b).to_vector()));
  CHECK((make_ring8(100, a).to_vector() != make_ring8(100, c).to_vector()));
}

TEST_CASE("ring8 quality: perfect, collapsed and off-target samples", "[datasets][ring8]") {
  Generator gen(11);
  Ring8Quality perfect = ring8_quality(make_ring8(2500, gen));
  CHECK(perfect.count == 2500);
  CHECK(perfect.modes_covered == 8);
  // P(radius <= 3 sigma) = 1 - exp(-9/2) = 98.9% for a 2-D Gaussian.
  CHECK(perfect.high_quality_fraction > 0.975);
  CHECK(perfect.high_quality_fraction < 1.0);

  auto modes = ring8_modes();
  std::vector<double> collapsed;
  for (int i = 0; i < 1000; ++i) {
    collapsed.push_back(modes[3].first + 0.01 * (i % 3 - 1));
    collapsed.push_back(modes[3].second);
  }
  Ring8Quality one = ring8_quality(Tensor::from_values({1000, 2}, collapsed));
  CHECK(one.modes_covered == 1);
  CHECK(one.per_mode_counts[3] == 1000);
  CHECK(one.high_quality_fraction == 1.0);

  // The 1% rule: 10 of 1000 samples cover a mode, 9 do not.
  for (int extra : {10, 9}) {
    std::vector<double> v;
    for (int i = 0; i < 1000; ++i) {
      const auto& m = i < extra ? modes[6] : modes[0];
      v.push_back(m.first);
      v.push_back(m.second);
    }
    Ring8Quality q = ring8_quality(Tensor::from_values({1000, 2}, v, DType::f64));
    CHECK(q.modes_covered == (extra == 10 ? 2 : 1));
  }

  // Between the modes, and just outside 3 sigma: covered nothing.
  std::vector<double> off = {0.0, 0.0, 2.0 + 3.05 * kRing8Sigma, 0.0, 2.0 + 2.95 * kRing8Sigma, 0.0,
                             1.0, 1.0};
  Ring8Quality q = ring8_quality(Tensor::from_values({4, 2}, off));
  CHECK(q.high_quality_fraction == 0.25);
  CHECK(q.per_mode_counts[0] == 1);
  CHECK_THROWS_WITH(ring8_quality(Tensor::zeros({4, 3})), Catch::Contains("samples must be [N, 2]"));
}

TEST_CASE("IDX files round trip through gzip and load as images in [-1, 1]", "[datasets][idx]") {
  TempDir dir;
  const std::string images = dir.file("images-idx3-ubyte.gz"), labels = dir.file("labels-idx1-ubyte.gz");
  write_idx_u8(images, small_images());
  write_idx_u8(labels, small_labels());
  std::string raw = read_bytes(images);
  CHECK(static_cast<unsigned char>(raw[0]) == 0x1f);  // gzip
  CHECK(static_cast<unsigned char>(raw[1]) == 0x8b);

  IdxArray back = read_idx_u8(images);
  CHECK(back.dims == small_images().dims);
  CHECK(back.data == small_images().data);

  ImageDataset ds = load_idx_images(images, labels);
  CHECK(ds.size() == 5);
  CHECK(ds.images.shape() == Shape{5, 1, 4, 3});
  CHECK(ds.labels == std::vector<int64_t>{9, 8, 7, 6, 5});
  std::vector<double> px = ds.images.to_vector();
  CHECK(px[0] == -1.0);
  CHECK(px[1] == 1.0);
  for (size_t i = 0; i < px.size(); ++i) {
    CHECK(px[i] == Approx(small_images().data[i] / 127.5 - 1.0).margin(1e-6));
  }

  // Plain files are read too.
  write_bytes(images, plain_idx(small_images()));
  CHECK(read_idx_u8(images).data == small_images().data);
}

TEST_CASE("IDX truncated or corrupt files are errors naming the file", "[datasets][idx][errors]") {
  TempDir dir;
  const std::string images = dir.file("images.gz"), labels = dir.file("labels.gz");
  write_idx_u8(labels, small_labels());

  write_idx_u8(images, small_images());
  fs::resize_file(images, fs::file_size(images) / 2);
  CHECK_THROWS_WITH(read_idx_u8(images), Catch::Contains(images + ": ") && Catch::Contains("truncated"));
  CHECK_THROWS_WITH(load_idx_images(images, labels),
                    Catch::Contains(images + ": ") && Catch::Contains("truncated"));

  write_bytes(images, plain_idx(small_images()).substr(0, 16 + 50));
  CHECK_THROWS_WITH(read_idx_u8(images),
                    Catch::Contains(images + ": truncated: dimensions [5, 4, 3] need 60 bytes "
                                             "of data after the header, the file has 50"));
  write_bytes(images, plain_idx(small_images()).substr(0, 10));
  CHECK_THROWS_WITH(read_idx_u8(images),
                    Catch::Contains(images + ": truncated: the header announces 3 dimensions"));
  write_bytes(images, "");
  CHECK_THROWS_WITH(read_idx_u8(images), Catch::Contains(images + ": truncated: 0 bytes"));
  write_bytes(images, plain_idx(small_images()) + "x");
  CHECK_THROWS_WITH(read_idx_u8(images),
                    Catch::Contains(images + ": corrupt: unexpected data after the 60 bytes"));
  write_bytes(images, "GIF89a....");
  CHECK_THROWS_WITH(read_idx_u8(images), Catch::Contains(images + ": bad magic 0x47494638"));

  // A gzip stream with damaged deflate data.
  write_idx_u8(images, small_images());
  std::string gz = read_bytes(images);
  for (size_t i = 12; i < gz.size() - 8; ++i) gz[i] = static_cast<char>(gz[i] ^ 0x5a);
  write_bytes(images, gz);
  CHECK_THROWS_WITH(read_idx_u8(images), Catch::Contains(images + ": corrupt or truncated"));
  // Intact data, damaged CRC in the gzip trailer.
  write_idx_u8(images, small_images());
  gz = read_bytes(images);
  gz[gz.size() - 8] = static_cast<char>(gz[gz.size() - 8] ^ 1);
  write_bytes(images, gz);
  CHECK_THROWS_WITH(read_idx_u8(images), Catch::Contains(images + ": corrupt or truncated") &&
                                             Catch::Contains("incorrect data check"));

  // Labels where images belong, and counts that disagree.
  CHECK_THROWS_WITH(load_idx_images(labels, labels),
                    Catch::Contains(labels + ": bad magic 0x00000801, expected 0x00000803"));
  write_idx_u8(images, small_images());
  write_idx_u8(labels, small_labels(4));
  CHECK_THROWS_WITH(
      load_idx_images(images, labels),
      Catch::Contains(images + ": dimension mismatch: 5 images but " + labels + " has 4 labels"));
  CHECK_THROWS_WITH(read_idx_u8(dir.file("absent.gz")),
                    Catch::Contains(dir.file("absent.gz") + ": cannot open"));
  CHECK_THROWS_WITH(write_idx_u8(images, IdxArray{{2, 2}, {1, 2, 3}}),
                    Catch::Contains("need 4 bytes, got 3"));
}

TEST_CASE("Fashion-MNIST: a missing file names it, the package and --data-dir",
          "[datasets][fashion-mnist][errors]") {
  TempDir dir;
  const std::string expected = dir.file("train-images-idx3-ubyte.gz");
  CHECK_THROWS_WITH(load_fashion_mnist(dir.path.string()),
                    Catch::Contains("Fashion-MNIST file " + expected + " not found") &&
                        Catch::Contains("Debian package dataset-fashion-mnist") &&
                        Catch::Contains("--data-dir"));
  // Images present, labels missing: the labels file is named.
  IdxArray img;
  img.dims = {2, 28, 28};
  img.data.assign(2 * 28 * 28, 7);
  write_idx_u8(dir.file("t10k-images-idx3-ubyte.gz"), img);
  CHECK_THROWS_WITH(load_fashion_mnist(dir.path.string(), false),
                    Catch::Contains(dir.file("t10k-labels-idx1-ubyte.gz") + " not found"));
  IdxArray lab;
  lab.dims = {2};
  lab.data = {3, 12};
  write_idx_u8(dir.file("t10k-labels-idx1-ubyte.gz"), lab);
  CHECK_THROWS_WITH(load_fashion_mnist(dir.path.string(), false), Catch::Contains("label 12 at index 1"));
  lab.data = {3, 4};
  write_idx_u8(dir.file("t10k-labels-idx1-ubyte.gz"), lab);
  ImageDataset ds = load_fashion_mnist(dir.path.string(), false);
  CHECK(ds.size() == 2);
}

TEST_CASE("Fashion-MNIST: the installed dataset loads", "[datasets][fashion-mnist]") {
  if (!fs::exists(kFashionMnistDefaultDir)) {
    WARN("skipped: " << kFashionMnistDefaultDir << " is absent (Debian package dataset-fashion-mnist)");
    return;
  }
  ImageDataset train = load_fashion_mnist();
  CHECK(train.images.shape() == Shape{60000, 1, 28, 28});
  REQUIRE(train.labels.size() == 60000);
  const float* p = train.images.data<float>();
  auto [lo, hi] = std::minmax_element(p, p + train.images.numel());
  CHECK(*lo == -1.0f);
  CHECK(*hi == 1.0f);
  std::vector<int64_t> per_class(10, 0);
  for (int64_t l : train.labels) ++per_class[static_cast<size_t>(l)];
  for (int64_t c : per_class) CHECK(c == 6000);
  // Images are garments on a black background: border pixels are mostly -1, the centre is not.
  double border = 0, centre = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    border += p[i * 784];
    centre += p[i * 784 + 14 * 28 + 14];
  }
  CHECK(border / 1000 < -0.95);
  CHECK(centre / 1000 > -0.5);

  ImageDataset test = load_fashion_mnist(kFashionMnistDefaultDir, false);
  CHECK(test.images.shape() == Shape{10000, 1, 28, 28});
}

TEST_CASE("sampler shards are disjoint, cover the epoch and have equal batch counts", "[sampler]") {
  const int64_t n = 1000, batch = 32;
  const int world = 3;
  std::vector<DistributedSampler> ranks;
  for (int r = 0; r < world; ++r) ranks.emplace_back(n, world, r, batch, 1234);
  for (const auto& s : ranks) CHECK(s.batches_per_epoch() == 10);  // floor(1000 / 96)

  for (int64_t epoch : {0, 1, 7}) {
    const std::vector<int64_t> perm = ranks[0].permutation(epoch);
    std::vector<int64_t> sorted = perm;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < n; ++i) REQUIRE(sorted[static_cast<size_t>(i)] == i);

    std::multiset<int64_t> seen;
    for (int r = 0; r < world; ++r) {
      CHECK((ranks[static_cast<size_t>(r)].permutation(epoch) == perm));  // same on every rank
      for (int64_t i = 0; i < ranks[static_cast<size_t>(r)].batches_per_epoch(); ++i) {
        std::vector<int64_t> b = ranks[static_cast<size_t>(r)].batch_indices(epoch, i);
        REQUIRE(b.size() == static_cast<size_t>(batch));
        // The data-parallel layout: global step i, rank r's slice.
        CHECK(std::equal(b.begin(), b.end(), perm.begin() + (i * world + r) * batch));
        seen.insert(b.begin(), b.end());
      }
    }
    std::multiset<int64_t> expected(perm.begin(), perm.begin() + world * 10 * batch);
    CHECK((seen == expected));  // union == first W*batches*B of the permutation, no duplicates
    CHECK(std::set<int64_t>(seen.begin(), seen.end()).size() == seen.size());
  }

  // Epochs reshuffle; the seed decides; set_epoch drives batch_indices(i).
  CHECK((ranks[0].permutation(0) != ranks[0].permutation(1)));
  DistributedSampler same(n, world, 0, batch, 1234), other(n, world, 0, batch, 1235);
  CHECK(same.batch_indices(3, 2) == ranks[0].batch_indices(3, 2));
  CHECK(other.batch_indices(3, 2) != ranks[0].batch_indices(3, 2));
  same.set_epoch(5);
  CHECK(same.epoch() == 5);
  CHECK(same.batch_indices(4) == ranks[0].batch_indices(5, 4));
  CHECK(same.batch_indices(4) != ranks[0].batch_indices(4, 4));
}

TEST_CASE("sampler without drop_last pads the last step by wrapping around", "[sampler]") {
  const int64_t n = 100, batch = 16;
  std::set<int64_t> seen;
  int64_t total = 0;
  for (int r = 0; r < 2; ++r) {
    DistributedSampler s(n, 2, r, batch, 9, false);
    CHECK(s.batches_per_epoch() == 4);  // ceil(100 / 32)
    for (int64_t i = 0; i < 4; ++i) {
      auto b = s.batch_indices(2, i);
      CHECK(b.size() == static_cast<size_t>(batch));
      seen.insert(b.begin(), b.end());
      total += static_cast<int64_t>(b.size());
    }
  }
  CHECK(seen.size() == 100);  // every row, 28 of them twice
  CHECK(total == 128);
  // The padding is the start of the permutation again: rank 0's last batch is positions
  // 96..99 then 0..11, rank 1's is 12..27.
  const std::vector<int64_t> perm = DistributedSampler(n, 2, 0, batch, 9, false).permutation(2);
  std::vector<int64_t> last0(perm.begin() + 96, perm.end()), last1(perm.begin() + 12, perm.begin() + 28);
  last0.insert(last0.end(), perm.begin(), perm.begin() + 12);
  CHECK((DistributedSampler(n, 2, 0, batch, 9, false).batch_indices(2, 3) == last0));
  CHECK((DistributedSampler(n, 2, 1, batch, 9, false).batch_indices(2, 3) == last1));
  DistributedSampler tiny(3, 2, 1, 4, 9, false);  // fewer rows than one step
  CHECK(tiny.batches_per_epoch() == 1);
  CHECK(tiny.batch_indices(0, 0).size() == 4);
}

TEST_CASE("sampler errors name the problem", "[sampler][errors]") {
  CHECK_THROWS_WITH(DistributedSampler(100, 2, 0, 0, 1),
                    Catch::Contains("batch size per rank must be positive, got 0"));
  CHECK_THROWS_WITH(DistributedSampler(100, 2, 0, -3, 1), Catch::Contains("must be positive, got -3"));
  CHECK_THROWS_WITH(
      DistributedSampler(100, 2, 0, 64, 1),
      Catch::Contains("batch 64 per rank needs at least 128 samples for 2 ranks; the dataset has 100, "
                      "a shard of 50 per rank"));
  CHECK_THROWS_WITH(
      DistributedSampler(2, 3, 2, 1, 1),  // more ranks than samples: an empty shard
      Catch::Contains("needs at least 3 samples for 3 ranks; the dataset has 2, a shard of 0 per rank"));
  CHECK_NOTHROW(DistributedSampler(128, 2, 1, 64, 1));
  CHECK_THROWS_WITH(DistributedSampler(100, 2, 2, 8, 1), Catch::Contains("rank 2 is outside [0, 2)"));
  CHECK_THROWS_WITH(DistributedSampler(100, 0, 0, 8, 1), Catch::Contains("world size must be positive"));
  CHECK_THROWS_WITH(DistributedSampler(0, 1, 0, 8, 1, false), Catch::Contains("the dataset is empty"));
  DistributedSampler s(100, 2, 0, 8, 1);
  CHECK_THROWS_WITH(s.batch_indices(0, 6), Catch::Contains("batch 6 is outside [0, 6)"));
}

TEST_CASE("gather_rows stacks the chosen rows of any dtype", "[sampler]") {
  std::vector<double> v(30);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  for (DType dt : {DType::f32, DType::f64, DType::f16}) {
    Tensor data = Tensor::from_values({5, 2, 3}, v, dt);
    Tensor g = gather_rows(data, {4, 0, 4});
    CHECK(g.shape() == Shape{3, 2, 3});
    CHECK(g.dtype() == dt);
    std::vector<double> got = g.to_vector();
    for (int64_t k = 0; k < 6; ++k) {
      CHECK(got[static_cast<size_t>(k)] == 24 + k);
      CHECK(got[static_cast<size_t>(6 + k)] == k);
      CHECK(got[static_cast<size_t>(12 + k)] == 24 + k);
    }
  }
  Tensor data = Tensor::from_values({3}, {1, 2, 3});
  CHECK(gather_rows(data, {}).shape() == Shape{0});
  CHECK_THROWS_WITH(gather_rows(data, {0, 3}), Catch::Contains("index 3 (position 1) is outside [0, 3)"));
  CHECK_THROWS_WITH(gather_rows(data, {-1}), Catch::Contains("index -1"));
}

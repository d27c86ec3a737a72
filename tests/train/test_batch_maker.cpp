// The batch maker: every batch is a function of (seed, rank, iteration) alone, ranks draw
// different data and noise, image batches are the sampler's shard of the epoch, and W ranks
// together hold the one-process batch at W times the rows.
#include <catch2/catch.hpp>
#include <cmath>
#include <set>
#include <vector>

#include "models/data/dataset.h"
#include "models/data/image_resize.h"
#include "models/data/sampler.h"
#include "models/train/batch_maker.h"
#include "models/train/batch_prefetcher.h"
#include "tests/test_files.h"

using namespace tandem;
using namespace tandem::models;

namespace {

BatchSpec ring8_spec(uint64_t seed, int rank) {
  return BatchSpec{.seed = seed, .world_size = 2, .rank = rank, .batch = 16, .noise_dim = 3};
}

bool same(const Batch& a, const Batch& b) {
  return a.inputs.shape() == b.inputs.shape() && a.inputs.to_vector() == b.inputs.to_vector() &&
         a.targets.shape() == b.targets.shape() && a.targets.to_vector() == b.targets.to_vector() &&
         a.aux.shape() == b.aux.shape() && a.aux.to_vector() == b.aux.to_vector();
}

// 12 images of 1x2x2 whose pixels all hold the image's index: a batch row names its source.
data::ImageDataset numbered_images(int64_t count) {
  data::ImageDataset d;
  d.images = Tensor::empty({count, 1, 2, 2});
  for (int64_t i = 0; i < count * 4; ++i) d.images.data<float>()[i] = static_cast<float>(i / 4);
  d.labels.assign(static_cast<size_t>(count), 0);
  return d;
}

// numbered_images with labels that are not 0: (3 * index) % 7, so a label names its row too.
data::ImageDataset labelled_images(int64_t count) {
  data::ImageDataset d = numbered_images(count);
  for (int64_t i = 0; i < count; ++i) d.labels[static_cast<size_t>(i)] = (3 * i) % 7;
  return d;
}

std::vector<int64_t> labels_of(const Tensor& labels) {
  REQUIRE(labels.dtype() == DType::i64);
  return std::vector<int64_t>(labels.data<int64_t>(), labels.data<int64_t>() + labels.numel());
}

std::vector<int64_t> row_ids(const Tensor& inputs) {
  std::vector<int64_t> ids;
  for (int64_t r = 0; r < inputs.size(0); ++r) ids.push_back(static_cast<int64_t>(inputs.at(r * 4)));
  return ids;
}

// Rows [begin, begin + count) of a tensor, as values.
std::vector<double> rows_of(const Tensor& t, int64_t begin, int64_t count) {
  return t.narrow_rows(begin, count).to_vector();
}

}  // namespace

TEST_CASE("a batch depends only on (seed, rank, iteration)", "[batch_maker]") {
  const BatchMaker a(ring8_spec(5, 0)), b(ring8_spec(5, 0));
  Batch first = a.make(7);
  for (int64_t it : {0, 3, 100}) a.make(it);  // no state carried from call to call
  CHECK(same(a.make(7), first));
  CHECK(same(b.make(7), first));  // nor from one maker to another
  CHECK(first.inputs.shape() == Shape{16, 2});
  CHECK(first.targets.shape() == Shape{16, 3});
  CHECK(first.targets.dtype() == DType::f32);
  CHECK(first.aux.shape() == Shape{16});  // WGAN-GP's mixing coefficients, in [0, 1)
  for (double m : first.aux.to_vector()) CHECK((m >= 0 && m < 1));

  Batch other_rank = BatchMaker(ring8_spec(5, 1)).make(7);
  CHECK(other_rank.inputs.to_vector() != first.inputs.to_vector());
  CHECK(other_rank.targets.to_vector() != first.targets.to_vector());
  CHECK(other_rank.aux.to_vector() != first.aux.to_vector());
  Batch other_iteration = a.make(8);
  CHECK(other_iteration.inputs.to_vector() != first.inputs.to_vector());
  CHECK(other_iteration.targets.to_vector() != first.targets.to_vector());
  CHECK(other_iteration.aux.to_vector() != first.aux.to_vector());
  Batch other_seed = BatchMaker(ring8_spec(6, 0)).make(7);
  CHECK(other_seed.inputs.to_vector() != first.inputs.to_vector());
  CHECK(other_seed.targets.to_vector() != first.targets.to_vector());
}

TEST_CASE("ring8 data and noise are this rank's rows of the named streams' global draws", "[batch_maker]") {
  Batch got = BatchMaker(ring8_spec(9, 1)).make(4);  // rank 1 of 2: rows [16, 32) of 32
  Generator data_gen = global_stream(9, 4, kDataStream);
  CHECK(got.inputs.to_vector() == rows_of(data::make_ring8(32, data_gen), 16, 16));
  Tensor noise = Tensor::empty({32, 3});
  Generator noise_gen = global_stream(9, 4, kNoiseStream);
  fill_normal(noise, 0.0, 1.0, noise_gen);
  CHECK(got.targets.to_vector() == rows_of(noise, 16, 16));
  Tensor mix = Tensor::empty({32});
  Generator mix_gen = global_stream(9, 4, kMixStream);
  fill_uniform(mix, 0.0, 1.0, mix_gen);
  CHECK(got.aux.to_vector() == rows_of(mix, 16, 16));
  // Each stream is its own: data and noise of one (seed, iteration) never coincide.
  Generator again = global_stream(9, 4, kDataStream), noise_again = global_stream(9, 4, kNoiseStream);
  CHECK(again.next_block() != noise_again.next_block());
}

TEST_CASE("W ranks' batches, in rank order, are bitwise one process's batch at W times the rows",
          "[batch_maker][global_batch]") {
  const int64_t global = 12;
  for (bool images : {false, true}) {
    auto maker = [&](int world, int rank) {
      const BatchSpec spec{
          .seed = 11, .world_size = world, .rank = rank, .batch = global / world, .noise_dim = 3};
      return images ? BatchMaker(spec, labelled_images(40)) : BatchMaker(spec);
    };
    const BatchMaker one = maker(1, 0);
    for (int world : {2, 3, 4}) {
      for (int64_t it : {0, 1, 5}) {  // 40 images: 3 global steps per epoch, so 5 is in the second
        INFO((images ? "images" : "ring8") << ", " << world << " ranks, iteration " << it);
        const LabeledBatch whole = one.make(it);
        std::vector<double> inputs, targets, aux;
        std::vector<int64_t> labels;
        for (int r = 0; r < world; ++r) {
          const LabeledBatch part = maker(world, r).make(it);
          for (double x : part.inputs.to_vector()) inputs.push_back(x);
          for (double x : part.targets.to_vector()) targets.push_back(x);
          for (double x : part.aux.to_vector()) aux.push_back(x);
          for (int64_t l : labels_of(part.labels)) labels.push_back(l);
        }
        CHECK(inputs == whole.inputs.to_vector());
        CHECK(targets == whole.targets.to_vector());
        CHECK(aux == whole.aux.to_vector());
        CHECK(labels == labels_of(whole.labels));
      }
    }
  }
}

TEST_CASE("image batches are each rank's sampler shard: disjoint, covering the epoch", "[batch_maker]") {
  const int world = 2;
  const int64_t batch = 3, count = 12;  // 2 global steps of 6 rows per epoch
  std::vector<BatchMaker> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back(BatchSpec{.seed = 11, .world_size = world, .rank = r, .batch = batch, .noise_dim = 2},
                       numbered_images(count));
  }
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    std::multiset<int64_t> seen;
    for (int64_t step = 0; step < 2; ++step) {
      const int64_t it = epoch * 2 + step;
      for (int r = 0; r < world; ++r) {
        INFO("iteration " << it << " rank " << r);
        Batch b = ranks[static_cast<size_t>(r)].make(it);
        REQUIRE(b.inputs.shape() == Shape{batch, 1, 2, 2});
        // The reference: an independent sampler asked for this rank's rows of (epoch, step).
        data::DistributedSampler sampler(count, world, r, batch, 11);
        CHECK(row_ids(b.inputs) == sampler.batch_indices(epoch, step));
        for (int64_t id : row_ids(b.inputs)) seen.insert(id);
      }
    }
    CHECK(seen.size() == static_cast<size_t>(count));
    CHECK(std::set<int64_t>(seen.begin(), seen.end()).size() == static_cast<size_t>(count));
  }
  CHECK(row_ids(ranks[0].make(0).inputs) != row_ids(ranks[0].make(2).inputs));  // a new permutation per epoch
}

TEST_CASE("batch labels are the labels of the very rows in the batch, at every rank",
          "[batch_maker][labels]") {
  // 13 rows: 3 ranks x 2 leave a tail of 1 per epoch; 2 ranks x 4 leave 5; 1 rank x 13 none.
  const int64_t count = 13;
  for (auto [world, batch] : {std::pair<int, int64_t>{3, 2}, {2, 4}, {1, 13}}) {
    for (int r = 0; r < world; ++r) {
      const BatchSpec spec{.seed = 3, .world_size = world, .rank = r, .batch = batch, .noise_dim = 2};
      const BatchMaker maker(spec, labelled_images(count));
      for (int64_t it : {0, 1, 2, 5}) {
        INFO("world " << world << " rank " << r << " iteration " << it);
        const LabeledBatch b = maker.make(it);
        REQUIRE(b.labels.shape() == Shape{batch});
        std::vector<int64_t> want;
        for (int64_t id : row_ids(b.inputs)) want.push_back((3 * id) % 7);
        CHECK(labels_of(b.labels) == want);
      }
    }
  }
  // ring8: each point's mode, the labels of the data stream's own draw.
  const LabeledBatch ring = BatchMaker(ring8_spec(9, 1)).make(4);
  Generator data_gen = global_stream(9, 4, kDataStream);
  const data::Ring8Draw draw = data::make_ring8_labeled(32, data_gen);
  CHECK(labels_of(ring.labels) == labels_of(draw.labels.narrow_rows(16, 16).clone()));
  const auto modes = data::ring8_modes();
  for (int64_t k = 0; k < 16; ++k) {
    const auto& m = modes[static_cast<size_t>(ring.labels.data<int64_t>()[k])];
    CHECK(std::hypot(ring.inputs.data<float>()[2 * k] - m.first,
                     ring.inputs.data<float>()[2 * k + 1] - m.second) < 5 * data::kRing8Sigma);
  }
}

TEST_CASE("image batches come at the model's side: 28x28 pictures resized for dcgan64", "[batch_maker]") {
  data::ImageDataset images;
  images.images = Tensor::empty({8, 1, 28, 28});
  Generator gen(3);
  fill_uniform(images.images, -1.0, 1.0, gen);
  images.labels.assign(8, 0);
  const BatchSpec spec{.seed = 1, .world_size = 2, .rank = 1, .batch = 2, .noise_dim = 100};
  const Batch as_stored = BatchMaker(spec, images).make(3);
  BatchSpec at64 = spec;
  at64.side = 64;
  const Batch resized = BatchMaker(at64, images).make(3);
  CHECK(as_stored.inputs.shape() == Shape{2, 1, 28, 28});
  REQUIRE(resized.inputs.shape() == Shape{2, 1, 64, 64});
  CHECK(resized.inputs.to_vector() == data::resize_images(as_stored.inputs, 64).to_vector());
  CHECK(resized.targets.to_vector() == as_stored.targets.to_vector());
  at64.side = 28;  // already the model's side: as stored
  CHECK(BatchMaker(at64, images).make(3).inputs.to_vector() == as_stored.inputs.to_vector());
}

TEST_CASE("on the CPU the prefetcher hands out the maker's batches as they are, in any order",
          "[batch_maker]") {
  const BatchMaker maker(ring8_spec(5, 1));
  BatchPrefetcher prefetcher(maker, Device::cpu());
  for (auto [it, next] : {std::pair<int64_t, int64_t>{0, 1}, {1, 2}, {5, 6}, {2, -1}}) {
    INFO("iteration " << it);
    const LabeledBatch got = prefetcher.take(it, next);
    CHECK(same(got, maker.make(it)));
    CHECK(labels_of(got.labels) == labels_of(maker.make(it).labels));
  }
}

TEST_CASE("data too small for the batch names the data, the flags and the remedy", "[batch_maker][errors]") {
  tandem::testing::TempDir dir("batch_maker");
  data::write_idx_u8(dir.file("train-images-idx3-ubyte.gz"),
                     {{5, 28, 28}, std::vector<uint8_t>(5 * 28 * 28, 0)});
  data::write_idx_u8(dir.file("train-labels-idx1-ubyte.gz"), {{5}, std::vector<uint8_t>(5, 0)});
  TrainOptions o;
  o.model = "mlp";
  o.data = "fashion-mnist";
  o.data_dir = dir.path.string();
  o.batch = 3;
  CHECK_THROWS_WITH(
      make_batch_maker(o, 2, 1, 64, Device::cpu()),
      Catch::Contains("--data fashion-mnist from --data-dir " + o.data_dir +
                      " cannot feed --batch 3 on 2 rank(s): DistributedSampler: batch 3 per rank "
                      "needs at least 6 samples for 2 ranks; the dataset has 5") &&
          Catch::EndsWith(". Lower --batch or start fewer ranks (mpirun -np)"));
  o.batch = 2;
  Batch b = make_batch_maker(o, 2, 1, 64, Device::cpu()).make(0);
  CHECK(b.inputs.shape() == Shape{2, 1, 28, 28});
  CHECK(b.targets.shape() == Shape{2, 64});
}

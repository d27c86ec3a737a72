// Labels: every dataset's labels ride with its samples. The sampler's batches carry int64
// labels whose row k is the label of the sample in image row k, for Fashion-MNIST (against
// the raw IDX files), image folders (class = sub-folder, told apart by the pictures' values)
// and ring8 (the mode a point lies at), at every rank of even and uneven splits.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include "models/data/dataset.h"
#include "models/data/image_folder.h"
#include "models/data/png_writer.h"
#include "models/data/sampler.h"
#include "tests/test_files.h"

using namespace tandem;
using namespace tandem::data;
using namespace tandem::testing;
namespace fs = std::filesystem;

namespace {

struct Split {
  int world;
  int64_t batch;
  bool drop_last;
};

// The references: a sample's label and its image row (flattened), by dataset index.
using LabelOf = std::function<int64_t(int64_t index)>;
using RowOf = std::function<std::vector<float>(int64_t index)>;

std::vector<float> row(const Tensor& t, int64_t r) {
  const int64_t width = t.numel() / t.size(0);
  const float* p = t.data<float>() + r * width;
  return std::vector<float>(p, p + width);
}

// Every rank's batches `steps` of `epoch` under `split`: the sampler's indices, and row k of
// the images and the labels belonging to the sample indices[k].
void check_split(const ImageDataset& ds, const Split& split, const std::vector<int64_t>& epochs,
                 const LabelOf& label_of, const RowOf& row_of) {
  for (int r = 0; r < split.world; ++r) {
    const DistributedSampler sampler(ds.size(), split.world, r, split.batch, 17, split.drop_last);
    const int64_t last = sampler.batches_per_epoch() - 1;
    for (int64_t epoch : epochs) {
      for (int64_t i : {int64_t{0}, last / 2, last}) {
        INFO("world " << split.world << " rank " << r << " batch " << split.batch << " drop_last "
                      << split.drop_last << " epoch " << epoch << " step " << i);
        const SampledBatch b = sampler.batch(ds, epoch, i);
        REQUIRE(b.indices == sampler.batch_indices(epoch, i));
        REQUIRE(b.labels.dtype() == DType::i64);
        REQUIRE(b.labels.shape() == Shape{split.batch});
        REQUIRE(b.images.size(0) == split.batch);
        const int64_t* labels = b.labels.data<int64_t>();
        for (int64_t k = 0; k < split.batch; ++k) {
          const int64_t index = b.indices[static_cast<size_t>(k)];
          CHECK(labels[k] == label_of(index));
          CHECK(row(b.images, k) == row_of(index));
        }
      }
    }
  }
}

int nearest_mode(double x, double y) {
  const auto modes = ring8_modes();
  int best = 0;
  for (int k = 1; k < kRing8Modes; ++k) {
    auto d = [&](int m) {
      const auto& mode = modes[static_cast<size_t>(m)];
      return std::hypot(x - mode.first, y - mode.second);
    };
    if (d(k) < d(best)) best = k;
  }
  return best;
}

}  // namespace

TEST_CASE("Fashion-MNIST batches carry the label file's labels of their rows", "[labels][fashion-mnist]") {
  if (!fs::exists(kFashionMnistDefaultDir)) {
    WARN("skipped: " << kFashionMnistDefaultDir << " is absent (Debian package dataset-fashion-mnist)");
    return;
  }
  const std::string dir = kFashionMnistDefaultDir;
  const ImageDataset ds = load_fashion_mnist(dir, false);
  // The references straight from the IDX files.
  const IdxArray labels = read_idx_u8(dir + "/t10k-labels-idx1-ubyte.gz");
  const IdxArray images = read_idx_u8(dir + "/t10k-images-idx3-ubyte.gz");
  REQUIRE(labels.data.size() == 10000);
  const LabelOf label_of = [&](int64_t i) { return int64_t{labels.data[static_cast<size_t>(i)]}; };
  const RowOf row_of = [&](int64_t i) {
    std::vector<float> out;
    for (size_t p = 0; p < 784; ++p)
      out.push_back(images.data[static_cast<size_t>(i) * 784 + p] / 127.5f - 1.0f);
    return out;
  };
  // 10000 rows: 64 x 1 and 32 x 2 leave a tail (dropped); 7 x 3 pads the last step by wrapping.
  for (Split split : {Split{1, 64, true}, Split{2, 32, true}, Split{3, 7, false}, Split{3, 64, true}}) {
    check_split(ds, split, {0, 3}, label_of, row_of);
  }
}

TEST_CASE("image folder labels are the sorted sub-folders' indices, loose files 0", "[labels][image]") {
  TempDir tmp("labels_folder");
  const std::string dir = tmp.path.string();
  // Each class's pictures are one flat gray value, so a batch row's picture names its class.
  auto picture = [&](const std::string& name, uint8_t value) {
    fs::create_directories(fs::path(tmp.file(name)).parent_path());
    write_png(tmp.file(name), 2, 2, 1, std::vector<uint8_t>(4, value));
  };
  picture("dogs/d1.png", 30);
  picture("cats/c1.png", 20);
  picture("ants/a2.png", 10);
  picture("dogs/puppies/p.png", 30);  // deeper down: still the class of its top folder
  picture("ants/a1.png", 10);
  picture("ants-b/b.png", 60);                 // listed before ants/ ('-' < '/'), a class after "ants"
  picture("loose.png", 40);                    // directly in the root: label 0
  picture(".hidden/h.png", 50);                // left out, no class
  fs::create_directories(tmp.path / "empty");  // no file: no class

  const ImageFolder folder = load_image_folder(dir, {.channels = 1, .side = 2});
  CHECK(folder.classes == std::vector<std::string>{"ants", "ants-b", "cats", "dogs"});
  CHECK(folder.files == std::vector<std::string>{tmp.file("ants-b/b.png"), tmp.file("ants/a1.png"),
                                                 tmp.file("ants/a2.png"), tmp.file("cats/c1.png"),
                                                 tmp.file("dogs/d1.png"), tmp.file("dogs/puppies/p.png"),
                                                 tmp.file("loose.png")});
  CHECK(folder.dataset.labels == std::vector<int64_t>{1, 0, 0, 2, 3, 3, 0});
  // A trailing separator on the folder changes nothing.
  CHECK(load_image_folder(dir + "/", {.channels = 1, .side = 2}).dataset.labels == folder.dataset.labels);

  const ImageDataset& ds = folder.dataset;
  const std::map<int, int64_t> class_of_value = {{10, 0}, {60, 1}, {20, 2}, {30, 3}, {40, 0}};
  const LabelOf label_of = [&](int64_t i) {
    const float v = ds.images.data<float>()[i * 4];
    return class_of_value.at(static_cast<int>(std::lround((v + 1.0f) * 127.5f)));
  };
  const RowOf row_of = [&](int64_t i) { return row(ds.images, i); };
  // 7 pictures: 2 ranks x 3 drop one; 4 ranks x 1, 4 x 2 and 3 x 2 wrap around.
  for (Split split :
       {Split{2, 3, true}, Split{4, 1, false}, Split{4, 2, false}, Split{3, 2, false}, Split{1, 7, true}}) {
    check_split(ds, split, {0, 1}, label_of, row_of);
  }

  // A class whose only file cannot be decoded keeps its index with --skip-bad-images.
  fs::create_directories(tmp.path / "bees");
  write_bytes(tmp.file("bees/bad.png"), "not a picture");
  const ImageFolder skipping = load_image_folder(dir, {.channels = 1, .side = 2, .skip_bad = true});
  CHECK(skipping.classes == std::vector<std::string>{"ants", "ants-b", "bees", "cats", "dogs"});
  CHECK(skipping.skipped.size() == 1);
  CHECK(skipping.dataset.labels == std::vector<int64_t>{1, 0, 0, 3, 4, 4, 0});
}

TEST_CASE("ring8 labels are the modes the points were drawn at, in the sampler's batches too",
          "[labels][ring8]") {
  Generator gen(5), same(5);
  const Ring8Draw draw = make_ring8_labeled(101, gen);
  REQUIRE(draw.labels.dtype() == DType::i64);
  REQUIRE(draw.labels.shape() == Shape{101});
  CHECK(draw.points.to_vector() == make_ring8(101, same).to_vector());  // the very same points
  CHECK(gen.next_block() == same.next_block());                         // and draws
  std::set<int64_t> modes;
  for (int64_t i = 0; i < 101; ++i) {
    const float* p = draw.points.data<float>() + 2 * i;
    CHECK(draw.labels.data<int64_t>()[i] == nearest_mode(p[0], p[1]));
    modes.insert(draw.labels.data<int64_t>()[i]);
  }
  CHECK(modes.size() == kRing8Modes);

  ImageDataset ds;
  ds.images = draw.points;
  for (int64_t i = 0; i < 101; ++i) ds.labels.push_back(draw.labels.data<int64_t>()[i]);
  const LabelOf label_of = [&](int64_t i) {
    const float* p = ds.images.data<float>() + 2 * i;
    return int64_t{nearest_mode(p[0], p[1])};
  };
  const RowOf row_of = [&](int64_t i) { return row(ds.images, i); };
  for (Split split : {Split{1, 10, true}, Split{3, 5, false}, Split{2, 50, true}}) {
    check_split(ds, split, {0, 2}, label_of, row_of);
  }
}

TEST_CASE("a sampled batch refuses a dataset of another size or without one label per image",
          "[labels][errors]") {
  ImageDataset ds;
  ds.images = Tensor::zeros({3, 2});
  ds.labels = {1, 2};
  const DistributedSampler sampler(3, 1, 0, 1, 0);
  CHECK_THROWS_WITH(sampler.batch(ds, 0, 0), Catch::Contains("2 labels for 3 images"));
  ds.labels.push_back(3);
  CHECK(sampler.batch(ds, 0, 0).labels.shape() == Shape{1});
  const DistributedSampler other(4, 1, 0, 1, 0);
  CHECK_THROWS_WITH(other.batch(ds, 0, 0), Catch::Contains("built for 4 samples, given a dataset of 3"));
  CHECK_THROWS_WITH(ds.label_tensor({0, 3}), Catch::Contains("index 3 (position 1) is outside [0, 3)"));
}

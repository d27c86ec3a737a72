// A dataset's identity: its size and shape, and a hash that any one changed pixel or label
// changes.
#include <catch2/catch.hpp>

#include "models/data/dataset_identity.h"

using namespace tandem;
using namespace tandem::data;

namespace {

// `count` images [1, 3, 5] (15 floats: a whole number of 32-byte blocks plus a tail) of
// distinct values, labels 0, 1, 2, ...
ImageDataset numbered(int64_t count) {
  ImageDataset d;
  d.images = Tensor::empty({count, 1, 3, 5});
  for (int64_t i = 0; i < d.images.numel(); ++i) d.images.data<float>()[i] = static_cast<float>(i) / 100.0f;
  for (int64_t i = 0; i < count; ++i) d.labels.push_back(i % 10);
  return d;
}

}  // namespace

TEST_CASE("the identity names the size and shape; any changed pixel or label changes its hash", "[data]") {
  const ImageDataset base = numbered(7);
  const std::string id = dataset_identity(base);
  CHECK_THAT(id, Catch::StartsWith("7 images [1, 3, 5], content "));
  CHECK(id.size() == std::string("7 images [1, 3, 5], content ").size() + 16);
  CHECK(dataset_identity(numbered(7)) == id);  // the same data, loaded again

  for (int64_t at : {0, 3, 4, 7, 61, 104}) {  // each 8-byte lane of a 32-byte block, and the tail
    ImageDataset changed = numbered(7);
    changed.images.data<float>()[at] += 1.0f;
    INFO("pixel " << at);
    CHECK(dataset_identity(changed) != id);
  }
  ImageDataset relabelled = numbered(7);
  relabelled.labels[3] = 9;
  CHECK(dataset_identity(relabelled) != id);
  CHECK_THAT(dataset_identity(numbered(6)), Catch::StartsWith("6 images [1, 3, 5], content "));
  CHECK(dataset_identity(ImageDataset{}) == dataset_identity(ImageDataset{}));
}

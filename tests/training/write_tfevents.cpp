// Writes the TensorBoard event file that tensorboard_test.sh checks:
//   write_tfevents <dir>
// <dir>/metrics.jsonl and <dir>/tb/events.out.tfevents.* from one ScalarLog with the writer
// attached (iterations 10, 20, 30: loss_d = 1/3 + i, loss_g = -i/7, lr = 2e-4 / 2^(i/10 - 1)),
// the writer's own scalars (direct = i/2 + 0.1 at steps 0, 1, 2), <dir>/grid.png (RGB,
// 5 wide, 3 high) as the image "samples" at step 30 and <dir>/gray.png (gray, 4x2) as
// "gray" at step 31 through add_image. The check script recomputes these values.
#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>

#include "models/data/png_writer.h"
#include "models/training/scalar_log.h"
#include "models/training/tensorboard_writer.h"

using namespace tandem;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: write_tfevents <dir>\n";
    return 2;
  }
  const std::string dir = argv[1];
  try {
    training::TensorBoardWriter tb(dir + "/tb");
    training::ScalarLog log(dir);
    log.attach(tb);
    for (int64_t i : {10, 20, 30}) {
      log.log(i, {{"loss_d", 1.0 / 3.0 + static_cast<double>(i)},
                  {"loss_g", -static_cast<double>(i) / 7.0},
                  {"lr", 2e-4 / std::pow(2.0, static_cast<double>(i / 10 - 1))}});
    }
    for (int64_t step = 0; step < 3; ++step)
      tb.add_scalar("direct", static_cast<double>(step) / 2 + 0.1, step);
    std::vector<uint8_t> rgb(5 * 3 * 3), gray(4 * 2);
    for (size_t k = 0; k < rgb.size(); ++k) rgb[k] = static_cast<uint8_t>(k * 5);
    for (size_t k = 0; k < gray.size(); ++k) gray[k] = static_cast<uint8_t>(255 - k * 30);
    data::write_png(dir + "/grid.png", 5, 3, 3, rgb);
    data::write_png(dir + "/gray.png", 4, 2, 1, gray);
    tb.add_png_file("samples", dir + "/grid.png", 30);
    std::ifstream in(dir + "/gray.png", std::ios::binary);
    std::ostringstream png;
    png << in.rdbuf();
    tb.add_image("gray", png.str(), 2, 4, 1, 31);
    std::cout << tb.path() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "write_tfevents: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

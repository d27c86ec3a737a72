// The losses a GAN trains with (gan.h): non-saturating (softplus), hinge, and WGAN-GP's
// critic and generator losses.
#pragma once

namespace tandem::models {

enum class GanLoss { non_saturating, hinge, wgan_gp };

}  // namespace tandem::models

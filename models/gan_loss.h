// The losses a GAN trains with (gan.h): non-saturating (softplus), hinge, WGAN-GP's critic
// and generator losses, and the relativistic pairing loss (RpGAN, R3GAN's objective).
#pragma once

namespace tandem::models {

enum class GanLoss { non_saturating, hinge, wgan_gp, relativistic };

}  // namespace tandem::models

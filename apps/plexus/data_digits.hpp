// plexus data digits: the 8x8 handwritten digits scikit-learn ships (1,797 images, the UCI test
// set) as a multimodal dataset (plexus/core/data/multimodal_dataset.hpp) for the MIMO proof task:
// each sample is an image and the sequence "<bos> <image> x P this digit is <word> <eos>".
#pragma once

#include <string>
#include <vector>

namespace plexus::cli {

int data_digits(const std::vector<std::string>& args);

}  // namespace plexus::cli

#pragma once
// The NGT SIFT 5k set shipped in data/ngt-sift-5k (see its README): 5,000 x 128 vectors, and the
// holdout split (base rows 0..4899, queries rows 4900..4999) with its exact top-100.

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/data_dir.h"

namespace infera::vectors::testing {

struct SiftSet {
  std::vector<std::vector<float>> rows;           // 5,000 x 128
  std::vector<std::vector<uint32_t>> holdout_gt;  // 100 x 100, row ids among 0..4899
};

inline bool loadSift(SiftSet& out, std::string& error) {
  auto dir = findDataDir("ngt-sift-5k");
  if (!dir.ok()) {
    error = dir.status().message();
    return false;
  }
  std::ifstream base(*dir + "/sift-dataset-5k.tsv");
  std::string line;
  while (std::getline(base, line)) {
    std::istringstream in(line);
    std::vector<float> v(128);
    for (auto& x : v) in >> x;
    out.rows.push_back(std::move(v));
  }
  std::ifstream gt(*dir + "/holdout-100.groundtruth-top100.tsv");
  while (std::getline(gt, line)) {
    std::istringstream in(line);
    std::vector<uint32_t> ids;
    uint32_t id;
    while (in >> id) ids.push_back(id);
    out.holdout_gt.push_back(std::move(ids));
  }
  if (out.rows.size() != 5000 || out.holdout_gt.size() != 100) {
    error = "unexpected sizes in " + *dir;
    return false;
  }
  return true;
}

}  // namespace infera::vectors::testing

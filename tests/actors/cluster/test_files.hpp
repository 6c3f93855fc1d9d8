// Files for the cluster's tests: write one (its folders made), read one back whole.
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace cuda_agent::cluster::test_files {

inline void write(const std::filesystem::path& file, const std::string& text) {
  std::filesystem::create_directories(file.parent_path());
  std::ofstream{file, std::ios::binary} << text;
}

inline std::string read(const std::filesystem::path& file) {
  std::ifstream in{file, std::ios::binary};
  return {std::istreambuf_iterator<char>{in}, {}};
}

}  // namespace cuda_agent::cluster::test_files

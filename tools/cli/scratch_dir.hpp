// A fresh private directory (mkdtemp) removed with everything in it however its owner's scope
// ends: the scratch space of a command or benchmark.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace cuda_agent::cli {

class scratch_dir {
 public:
  // `parent/prefix-XXXXXX`; the system temp directory when parent is empty.
  explicit scratch_dir(const std::string& prefix, std::filesystem::path parent = {}) {
    if (parent.empty()) parent = std::filesystem::temp_directory_path();
    std::string pattern = (parent / (prefix + "-XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr)
      throw std::runtime_error{"cannot create a scratch directory in " + parent.string() + " (" +
                               std::generic_category().message(errno) + ")"};
    path_ = pattern;
  }
  ~scratch_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace cuda_agent::cli

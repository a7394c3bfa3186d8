// A fresh runtime directory per test, set as $RRDMA_RUN_DIR and removed afterwards.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace rrdma::vnic::test {

class TempRunDir {
 public:
  TempRunDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "rrdma-vnic-test-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
    ::setenv("RRDMA_RUN_DIR", path_.c_str(), 1);
  }
  ~TempRunDir() {
    ::unsetenv("RRDMA_RUN_DIR");
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace rrdma::vnic::test

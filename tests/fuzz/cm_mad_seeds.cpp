// Writes the seed corpus of the CM MAD fuzz target (tests/fuzz/run-fuzz.sh) into DIR/cm_mad/:
// one MAD per CM message with the values Linux's rdma_cm sends (tests/rocev2/cm_samples.h),
// and a REJ and a SIDR_REP whose variable-length areas are full.
//   fuzz_cm_seeds DIR
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/rocev2/cm_samples.h"

namespace {

using namespace rrdma::rocev2::cm;

bool write_mad(const std::filesystem::path& path, const CmMessage& m) {
  std::array<std::uint8_t, kMadLength> mad{};
  if (emit_cm_mad(m, mad) != CmError::none) return false;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(mad.data()), static_cast<std::streamsize>(mad.size()));
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_cm_seeds DIR\n");
    return 2;
  }
  const std::filesystem::path dir = std::filesystem::path(argv[1]) / "cm_mad";
  std::filesystem::create_directories(dir);
  std::vector<std::pair<std::string, CmMessage>> seeds;
  for (const CmMessage& m : test::kernel_samples()) seeds.emplace_back(attribute_name(attribute_id(m.body)), m);

  static const std::array<std::uint8_t, 72> info = [] {
    std::array<std::uint8_t, 72> a{};
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::uint8_t>(i + 1);
    return a;
  }();
  CmMessage rej = test::kernel_rej_no_listener();
  std::get<Rej>(rej.body).ari = OpaqueBytes{info};
  seeds.emplace_back("REJ_with_ARI", rej);
  CmMessage sidr_rep = test::kernel_sidr_rep();
  std::get<SidrRep>(sidr_rep.body).additional_information = OpaqueBytes{info};
  std::get<SidrRep>(sidr_rep.body).status = SidrStatus::Redirect;
  seeds.emplace_back("SIDR_REP_redirect", sidr_rep);

  for (const auto& [name, m] : seeds) {
    if (!write_mad(dir / (name + ".bin"), m)) {
      std::fprintf(stderr, "fuzz_cm_seeds: cannot write %s\n", name.c_str());
      return 1;
    }
  }
  return 0;
}

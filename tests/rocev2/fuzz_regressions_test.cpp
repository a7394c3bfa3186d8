// Replays every input the fuzzer kept in tests/fuzz/regressions/ through the same property
// check as the fuzz target, in every build (gcc or clang, with or without sanitizers).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "tests/fuzz/cm_mad_properties.h"
#include "tests/fuzz/frame_properties.h"
#include "tests/rocev2/cm_samples.h"
#include "tests/rocev2/rxe_captures.h"

namespace rrdma::fuzz {
namespace {

// Every regular file of `dir` but dotfiles (.gitkeep) through `check`; how many there were.
std::size_t replay(const char* dir, const char* (*check)(ByteSpan)) {
  namespace fs = std::filesystem;
  std::size_t replayed = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file() || entry.path().filename().string().starts_with(".")) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    const std::vector<std::uint8_t> bytes{std::istreambuf_iterator<char>(in), {}};
    INFO(entry.path().filename().string());
    const char* failed = check(bytes);
    CHECK(failed == nullptr);
    if (failed) UNSCOPED_INFO(failed);
    ++replayed;
  }
  return replayed;
}

TEST_CASE("Fuzz regressions: every kept input passes the frame properties", "[fuzz][hostile]") {
  WARN("replayed " << replay(RRDMA_FUZZ_REGRESSIONS_DIR, check_frame_and_resealed) << " fuzz regressions");
}

TEST_CASE("Fuzz regressions: every kept CM MAD passes the CM MAD properties", "[fuzz][hostile][cm]") {
  WARN("replayed " << replay(RRDMA_CM_FUZZ_REGRESSIONS_DIR, check_cm_mad) << " cm_mad regressions");
}

// The CM MAD target's seeds (fuzz_cm_seeds writes these) are accepted, and pass.
TEST_CASE("Fuzz properties hold for Linux's CM messages (the CM MAD seeds)", "[fuzz][cm]") {
  for (const rocev2::cm::CmMessage& m : rocev2::cm::test::kernel_samples()) {
    std::vector<std::uint8_t> mad(rocev2::cm::kMadLength);
    REQUIRE(rocev2::cm::emit_cm_mad(m, mad) == rocev2::cm::CmError::none);
    INFO(rocev2::cm::describe(m));
    CHECK(rocev2::cm::parse_cm_mad(mad));
    CHECK(check_cm_mad(mad) == nullptr);
  }
}

TEST_CASE("Fuzz properties hold for every rxe frame (the seed corpus)", "[fuzz][golden]") {
  for (const test::RxeFrame& f : test::all_rxe_frames()) {
    INFO(f.capture << " frame " << f.index + 1);
    const char* failed = check_frame_properties(f.bytes);
    CHECK(failed == nullptr);
  }
}

TEST_CASE("Fuzz properties hold for the GSI seed, and it is a MAD the GSI endpoint takes", "[fuzz][gsi]") {
  const std::vector<std::uint8_t> frame = gsi_seed_frame();
  REQUIRE(frame.size() == 322);
  CHECK(check_frame_and_resealed(frame) == nullptr);
  rocev2::RoceFrame parsed;
  REQUIRE(rocev2::parse_frame(frame, parsed).ok());
  CHECK(rocev2::check_gsi_packet(parsed.packet) == rocev2::GsiDrop::none);
}

}  // namespace
}  // namespace rrdma::fuzz

// What must hold for any byte string given to the CM MAD parser (rocev2/cm/mad.h), shared by the
// libFuzzer target (fuzz_cm_mad.cpp) and the ctest replay of its findings and seeds
// (tests/rocev2/fuzz_regressions_test.cpp):
//  - parse_cm_mad returns (no crash, no read outside the input: the sanitizers see to that) and
//    accepts only 256 bytes that start with the CM's base version, class, class version and
//    method;
//  - what it accepts borrows only from the input, and describe() can print it;
//  - it emits again (every value the parser makes is one the emitter takes), into bytes that
//    parse to the same value, hold no bit the input lacked (reserved bits are dropped, nothing
//    is invented), and are a fixed point: parsed and emitted once more, the same bytes;
//  - the CMA header at the start of a REQ's or SIDR_REQ's private data, when the parser takes
//    it, emits and parses back to the same header.
// Returns a description of the first property that fails, or nullptr.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "rocev2/cm/cma.h"
#include "rocev2/cm/mad.h"

namespace rrdma::fuzz {

inline bool borrows_from(ByteSpan part, ByteSpan whole) {
  return part.empty() || (part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size());
}

// The opaque areas of a message: private data, and a REJ's ARI or a SIDR_REP's additional
// information.
inline std::vector<ByteSpan> opaque_areas(const rocev2::cm::CmBody& body) {
  using namespace rocev2::cm;
  std::vector<ByteSpan> areas;
  std::visit([&](const auto& m) { areas.push_back(m.private_data.bytes); }, body);
  if (const auto* rej = std::get_if<Rej>(&body)) areas.push_back(rej->ari.bytes);
  if (const auto* rep = std::get_if<SidrRep>(&body)) areas.push_back(rep->additional_information.bytes);
  return areas;
}

inline const char* check_cma_header(ByteSpan private_data) {
  using namespace rocev2::cm;
  CmaHeader h;
  if (parse_cma_header(private_data, h) != CmaError::none) return nullptr;
  std::vector<std::uint8_t> again(private_data.size());
  if (emit_cma_private_data(h, cma_user_data(private_data), again) != CmaError::none)
    return "an accepted CMA header does not emit";
  const auto back = parse_cma_header(again);
  if (!back || !(*back == h)) return "an accepted CMA header emits to one that parses differently";
  if (!std::equal(again.begin() + kCmaHeaderLength, again.end(), private_data.begin() + kCmaHeaderLength))
    return "the user data after the CMA header changed";
  return nullptr;
}

inline const char* check_cm_mad_properties(ByteSpan input) {
  using namespace rocev2::cm;
  CmMessage m;
  if (parse_cm_mad(input, m) != CmError::none) return nullptr;
  if (input.size() != kMadLength || input[0] != kMadBaseVersion || input[1] != kCmClass ||
      input[2] != kCmClassVersion || input[3] != kMethodSend)
    return "accepted something that is not a CM Send MAD";
  for (ByteSpan area : opaque_areas(m.body))
    if (!borrows_from(area, input)) return "an opaque area lies outside the input";
  if (describe(m).empty()) return "describe() printed nothing";

  std::vector<std::uint8_t> out(kMadLength);
  if (emit_cm_mad(m, out) != CmError::none) return "an accepted message does not emit";
  CmMessage again;
  if (parse_cm_mad(out, again) != CmError::none) return "an emitted message is refused";
  if (!(again == m)) return "an emitted message parses differently";
  for (std::size_t i = 0; i < kMadLength; ++i)
    if ((out[i] & ~input[i]) != 0) return "emit set a bit the input did not have";
  std::vector<std::uint8_t> twice(kMadLength);
  if (emit_cm_mad(again, twice) != CmError::none || twice != out) return "emit is not a fixed point";

  if (const auto* req = std::get_if<Req>(&m.body); req && parse_ip_service_id(req->service_id))
    return check_cma_header(req->private_data.bytes);
  if (const auto* sidr = std::get_if<SidrReq>(&m.body); sidr && parse_ip_service_id(sidr->service_id))
    return check_cma_header(sidr->private_data.bytes);
  return nullptr;
}

// The input made a CM Send of 256 bytes (cut or zero-padded), with an attribute from REQ to one
// past APR picked by its byte 17, so that most mutations reach a message's fields instead of
// stopping at the header.
inline std::vector<std::uint8_t> as_cm_mad(ByteSpan input) {
  using namespace rocev2::cm;
  std::vector<std::uint8_t> mad(input.begin(), input.begin() + static_cast<std::ptrdiff_t>(std::min(input.size(), kMadLength)));
  mad.resize(kMadLength, 0);
  mad[0] = kMadBaseVersion;
  mad[1] = kCmClass;
  mad[2] = kCmClassVersion;
  mad[3] = kMethodSend;
  mad[16] = 0;
  mad[17] = static_cast<std::uint8_t>(static_cast<std::uint16_t>(AttributeId::Req) + mad[17] % 12);
  return mad;
}

// Both the input as it is and as a CM Send.
inline const char* check_cm_mad(ByteSpan input) {
  if (const char* failed = check_cm_mad_properties(input)) return failed;
  const std::vector<std::uint8_t> mad = as_cm_mad(input);
  return check_cm_mad_properties(mad);
}

}  // namespace rrdma::fuzz

// What must hold for any RRDMA_INTERFACES text (verbs/app/ucma/interfaces.h): the program's
// own environment, which the shim's getifaddrs parses: shared by the libFuzzer target
// (fuzz_interfaces.cpp) and the ctest replay.
//  - parse_interfaces never reads outside the text (ASan), never throws, takes at most
//    kMaxInterfaces entries;
//  - every entry it takes has a name of 1..15 allowed characters, NUL-terminated, and a prefix
//    length of 1..32, and written again as NAME=A.B.C.D/LEN it parses to the same entry;
//  - make_entries of them is one chain of exactly that many marked AF_INET entries whose
//    names, addresses and netmasks are the parsed ones; it is freed with one free().
// Returns a description of the first property that fails, or nullptr.
#pragma once

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "stack/bytes.h"
#include "verbs/app/ucma/interfaces.h"

namespace rrdma::fuzz {

inline std::string interface_text(const ucma_shim::VnicInterface& v) {
  const std::uint32_t a = v.address;
  return std::string(v.name) + "=" + std::to_string(a >> 24) + "." + std::to_string(a >> 16 & 0xFF) + "." +
         std::to_string(a >> 8 & 0xFF) + "." + std::to_string(a & 0xFF) + "/" + std::to_string(v.prefix_len);
}

inline const char* check_entry(const ucma_shim::VnicInterface& v) {
  const std::size_t length = ::strnlen(v.name, sizeof v.name);
  if (length == 0 || length >= sizeof v.name) return "a name that is empty or not NUL-terminated";
  if (v.prefix_len == 0 || v.prefix_len > 32) return "a prefix length outside 1..32";
  const auto again = ucma_shim::parse_interfaces(interface_text(v));
  if (again.size() != 1 || std::strcmp(again[0].name, v.name) != 0 || again[0].address != v.address ||
      again[0].prefix_len != v.prefix_len)
    return "an accepted entry written again parses differently";
  return nullptr;
}

inline const char* check_chain(const std::vector<ucma_shim::VnicInterface>& parsed) {
  ifaddrs* chain = ucma_shim::make_entries(parsed);
  if (parsed.empty()) return chain == nullptr ? nullptr : "entries made from nothing";
  if (chain == nullptr) return "no entries made";  // calloc of a few KiB does not fail here
  const char* failed = nullptr;
  std::size_t count = 0;
  for (const ifaddrs* e = chain; e != nullptr && failed == nullptr; e = e->ifa_next, ++count) {
    if (count >= parsed.size()) { failed = "more entries than interfaces"; break; }
    const auto& v = parsed[count];
    const auto* address = reinterpret_cast<const sockaddr_in*>(e->ifa_addr);
    if (!ucma_shim::is_vnic_entry(e) || std::strcmp(e->ifa_name, v.name) != 0 || address->sin_family != AF_INET ||
        ntohl(address->sin_addr.s_addr) != v.address)
      failed = "an entry that is not the parsed interface";
  }
  if (failed == nullptr && count != parsed.size()) failed = "fewer entries than interfaces";
  std::free(chain);
  return failed;
}

inline const char* check_interfaces(ByteSpan input) {
  const std::string_view text(reinterpret_cast<const char*>(input.data()), input.size());
  const auto parsed = ucma_shim::parse_interfaces(text);
  if (parsed.size() > ucma_shim::kMaxInterfaces) return "more than kMaxInterfaces entries";
  for (const auto& v : parsed)
    if (const char* failed = check_entry(v)) return failed;
  return check_chain(parsed);
}

}  // namespace rrdma::fuzz

// What must hold for any text given to parse_credentials (verbs/device/process_credentials.h), the
// parser of /proc/PID/status that tells whether a client process changed credentials:
// shared by the libFuzzer target (fuzz_credentials.cpp) and the ctest replay.
//  - it never reads outside the text (ASan) and never throws;
//  - what it accepts is four ids on a line that starts with "Uid:" and four on one that
//    starts with "Gid:", and those lines written again parse to the same credentials.
// Returns a description of the first property that fails, or nullptr.
#pragma once

#include <string>
#include <string_view>

#include "stack/bytes.h"
#include "verbs/device/process_credentials.h"

namespace rrdma::fuzz {

inline const char* check_credentials(ByteSpan input) {
  const std::string_view text(reinterpret_cast<const char*>(input.data()), input.size());
  const auto parsed = verbs::parse_credentials(text);
  if (!parsed) return nullptr;
  if (text.find("Uid:") == std::string_view::npos || text.find("Gid:") == std::string_view::npos)
    return "accepted a text without Uid: and Gid: lines";
  std::string again = "Uid:";
  for (auto id : parsed->uids) again += "\t" + std::to_string(id);
  again += "\nGid:";
  for (auto id : parsed->gids) again += "\t" + std::to_string(id);
  again += "\n";
  const auto reparsed = verbs::parse_credentials(again);
  if (!reparsed || !(*reparsed == *parsed)) return "the accepted ids written again parse differently";
  return nullptr;
}

}  // namespace rrdma::fuzz

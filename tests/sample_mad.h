// A MAD for the tests of the GSI endpoint (rocev2/gsi.h) and the tools that send one: the
// common MAD header of a CM message (IBA 13.4.2: base version 1, management class 0x07, class
// version 2, method 0x03 Send, attribute `attribute`; REQ is 0x0010), and after it bytes that
// count up from `first`. Not a valid CM message: no test reads beyond the header yet.
#pragma once

#include <array>
#include <cstdint>

#include "rocev2/gsi.h"

namespace rrdma::test {

inline std::array<std::uint8_t, rocev2::kMadLength> sample_mad(std::uint16_t attribute = 0x0010,
                                                               std::uint8_t first = 0) {
  std::array<std::uint8_t, rocev2::kMadLength> mad{};
  for (std::size_t i = 0; i < mad.size(); ++i) mad[i] = static_cast<std::uint8_t>(first + i);
  mad[0] = 1;
  mad[1] = 0x07;
  mad[2] = 2;
  mad[3] = 0x03;
  mad[16] = static_cast<std::uint8_t>(attribute >> 8);
  mad[17] = static_cast<std::uint8_t>(attribute);
  return mad;
}

}  // namespace rrdma::test

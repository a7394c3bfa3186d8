#include "tests/rocev2/rxe_captures.h"

#include <catch2/catch.hpp>

#include <map>

#include "stack/ethernet.h"
#include "stack/ipv4.h"
#include "stack/udp.h"

namespace rrdma::test {

const std::vector<RxeFrame>& all_rxe_frames() {
  static const std::vector<RxeFrame> frames = [] {
    std::vector<RxeFrame> all;
    for (const char* name : kRxeCaptures) {
      std::size_t i = 0;
      for (Frame& f : read_capture(data_path(name))) all.push_back({name, i++, std::move(f)});
    }
    return all;
  }();
  return frames;
}

Layers split_layers(ByteSpan frame) {
  const auto eth = stack::EthernetView::check(frame);
  REQUIRE(eth);
  REQUIRE(eth->ethertype() == stack::EtherType::ipv4);
  const auto ip = stack::Ipv4View::check(eth->payload());
  REQUIRE(ip);
  const auto udp = stack::UdpView::check(ip->payload());
  REQUIRE(udp);
  return {ip->bytes(), ip->header(), udp->header(), udp->payload()};
}

const Frame& rxe_frame(const std::string& capture, std::size_t tshark_number) {
  for (const RxeFrame& f : all_rxe_frames())
    if (f.capture == capture && f.index + 1 == tshark_number) return f.bytes;
  FAIL("no frame " << tshark_number << " in " << capture);
  throw std::logic_error("unreachable");
}

}  // namespace rrdma::test

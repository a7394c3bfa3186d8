// rrdma_netdev_wire_check: checks, frame by frame, what a `--netdev` device (RoCE v2 through
// the kernel's UDP socket, issue 28) and its peers put on the wire, from a capture taken on
// the device's interface (docs/WIRE.md, "RoCE v2 through the kernel's UDP").
//
//   rrdma_netdev_wire_check FILE --ours A.B.C.D [--ours ...] [--peer A.B.C.D]... [--quiet]
//
// Every IPv4/UDP frame to or from port 4791 must
//   - be whole (no fragment) with a valid IPv4 header checksum;
//   - carry an ICRC that verifies over the full IPv4 packet (rocev2::verify_icrc, the sender's
//     view: the identification the kernel chose is in the header);
//   - verify from what a UDP socket shows its reader (rocev2::verify_icrc_hidden_id over the
//     UDP payload, addresses, ports, TOS and TTL), which must name the header's identification:
//     what our receiver accepts is exactly what was sent.
// A frame from an --ours address must also have DF set, UDP ports 4791 -> 4791, no IPv4
// options, and an IPv4 ID below 64: 0 for a datagram sent alone (an unconnected socket on
// 4791 with IP_PMTUDISC_DO), its place for one of a run sent with UDP_SEGMENT, which the
// kernel numbers upward from 0 as it segments (the ICRC checks above prove each frame was
// sealed with the ID it carries). Its UDP checksum is not judged: 0 without segmentation
// (SO_NO_CHECK), a real one with it, and a capture on the sending interface shows only the
// partial sum that checksum offload leaves. Capture where runs are already segmented (the
// tests turn the veth's tx-udp-segmentation off): a run still whole is one frame above the
// MTU, whose parts this tool does not separate. A frame from a --peer address (rdma_rxe) is taken
// with whatever ID its kernel chose; each peer must have sent at least one frame with an ID
// other than 0, so that the hidden-ID solve was exercised. With any --ours or --peer given,
// a RoCE frame from another address is bad. Every --ours and --peer must have sent a frame.
//
// Output: one line per RoCE frame (only the bad ones with --quiet), a summary per sender and
// a total. Exit status 0 when every RoCE frame passes, 1 when one does not (each named with
// its reasons) or an expected sender sent nothing, 2 on a usage or file error.
#include <cstdio>
#include <exception>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "rocev2/icrc.h"
#include "rocev2/types.h"
#include "stack/ethernet.h"
#include "stack/ipv4.h"
#include "stack/udp.h"
#include "tests/capture_file.h"

namespace {

using rrdma::stack::Ipv4Address;

// The most datagrams the netdev port sends in one UDP_SEGMENT run (EventLoop::kMaxRunSegments).
constexpr std::uint16_t kMaxRunSegments = 64;

struct Options {
  std::string path;
  std::set<Ipv4Address> ours, peers;
  bool quiet = false;
};

struct SenderSummary {
  std::size_t frames = 0;
  std::size_t id_zero = 0;
  std::set<std::uint16_t> ids;
  std::set<std::uint16_t> source_ports;
  std::size_t udp_checksum_zero = 0;
  std::size_t dont_fragment = 0;
};

// One RoCE frame's headers, as the checks read them.
struct RoceDatagram {
  rrdma::stack::Ipv4View ip;
  rrdma::stack::UdpView udp;
};

// The IPv4/UDP datagram of a frame if it is one to or from port 4791; nullopt for anything
// else (ARP, TCP, other UDP). A malformed IPv4 or UDP header counts as "anything else" only
// when it cannot be read at all.
std::optional<RoceDatagram> roce_datagram(const rrdma::test::Frame& frame) {
  const auto eth = rrdma::stack::EthernetView::check(frame);
  if (!eth || eth->ethertype() != rrdma::stack::EtherType::ipv4) return std::nullopt;
  const auto ip = rrdma::stack::Ipv4View::check(eth->payload());
  if (!ip || ip->protocol() != rrdma::stack::IpProtocol::udp) return std::nullopt;
  const auto udp = rrdma::stack::UdpView::check(ip->payload());
  if (!udp) return std::nullopt;
  if (udp->destination_port() != rrdma::rocev2::kRoceV2Port && udp->source_port() != rrdma::rocev2::kRoceV2Port)
    return std::nullopt;
  return RoceDatagram{*ip, *udp};
}

void add(std::string& reasons, std::string_view why) {
  reasons += reasons.empty() ? "" : "; ";
  reasons += why;
}

// What every RoCE v2 frame must satisfy, whoever sent it.
std::string common_problems(const RoceDatagram& d) {
  std::string reasons;
  if (d.ip.is_fragment()) add(reasons, "an IPv4 fragment");
  if (!d.ip.header_checksum_valid()) add(reasons, "bad IPv4 header checksum");
  if (d.udp.destination_port() != rrdma::rocev2::kRoceV2Port) add(reasons, "UDP destination port is not 4791");
  if (d.udp.bytes().size() != d.ip.payload().size()) add(reasons, "UDP length is not the IPv4 payload's");
  if (rrdma::rocev2::verify_icrc(d.ip.bytes()) != rrdma::rocev2::IcrcError::none)
    add(reasons, "ICRC does not verify over the IPv4 packet");
  rrdma::rocev2::HiddenHeaderFields fields;
  fields.source = d.ip.source();
  fields.destination = d.ip.destination();
  fields.source_port = d.udp.source_port();
  fields.destination_port = d.udp.destination_port();
  fields.tos = static_cast<std::uint8_t>(d.ip.dscp() << 2 | d.ip.ecn());
  fields.ttl = d.ip.ttl();
  const rrdma::rocev2::HiddenIdIcrc hidden = rrdma::rocev2::verify_icrc_hidden_id(fields, d.udp.payload());
  if (hidden.error != rrdma::rocev2::IcrcError::none) {
    add(reasons, "ICRC does not verify from the UDP payload (verify_icrc_hidden_id)");
  } else if (hidden.identification != d.ip.identification()) {
    add(reasons, "verify_icrc_hidden_id names ID " + std::to_string(hidden.identification) + ", not the header's");
  }
  return reasons;
}

// What our netdev port asks of the kernel, frame by frame.
std::string our_problems(const RoceDatagram& d) {
  std::string reasons;
  if (d.ip.identification() >= kMaxRunSegments) add(reasons, "IPv4 ID is not a place in a run (0 to 63)");
  if (!d.ip.dont_fragment()) add(reasons, "DF is not set");
  if (d.udp.source_port() != rrdma::rocev2::kRoceV2Port) add(reasons, "UDP source port is not 4791");
  if (d.ip.header_length() != rrdma::stack::Ipv4View::min_header_length) add(reasons, "IPv4 options");
  return reasons;
}

void record(SenderSummary& s, const RoceDatagram& d) {
  ++s.frames;
  s.id_zero += d.ip.identification() == 0 ? 1 : 0;
  s.ids.insert(d.ip.identification());
  s.source_ports.insert(d.udp.source_port());
  s.udp_checksum_zero += d.udp.checksum() == 0 ? 1 : 0;
  s.dont_fragment += d.ip.dont_fragment() ? 1 : 0;
}

std::string_view role(const Options& o, Ipv4Address source) {
  if (o.ours.contains(source)) return "ours";
  if (o.peers.contains(source)) return "peer";
  return "other";
}

void print_frame(std::size_t number, const RoceDatagram& d, std::string_view who, const std::string& reasons) {
  std::printf("frame %zu %s %s > %s id 0x%04x df %d udp_csum 0x%04x sport %u len %zu: %s\n", number,
              std::string(who).c_str(), d.ip.source().to_string().c_str(), d.ip.destination().to_string().c_str(),
              unsigned(d.ip.identification()), d.ip.dont_fragment() ? 1 : 0, unsigned(d.udp.checksum()),
              unsigned(d.udp.source_port()), d.udp.payload().size(), reasons.empty() ? "ok" : reasons.c_str());
}

void print_summary(Ipv4Address source, std::string_view who, const SenderSummary& s) {
  const unsigned lowest = s.ids.empty() ? 0 : *s.ids.begin(), highest = s.ids.empty() ? 0 : *s.ids.rbegin();
  std::printf("source %s (%s) frames %zu id_zero %zu distinct_ids %zu id_range 0x%04x-0x%04x df %zu udp_csum_zero %zu sports",
              source.to_string().c_str(), std::string(who).c_str(), s.frames, s.id_zero, s.ids.size(), lowest, highest,
              s.dont_fragment, s.udp_checksum_zero);
  std::size_t shown = 0;
  for (unsigned port : s.source_ports) {
    if (++shown > 8) {
      std::printf(" ...(%zu)", s.source_ports.size());
      break;
    }
    std::printf(" %u", port);
  }
  std::printf("\n");
}

bool parse_options(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if ((arg == "--ours" || arg == "--peer") && i + 1 < argc) {
      const auto address = Ipv4Address::parse(argv[++i]);
      if (!address) return false;
      (arg == "--ours" ? o.ours : o.peers).insert(*address);
    } else if (arg == "--quiet") {
      o.quiet = true;
    } else if (o.path.empty() && !arg.starts_with("-")) {
      o.path = arg;
    } else {
      return false;
    }
  }
  return !o.path.empty() && !o.ours.empty();
}

int check(const Options& o) {
  const std::vector<rrdma::test::Frame> frames = rrdma::test::read_capture(o.path);
  std::map<Ipv4Address, SenderSummary> senders;
  std::size_t roce = 0, bad = 0;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    const std::optional<RoceDatagram> d = roce_datagram(frames[i]);
    if (!d) continue;
    ++roce;
    const std::string_view who = role(o, d->ip.source());
    std::string reasons = common_problems(*d);
    if (who == "ours") add(reasons, our_problems(*d));
    if (who == "other") add(reasons, "from an address neither --ours nor --peer");
    record(senders[d->ip.source()], *d);
    bad += reasons.empty() ? 0 : 1;
    // Frame numbers count from 1, as Wireshark shows them.
    if (!o.quiet || !reasons.empty()) print_frame(i + 1, *d, who, reasons);
  }
  int status = bad == 0 ? 0 : 1;
  for (const auto& [source, summary] : senders) print_summary(source, role(o, source), summary);
  std::set<Ipv4Address> expected = o.ours;
  expected.insert(o.peers.begin(), o.peers.end());
  for (const Ipv4Address& source : expected) {
    if (!senders.contains(source)) {
      std::printf("no RoCE frame from %s\n", source.to_string().c_str());
      status = 1;
    }
  }
  for (const Ipv4Address& peer : o.peers) {
    const auto it = senders.find(peer);
    if (it != senders.end() && it->second.id_zero == it->second.frames) {
      std::printf("every frame from peer %s has IPv4 ID 0: the hidden-ID solve was not exercised\n",
                  peer.to_string().c_str());
      status = 1;
    }
  }
  std::printf("roce frames %zu: %zu good, %zu bad; %zu other frames\n", roce, roce - bad, bad, frames.size() - roce);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parse_options(argc, argv, options)) {
    std::fprintf(stderr, "usage: %s FILE --ours A.B.C.D [--ours ...] [--peer A.B.C.D]... [--quiet]\n", argv[0]);
    return 2;
  }
  try {
    return check(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    return 2;
  }
}

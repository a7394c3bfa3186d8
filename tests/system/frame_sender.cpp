// rrdma_frame_sender: sends malformed Ethernet frames of one kind, N times, from an
// interface to a MAC, through an AF_PACKET socket. The system tests use it to check that
// the vnic counts and drops hostile input and keeps answering afterwards. The gsi_* kinds
// and smi_mad are RoCE v2 frames to QP 1 and 0 (no program can make the vnic's peers send
// MADs before the CM exists): one well-formed MAD, and MADs with one thing wrong. cm_req is
// a whole CM REQ as Linux's rdma_cm makes it for rping (tests/interop: to make rxe answer
// with a REJ or a REP): RC, from source port --cm-sport to service TCP --cm-port.
//
//   rrdma_frame_sender --ifname IF --dst-mac MAC --src-ip A --dst-ip B --kind KIND
//                      [--count N] [--seed S] [--cm-port P] [--cm-sport P]
//
// Exit 0: all sent. Exit 3: the kernel refused to send this kind (e.g. a frame shorter
// than an Ethernet header). Exit 2: usage or socket errors.
#include <arpa/inet.h>
#include <getopt.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "rocev2/cm/cma.h"
#include "rocev2/cm/mad.h"
#include "rocev2/encap.h"
#include "rocev2/gsi.h"
#include "stack/bytes.h"
#include "tests/sample_mad.h"

namespace {

using Frame = std::vector<std::uint8_t>;
using Mac = std::array<std::uint8_t, 6>;

constexpr std::size_t kEthernetHeader = 14;
constexpr std::size_t kIpv4Header = 20;
constexpr std::size_t kUdpHeader = 8;
constexpr std::uint16_t kEthertypeIpv4 = 0x0800;
constexpr std::uint16_t kEthertypeArp = 0x0806;
// IEEE 802 "local experimental" ethertype: nobody implements it, so it is unknown.
constexpr std::uint16_t kEthertypeExperimental = 0x88B5;
constexpr std::uint8_t kProtocolIcmp = 1;
constexpr std::uint8_t kProtocolUdp = 17;
// RFC 3692: protocol numbers 253 and 254 are for experiments, so no stack knows them.
constexpr std::uint8_t kProtocolExperimental = 253;
constexpr std::uint16_t kSourcePort = 40000;
constexpr std::uint16_t kClosedPort = 9;  // discard: the vnic listens only on 4791

struct Options {
  std::string ifname;
  Mac dst_mac{};
  Mac src_mac{};
  std::uint32_t src_ip = 0;  // host order
  std::uint32_t dst_ip = 0;
  std::string kind;
  int count = 1;
  std::uint32_t seed = 1;
  std::uint16_t cm_port = 7174;    // cm_req: the service (TCP port space)
  std::uint16_t cm_sport = 40000;  // cm_req: the active side's port (CMA header, flow label)
};

std::optional<Mac> parse_mac(const std::string& text) {
  Mac mac{};
  unsigned v[6];
  char tail;
  if (std::sscanf(text.c_str(), "%x:%x:%x:%x:%x:%x%c", &v[0], &v[1], &v[2], &v[3], &v[4],
                  &v[5], &tail) != 6)
    return std::nullopt;
  for (int i = 0; i < 6; ++i) {
    if (v[i] > 0xff) return std::nullopt;
    mac[i] = static_cast<std::uint8_t>(v[i]);
  }
  return mac;
}

std::optional<std::uint32_t> parse_ip(const std::string& text) {
  in_addr a{};
  if (inet_pton(AF_INET, text.c_str(), &a) != 1) return std::nullopt;
  return ntohl(a.s_addr);
}

// RFC 1071 one's-complement sum, folded; `initial` carries a pseudo-header sum.
std::uint16_t internet_checksum(rrdma::ByteSpan bytes, std::uint32_t initial = 0) {
  std::uint32_t sum = initial;
  std::size_t i = 0;
  for (; i + 1 < bytes.size(); i += 2) sum += rrdma::load_be16(bytes, i);
  if (i < bytes.size()) sum += std::uint32_t{bytes[i]} << 8;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

// A checksum that is wrong for these bytes but not 0 (which means "none" in UDP, RFC 768)
// and not 0xffff (the same value as 0 in one's complement).
std::uint16_t wrong_checksum(std::uint16_t right) {
  std::uint16_t wrong = static_cast<std::uint16_t>(right ^ 0x0101);
  if (wrong == 0 || wrong == 0xffff) wrong = right == 0x1234 ? 0x4321 : 0x1234;
  return wrong;
}

class FrameBuilder {
 public:
  explicit FrameBuilder(const Options& o) : o_(o) {}

  Frame ethernet(std::uint16_t ethertype, std::size_t payload_len, const Mac& dst) const {
    Frame f(kEthernetHeader + payload_len, 0);
    std::copy(dst.begin(), dst.end(), f.begin());
    std::copy(o_.src_mac.begin(), o_.src_mac.end(), f.begin() + 6);
    rrdma::store_be16(f, 12, ethertype);
    return f;
  }

  // Ethernet + a valid IPv4 header (RFC 791 §3.1) + `payload_len` zero bytes.
  Frame ipv4(std::uint8_t protocol, std::size_t payload_len, std::uint32_t dst_ip) const {
    Frame f = ethernet(kEthertypeIpv4, kIpv4Header + payload_len, o_.dst_mac);
    rrdma::MutableByteSpan ip(f.data() + kEthernetHeader, kIpv4Header + payload_len);
    ip[0] = 0x45;
    rrdma::store_be16(ip, 2, static_cast<std::uint16_t>(kIpv4Header + payload_len));
    rrdma::store_be16(ip, 4, 0x5252);
    rrdma::store_be16(ip, 6, 0x4000);  // DF
    ip[8] = 64;
    ip[9] = protocol;
    rrdma::store_be32(ip, 12, o_.src_ip);
    rrdma::store_be32(ip, 16, dst_ip);
    refresh_ipv4_checksum(f);
    return f;
  }

  static void refresh_ipv4_checksum(Frame& f) {
    rrdma::MutableByteSpan ip(f.data() + kEthernetHeader, kIpv4Header);
    rrdma::store_be16(ip, 10, 0);
    rrdma::store_be16(ip, 10, internet_checksum(ip));
  }

  // A UDP datagram to the closed port with a correct checksum (RFC 768).
  Frame udp(std::size_t data_len) const {
    Frame f = ipv4(kProtocolUdp, kUdpHeader + data_len, o_.dst_ip);
    rrdma::MutableByteSpan udp(f.data() + kEthernetHeader + kIpv4Header, kUdpHeader + data_len);
    rrdma::store_be16(udp, 0, kSourcePort);
    rrdma::store_be16(udp, 2, kClosedPort);
    rrdma::store_be16(udp, 4, static_cast<std::uint16_t>(kUdpHeader + data_len));
    for (std::size_t i = 0; i < data_len; ++i) udp[kUdpHeader + i] = static_cast<std::uint8_t>(i);
    std::uint16_t sum = internet_checksum(udp, pseudo_header_sum(udp.size()));
    rrdma::store_be16(udp, 6, sum == 0 ? 0xffff : sum);
    return f;
  }

  // An ICMP echo request (RFC 792) with a correct checksum.
  Frame icmp_echo(std::size_t data_len) const {
    Frame f = ipv4(kProtocolIcmp, 8 + data_len, o_.dst_ip);
    rrdma::MutableByteSpan icmp(f.data() + kEthernetHeader + kIpv4Header, 8 + data_len);
    icmp[0] = 8;
    rrdma::store_be16(icmp, 4, 0x5244);
    rrdma::store_be16(icmp, 6, 1);
    rrdma::store_be16(icmp, 2, internet_checksum(icmp));
    return f;
  }

 private:
  std::uint32_t pseudo_header_sum(std::size_t udp_len) const {
    return (o_.src_ip >> 16) + (o_.src_ip & 0xffff) + (o_.dst_ip >> 16) + (o_.dst_ip & 0xffff) +
           kProtocolUdp + static_cast<std::uint32_t>(udp_len);
  }

  const Options& o_;
};

rrdma::MutableByteSpan ipv4_of(Frame& f) {
  return {f.data() + kEthernetHeader, f.size() - kEthernetHeader};
}
rrdma::MutableByteSpan l4_of(Frame& f) {
  return {f.data() + kEthernetHeader + kIpv4Header, f.size() - kEthernetHeader - kIpv4Header};
}

// A CM REQ's MAD header and counting bytes (tests/sample_mad.h), from QP 1 to `dest_qp` with
// `qkey`, through the one frame path (rocev2::build_frame): the ICRC is right, so only the
// GSI endpoint can object.
Frame mad_frame(const Options& o, rrdma::rocev2::Qpn dest_qp, rrdma::rocev2::Qkey qkey) {
  using namespace rrdma::rocev2;
  const auto mad = rrdma::test::sample_mad();
  TransportPacket packet = gsi_packet(Psn(0), mad);
  packet.bth.dest_qp = dest_qp;
  packet.deth->qkey = qkey;
  const RoceHeaders headers = roce_headers(rrdma::stack::MacAddress{o.src_mac}, rrdma::stack::MacAddress{o.dst_mac},
                                           rrdma::stack::Ipv4Address{o.src_ip}, rrdma::stack::Ipv4Address{o.dst_ip},
                                           kGsiUdpSourcePort, 0x5252);
  Frame f(frame_length(packet));
  if (build_frame(headers, packet, f) != EmitError::none) f.clear();
  return f;
}

// A CM REQ from --src-ip to --dst-ip for the TCP-space service --cm-port, with the values
// Linux 6.1's rdma_cm gives rping's (docs/RDMA_CM_RESEARCH.md §3.4): CM response timeouts
// 20, 15 CM retries, MTU 1024, permissive LIDs, GIDs ::ffff:a.b.c.d, hop limit 64, flow
// label (sport * 31 + dport) & 0xFFFFF, local ACK timeout 19, the CMA header first in the
// private data. Node GUID: the EUI-64 of the sender's MAC. A QPN nobody has (0x11): rxe
// answers a REQ before any packet goes to that QP.
Frame cm_req_frame(const Options& o) {
  using namespace rrdma::rocev2;
  const rrdma::stack::Ipv4Address src{o.src_ip}, dst{o.dst_ip};
  std::array<std::uint8_t, cm::Req::kPrivateDataLength> private_data{};
  if (cm::emit_cma_private_data(cm::cma_header_ipv4(src, o.cm_sport, dst), {}, private_data) != cm::CmaError::none)
    return {};
  auto gid = [](rrdma::stack::Ipv4Address a) {
    cm::Gid g{};
    g[10] = g[11] = 0xFF;
    rrdma::store_be32(g, 12, a.value);
    return g;
  };
  const Mac& m = o.src_mac;
  const std::uint64_t guid = std::uint64_t(m[0] ^ 0x02) << 56 | std::uint64_t(m[1]) << 48 |
                             std::uint64_t(m[2]) << 40 | std::uint64_t(0xFFFE) << 24 |
                             std::uint64_t(m[3]) << 16 | std::uint64_t(m[4]) << 8 | m[5];
  const cm::CommId comm_id{0x52520000u | (o.seed & 0xFFFF)};
  cm::Req r;
  r.local_comm_id = comm_id;
  r.service_id = cm::ip_service_id(cm::PortSpace::Tcp, o.cm_port);
  r.local_ca_guid = guid;
  r.local_qpn = Qpn{0x11};
  r.responder_resources = 1;
  r.initiator_depth = 1;
  r.remote_cm_response_timeout = 20;
  r.starting_psn = Psn{0x123456};
  r.local_cm_response_timeout = 20;
  r.retry_count = 7;
  r.path_packet_payload_mtu = cm::PathMtu::Mtu1024;
  r.rnr_retry_count = 7;
  r.max_cm_retries = 15;
  r.primary_path = cm::CmPath{.local_port_lid = 0xFFFF,
                              .remote_port_lid = 0xFFFF,
                              .local_port_gid = gid(src),
                              .remote_port_gid = gid(dst),
                              .flow_label = (std::uint32_t{o.cm_sport} * 31 + o.cm_port) & 0xFFFFF,
                              .hop_limit = 64,
                              .local_ack_timeout = 19};
  r.private_data = cm::OpaqueBytes{private_data};
  const cm::CmMessage message{.transaction_id = std::uint64_t{0x5252} << 32 | comm_id.value(), .body = r};
  std::array<std::uint8_t, kMadLength> mad{};
  if (cm::emit_cm_mad(message, mad) != cm::CmError::none) return {};
  const TransportPacket packet = gsi_packet(Psn(0), mad);
  const RoceHeaders headers = roce_headers(rrdma::stack::MacAddress{o.src_mac}, rrdma::stack::MacAddress{o.dst_mac},
                                           src, dst, kGsiUdpSourcePort, 0x5252);
  Frame f(frame_length(packet));
  if (build_frame(headers, packet, f) != EmitError::none) f.clear();
  return f;
}

using KindBuilder = std::function<Frame(const FrameBuilder&, const Options&, std::mt19937&)>;

// Each kind breaks exactly one rule, so exactly one drop counter should grow.
const std::map<std::string, KindBuilder>& kinds() {
  static const std::map<std::string, KindBuilder> table = {
      {"eth_short",  // 10 bytes: less than an Ethernet header
       [](const FrameBuilder& b, const Options& o, std::mt19937&) {
         Frame f = b.ethernet(kEthertypeIpv4, 0, o.dst_mac);
         f.resize(10);
         return f;
       }},
      {"not_for_us_mac",  // unicast to a locally administered MAC nobody owns
       [](const FrameBuilder& b, const Options&, std::mt19937&) {
         return b.ethernet(kEthertypeIpv4, 46, Mac{0x06, 0x52, 0x44, 0x00, 0xde, 0xad});
       }},
      {"multicast",  // IPv4 multicast MAC for 239.1.2.3 (RFC 1112 §6.4)
       [](const FrameBuilder& b, const Options&, std::mt19937&) {
         return b.ethernet(kEthertypeIpv4, 46, Mac{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03});
       }},
      {"unknown_ethertype",
       [](const FrameBuilder& b, const Options& o, std::mt19937&) {
         return b.ethernet(kEthertypeExperimental, 46, o.dst_mac);
       }},
      {"arp_truncated",  // 12 of the 28 bytes of an Ethernet/IPv4 ARP packet (RFC 826)
       [](const FrameBuilder& b, const Options& o, std::mt19937&) {
         Frame f = b.ethernet(kEthertypeArp, 12, o.dst_mac);
         rrdma::MutableByteSpan arp(f.data() + kEthernetHeader, 12);
         rrdma::store_be16(arp, 0, 1);
         rrdma::store_be16(arp, 2, kEthertypeIpv4);
         arp[4] = 6;
         arp[5] = 4;
         rrdma::store_be16(arp, 6, 1);
         return f;
       }},
      {"arp_claim",  // a well-formed announcement (RFC 5227 §2.3) of --src-ip, broadcast:
                     // aimed at the vnic's own address, it is an address conflict
       [](const FrameBuilder& b, const Options& o, std::mt19937&) {
         Frame f = b.ethernet(kEthertypeArp, 28, Mac{0xff, 0xff, 0xff, 0xff, 0xff, 0xff});
         rrdma::MutableByteSpan arp(f.data() + kEthernetHeader, 28);
         rrdma::store_be16(arp, 0, 1);
         rrdma::store_be16(arp, 2, kEthertypeIpv4);
         arp[4] = 6;
         arp[5] = 4;
         rrdma::store_be16(arp, 6, 1);
         std::copy(o.src_mac.begin(), o.src_mac.end(), arp.begin() + 8);
         rrdma::store_be32(arp, 14, o.src_ip);
         rrdma::store_be32(arp, 24, o.src_ip);
         return f;
       }},
      {"ipv4_truncated",  // 12 bytes after the Ethernet header: less than a minimal header
       [](const FrameBuilder& b, const Options& o, std::mt19937&) {
         Frame f = b.ipv4(kProtocolUdp, 0, o.dst_ip);
         f.resize(kEthernetHeader + 12);
         return f;
       }},
      {"ipv4_bad_version",  // version 5 in an 0x0800 frame
       [](const FrameBuilder& b, const Options&, std::mt19937&) {
         Frame f = b.udp(8);
         ipv4_of(f)[0] = 0x55;
         FrameBuilder::refresh_ipv4_checksum(f);
         return f;
       }},
      {"ipv4_bad_ihl",  // IHL 4: shorter than the fixed header (RFC 791 §3.1, minimum 5)
       [](const FrameBuilder& b, const Options&, std::mt19937&) {
         Frame f = b.udp(8);
         ipv4_of(f)[0] = 0x44;
         FrameBuilder::refresh_ipv4_checksum(f);
         return f;
       }},
      {"ipv4_bad_length",  // total length claims 1000 bytes, the frame carries 36
       [](const FrameBuilder& b, const Options&, std::mt19937&) {
         Frame f = b.udp(8);
         rrdma::store_be16(ipv4_of(f), 2, 1000);
         FrameBuilder::refresh_ipv4_checksum(f);
         return f;
       }},
      {"ipv4_bad_checksum",
       [](const FrameBuilder& b, const Options&, std::mt19937&) {
         Frame f = b.udp(8);
         auto ip = ipv4_of(f);
         rrdma::store_be16(ip, 10, wrong_checksum(rrdma::load_be16(ip, 10)));
         return f;
       }},
      {"ipv4_fragment_first",  // MF set, offset 0: the vnic does not reassemble
       [](const FrameBuilder& b, const Options&, std::mt19937&) {
         Frame f = b.udp(64);
         rrdma::store_be16(ipv4_of(f), 6, 0x2000);
         FrameBuilder::refresh_ipv4_checksum(f);
         return f;
       }},
      {"ipv4_fragment_later",  // MF clear, offset 1480 bytes (185 units of 8)
       [](const FrameBuilder& b, const Options&, std::mt19937&) {
         Frame f = b.udp(64);
         rrdma::store_be16(ipv4_of(f), 6, 185);
         FrameBuilder::refresh_ipv4_checksum(f);
         return f;
       }},
      {"ipv4_not_for_us",  // our MAC, another IPv4 address (--dst-ip names it)
       [](const FrameBuilder& b, const Options&, std::mt19937&) { return b.udp(8); }},
      {"ipv4_unknown_protocol",
       [](const FrameBuilder& b, const Options& o, std::mt19937&) {
         return b.ipv4(kProtocolExperimental, 16, o.dst_ip);
       }},
      {"icmp_truncated",  // 2 bytes of ICMP: less than the 8-byte echo header
       [](const FrameBuilder& b, const Options& o, std::mt19937&) {
         Frame f = b.ipv4(kProtocolIcmp, 2, o.dst_ip);
         l4_of(f)[0] = 8;
         return f;
       }},
      {"icmp_bad_checksum",
       [](const FrameBuilder& b, const Options&, std::mt19937&) {
         Frame f = b.icmp_echo(32);
         auto icmp = l4_of(f);
         rrdma::store_be16(icmp, 2, wrong_checksum(rrdma::load_be16(icmp, 2)));
         return f;
       }},
      {"udp_truncated",  // 4 bytes of UDP: less than its 8-byte header
       [](const FrameBuilder& b, const Options& o, std::mt19937&) {
         Frame f = b.ipv4(kProtocolUdp, 4, o.dst_ip);
         rrdma::store_be16(l4_of(f), 0, kSourcePort);
         rrdma::store_be16(l4_of(f), 2, kClosedPort);
         return f;
       }},
      {"udp_bad_length",  // UDP length 200, the IPv4 payload is 16 bytes
       [](const FrameBuilder& b, const Options&, std::mt19937&) {
         Frame f = b.udp(8);
         rrdma::store_be16(l4_of(f), 4, 200);
         return f;
       }},
      {"udp_bad_checksum",  // RFC 1122 §4.1.3.4: silently discarded, no ICMP error
       [](const FrameBuilder& b, const Options&, std::mt19937&) {
         Frame f = b.udp(16);
         auto udp = l4_of(f);
         rrdma::store_be16(udp, 6, wrong_checksum(rrdma::load_be16(udp, 6)));
         return f;
       }},
      {"garbage_ipv4",  // ethertype IPv4, then 0..99 random bytes
       [](const FrameBuilder& b, const Options& o, std::mt19937& rng) {
         Frame f = b.ethernet(kEthertypeIpv4, rng() % 100, o.dst_mac);
         for (std::size_t i = kEthernetHeader; i < f.size(); ++i) f[i] = static_cast<std::uint8_t>(rng());
         return f;
       }},
      {"gsi_mad",  // a well-formed MAD to QP 1
       [](const FrameBuilder&, const Options& o, std::mt19937&) {
         return mad_frame(o, rrdma::rocev2::kGsiQpn, rrdma::rocev2::kGsiQkey);
       }},
      {"gsi_bad_qkey",  // to QP 1 with an application's Q_Key
       [](const FrameBuilder&, const Options& o, std::mt19937&) {
         return mad_frame(o, rrdma::rocev2::kGsiQpn, rrdma::rocev2::Qkey(0x11111111));
       }},
      {"cm_req",  // a CM REQ as rdma_cm makes it, to QP 1
       [](const FrameBuilder&, const Options& o, std::mt19937&) { return cm_req_frame(o); }},
      {"smi_mad",  // to QP 0: RoCE has no subnet management interface
       [](const FrameBuilder&, const Options& o, std::mt19937&) {
         return mad_frame(o, rrdma::rocev2::kSmiQpn, rrdma::rocev2::kGsiQkey);
       }},
      {"garbage",  // our MAC, then 0..199 random bytes, ethertype included
       [](const FrameBuilder& b, const Options& o, std::mt19937& rng) {
         Frame f = b.ethernet(0, rng() % 200, o.dst_mac);
         for (std::size_t i = 12; i < f.size(); ++i) f[i] = static_cast<std::uint8_t>(rng());
         return f;
       }},
  };
  return table;
}

void usage() {
  std::fprintf(stderr,
               "usage: rrdma_frame_sender --ifname IF --dst-mac MAC --src-ip A --dst-ip B "
               "--kind KIND [--count N] [--seed S] [--cm-port P] [--cm-sport P]\nkinds:");
  for (const auto& [name, builder] : kinds()) std::fprintf(stderr, " %s", name.c_str());
  std::fprintf(stderr, "\n");
}

std::optional<Options> parse_options(int argc, char** argv) {
  static const option longopts[] = {
      {"ifname", required_argument, nullptr, 'i'}, {"dst-mac", required_argument, nullptr, 'm'},
      {"src-ip", required_argument, nullptr, 's'}, {"dst-ip", required_argument, nullptr, 'd'},
      {"kind", required_argument, nullptr, 'k'},   {"count", required_argument, nullptr, 'n'},
      {"seed", required_argument, nullptr, 'r'},   {"cm-port", required_argument, nullptr, 'p'},
      {"cm-sport", required_argument, nullptr, 'q'}, {nullptr, 0, nullptr, 0}};
  Options o;
  bool have_mac = false, have_src = false, have_dst = false;
  for (int c; (c = getopt_long(argc, argv, "", longopts, nullptr)) != -1;) {
    std::string arg = optarg ? optarg : "";
    if (c == 'i') o.ifname = arg;
    else if (c == 'k') o.kind = arg;
    else if (c == 'n') o.count = std::atoi(arg.c_str());
    else if (c == 'p' || c == 'q') {
      const unsigned long port = std::strtoul(arg.c_str(), nullptr, 0);
      if (port == 0 || port > 0xFFFF) return std::nullopt;
      (c == 'p' ? o.cm_port : o.cm_sport) = static_cast<std::uint16_t>(port);
    } else if (c == 'r') o.seed = static_cast<std::uint32_t>(std::strtoul(arg.c_str(), nullptr, 0));
    else if (c == 'm') {
      auto mac = parse_mac(arg);
      if (!mac) return std::nullopt;
      o.dst_mac = *mac;
      have_mac = true;
    } else if (c == 's' || c == 'd') {
      auto ip = parse_ip(arg);
      if (!ip) return std::nullopt;
      (c == 's' ? o.src_ip : o.dst_ip) = *ip;
      (c == 's' ? have_src : have_dst) = true;
    } else return std::nullopt;
  }
  if (o.ifname.empty() || !have_mac || !have_src || !have_dst || o.count < 1 ||
      !kinds().contains(o.kind))
    return std::nullopt;
  return o;
}

bool read_interface_mac(int fd, const std::string& ifname, Mac& mac) {
  ifreq req{};
  std::snprintf(req.ifr_name, sizeof req.ifr_name, "%s", ifname.c_str());
  if (ioctl(fd, SIOCGIFHWADDR, &req) != 0) return false;
  std::memcpy(mac.data(), req.ifr_hwaddr.sa_data, 6);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  auto options = parse_options(argc, argv);
  if (!options) {
    usage();
    return 2;
  }
  Options& o = *options;
  // Protocol 0: this socket only sends, so it never queues received frames.
  int fd = socket(AF_PACKET, SOCK_RAW, 0);
  if (fd < 0) {
    std::perror("socket(AF_PACKET)");
    return 2;
  }
  unsigned ifindex = if_nametoindex(o.ifname.c_str());
  if (ifindex == 0 || !read_interface_mac(fd, o.ifname, o.src_mac)) {
    std::fprintf(stderr, "no interface %s\n", o.ifname.c_str());
    return 2;
  }
  sockaddr_ll to{};
  to.sll_family = AF_PACKET;
  to.sll_ifindex = static_cast<int>(ifindex);
  to.sll_halen = 6;
  std::memcpy(to.sll_addr, o.dst_mac.data(), 6);

  FrameBuilder builder(o);
  std::mt19937 rng(o.seed);
  const KindBuilder& build = kinds().at(o.kind);
  for (int i = 0; i < o.count; ++i) {
    Frame f = build(builder, o, rng);
    if (sendto(fd, f.data(), f.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof to) < 0) {
      int err = errno;
      std::fprintf(stderr, "%s: frame %d of %zu bytes: %s\n", o.kind.c_str(), i, f.size(),
                   std::strerror(err));
      close(fd);
      return err == EINVAL ? 3 : 2;
    }
    // A short pause keeps the burst within the TAP's queue when the daemon is slow.
    usleep(1000);
  }
  close(fd);
  std::printf("sent %d %s frames from %s (seed %u)\n", o.count, o.kind.c_str(), o.ifname.c_str(),
              o.seed);
  return 0;
}

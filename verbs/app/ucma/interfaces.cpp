// Runs in the application process (the shim, librrdma_ucma.so).
#include "verbs/app/ucma/interfaces.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <cstdlib>
#include <cstring>

namespace rrdma::ucma_shim {
namespace {

// What ifa_data of our entries points at (the C library's AF_INET entries have none).
constexpr char kVnicMarker = 'v';

// Everything one entry owns, in one block with the others.
struct Entry {
  ifaddrs node;
  sockaddr_in address;
  sockaddr_in netmask;
  sockaddr_in broadcast;
  char name[IF_NAMESIZE];
};

bool name_character(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
         c == '-';
}

// Decimal 0..max, all of `text`.
bool parse_number(std::string_view text, unsigned max, unsigned& out) {
  if (text.empty() || text.size() > 3) return false;
  unsigned value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  if (value > max) return false;
  out = value;
  return true;
}

bool parse_ipv4(std::string_view text, std::uint32_t& out) {
  std::uint32_t value = 0;
  for (int part = 0; part < 4; ++part) {
    const auto dot = text.find('.');
    const bool last = part == 3;
    if (last == (dot != std::string_view::npos)) return false;
    unsigned byte = 0;
    if (!parse_number(text.substr(0, dot), 255, byte)) return false;
    value = value << 8 | byte;
    if (!last) text.remove_prefix(dot + 1);
  }
  out = value;
  return true;
}

bool parse_entry(std::string_view text, VnicInterface& out) {
  const auto equals = text.find('=');
  const auto slash = text.find('/');
  if (equals == std::string_view::npos || slash == std::string_view::npos || slash < equals) return false;
  const std::string_view name = text.substr(0, equals);
  if (name.empty() || name.size() >= IF_NAMESIZE) return false;
  for (char c : name)
    if (!name_character(c)) return false;
  if (!parse_ipv4(text.substr(equals + 1, slash - equals - 1), out.address)) return false;
  if (!parse_number(text.substr(slash + 1), 32, out.prefix_len) || out.prefix_len == 0) return false;
  std::memcpy(out.name, name.data(), name.size());
  out.name[name.size()] = '\0';
  return true;
}

sockaddr_in inet(std::uint32_t address) {
  sockaddr_in out{};
  out.sin_family = AF_INET;
  out.sin_addr.s_addr = htonl(address);
  return out;
}

}  // namespace

std::vector<VnicInterface> parse_interfaces(std::string_view text) {
  std::vector<VnicInterface> out;
  while (!text.empty() && out.size() < kMaxInterfaces) {
    const auto end = text.find(';');
    VnicInterface one;
    if (parse_entry(text.substr(0, end), one)) out.push_back(one);
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return out;
}

ifaddrs* make_entries(const std::vector<VnicInterface>& vnics) {
  if (vnics.empty()) return nullptr;
  // One block, freed by a single free() of its first entry, as glibc frees its own list.
  auto* entries = static_cast<Entry*>(std::calloc(vnics.size(), sizeof(Entry)));
  if (entries == nullptr) return nullptr;
  for (std::size_t i = 0; i < vnics.size(); ++i) {
    const VnicInterface& vnic = vnics[i];
    Entry& e = entries[i];
    const std::uint32_t mask = vnic.prefix_len == 32 ? 0xFFFF'FFFFu : ~(0xFFFF'FFFFu >> vnic.prefix_len);
    e.address = inet(vnic.address);
    e.netmask = inet(mask);
    e.broadcast = inet(vnic.address | ~mask);
    std::memcpy(e.name, vnic.name, sizeof e.name);
    e.node.ifa_next = i + 1 < vnics.size() ? &entries[i + 1].node : nullptr;
    e.node.ifa_name = e.name;
    e.node.ifa_flags = IFF_UP | IFF_RUNNING | IFF_BROADCAST;
    e.node.ifa_addr = reinterpret_cast<sockaddr*>(&e.address);
    e.node.ifa_netmask = reinterpret_cast<sockaddr*>(&e.netmask);
    e.node.ifa_broadaddr = reinterpret_cast<sockaddr*>(&e.broadcast);
    e.node.ifa_data = const_cast<char*>(&kVnicMarker);
  }
  return &entries[0].node;
}

bool is_vnic_entry(const ifaddrs* entry) { return entry != nullptr && entry->ifa_data == &kVnicMarker; }

}  // namespace rrdma::ucma_shim

#include "stack/ethernet.h"

#include <algorithm>
#include <cassert>

namespace rrdma::stack {
namespace {

MacAddress load_mac(ByteSpan bytes, std::size_t at) {
  MacAddress mac;
  std::copy_n(bytes.begin() + static_cast<std::ptrdiff_t>(at), mac.bytes.size(), mac.bytes.begin());
  return mac;
}

}  // namespace

std::optional<EthernetView> EthernetView::check(ByteSpan frame) {
  if (frame.size() < header_length) return std::nullopt;
  return EthernetView(frame);
}

MacAddress EthernetView::destination() const { return load_mac(bytes_, destination_at); }
MacAddress EthernetView::source() const { return load_mac(bytes_, source_at); }

EthernetHeader EthernetHeader::parse(const EthernetView& view) {
  return {view.destination(), view.source(), view.ethertype()};
}

void EthernetHeader::emit(MutableByteSpan out) const {
  assert(out.size() >= length());
  std::copy(destination.bytes.begin(), destination.bytes.end(), out.begin());
  std::copy(source.bytes.begin(), source.bytes.end(), out.begin() + 6);
  store_be16(out, 12, static_cast<std::uint16_t>(ethertype));
}

}  // namespace rrdma::stack

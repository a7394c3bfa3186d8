#include "stack/icmp.h"

#include <cassert>
#include <cstring>

#include "stack/checksum.h"

namespace rrdma::stack {

IcmpError IcmpView::validate(ByteSpan message) {
  return message.size() < header_length ? IcmpError::truncated : IcmpError::none;
}

std::optional<IcmpView> IcmpView::check(ByteSpan message) {
  if (validate(message) != IcmpError::none) return std::nullopt;
  return IcmpView(message);
}

bool IcmpView::checksum_valid() const { return internet_checksum(bytes_) == 0; }

std::optional<IcmpMessage> IcmpMessage::parse(const IcmpView& view) {
  IcmpMessage message;
  message.type = view.type();
  message.code = view.code();
  message.data = view.data();
  switch (view.type()) {
    case IcmpType::echo_request:
    case IcmpType::echo_reply:
      message.identifier = view.identifier();
      message.sequence = view.sequence();
      return message;
    case IcmpType::destination_unreachable:
      if (view.code() == static_cast<std::uint8_t>(UnreachableCode::fragmentation_needed)) {
        message.next_hop_mtu = view.next_hop_mtu();
      }
      return message;
  }
  return std::nullopt;
}

void IcmpMessage::emit(MutableByteSpan out) const {
  assert(out.size() >= length());
  out[0] = static_cast<std::uint8_t>(type);
  out[1] = code;
  store_be16(out, 2, 0);
  if (type == IcmpType::destination_unreachable) {
    store_be16(out, 4, 0);  // unused (RFC 792)
    store_be16(out, 6, next_hop_mtu);
  } else {
    store_be16(out, 4, identifier);
    store_be16(out, 6, sequence);
  }
  // memmove: the data may overlap `out` (a reply built in its request's buffer).
  if (!data.empty()) std::memmove(out.data() + IcmpView::header_length, data.data(), data.size());
  store_be16(out, 2, internet_checksum(out.first(length())));
}

}  // namespace rrdma::stack

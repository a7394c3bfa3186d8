#include "verbs/contract/ucma_protocol.h"

#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <cstring>

namespace rrdma::verbs::ucma {
namespace {

constexpr std::size_t kMagicAt = 0, kVersionAt = 4, kKindAt = 6, kRequestIdAt = 8, kCommandAt = 12,
                      kChannelAt = 16, kAuxAt = 24, kStatusAt = 32, kBodyLengthAt = 36;
// Room for one fd more than a frame may carry, so that a second one is seen and refused.
constexpr std::size_t kControlRoom = CMSG_SPACE(sizeof(int) * 2);

bool known_kind(std::uint16_t kind) {
  return kind == static_cast<std::uint16_t>(Kind::CreateChannel) || kind == static_cast<std::uint16_t>(Kind::Command);
}

}  // namespace

bool is_ucma_frame(ByteSpan bytes) { return bytes.size() >= 4 && load_be32(bytes, kMagicAt) == kMagic; }

const char* decode_error_name(DecodeError error) {
  switch (error) {
    case DecodeError::None: return "none";
    case DecodeError::Truncated: return "truncated";
    case DecodeError::BadMagic: return "bad magic";
    case DecodeError::BadVersion: return "bad version";
    case DecodeError::UnknownKind: return "unknown kind";
    case DecodeError::LengthMismatch: return "length mismatch";
    case DecodeError::TooLong: return "body too long";
    case DecodeError::WrongFdCount: return "wrong fd count";
  }
  return "?";
}

std::size_t emit(const Frame& frame, MutableByteSpan out) {
  if (frame.body.size() > kMaxUcmaBody || out.size() < kHeaderLength + frame.body.size()) return 0;
  store_be32(out, kMagicAt, kMagic);
  store_be16(out, kVersionAt, kVersion);
  store_be16(out, kKindAt, static_cast<std::uint16_t>(static_cast<std::uint16_t>(frame.kind) | (frame.reply ? kReplyBit : 0)));
  store_be32(out, kRequestIdAt, frame.request_id);
  store_be32(out, kCommandAt, frame.command);
  store_be64(out, kChannelAt, frame.channel);
  store_be64(out, kAuxAt, frame.aux_channel);
  store_be32(out, kStatusAt, frame.status);
  store_be32(out, kBodyLengthAt, static_cast<std::uint32_t>(frame.body.size()));
  if (!frame.body.empty()) std::memcpy(out.data() + kHeaderLength, frame.body.data(), frame.body.size());
  return kHeaderLength + frame.body.size();
}

DecodeError parse(ByteSpan bytes, std::size_t fd_count, Frame& out) {
  if (bytes.size() < kHeaderLength) return DecodeError::Truncated;
  if (load_be32(bytes, kMagicAt) != kMagic) return DecodeError::BadMagic;
  if (load_be16(bytes, kVersionAt) != kVersion) return DecodeError::BadVersion;
  const std::uint16_t kind = load_be16(bytes, kKindAt);
  if (!known_kind(static_cast<std::uint16_t>(kind & ~kReplyBit))) return DecodeError::UnknownKind;
  const std::uint32_t body_length = load_be32(bytes, kBodyLengthAt);
  if (body_length > kMaxUcmaBody) return DecodeError::TooLong;
  if (body_length != bytes.size() - kHeaderLength) return DecodeError::LengthMismatch;
  out.kind = static_cast<Kind>(kind & ~kReplyBit);
  out.reply = (kind & kReplyBit) != 0;
  const std::size_t fds_expected = out.kind == Kind::CreateChannel && !out.reply ? 1 : 0;
  if (fd_count != fds_expected) return DecodeError::WrongFdCount;
  out.request_id = load_be32(bytes, kRequestIdAt);
  out.command = load_be32(bytes, kCommandAt);
  out.channel = load_be64(bytes, kChannelAt);
  out.aux_channel = load_be64(bytes, kAuxAt);
  out.status = load_be32(bytes, kStatusAt);
  out.body.assign(bytes.begin() + kHeaderLength, bytes.end());
  return DecodeError::None;
}

control::IoError send_frame(int socket_fd, const Frame& frame, int fd) {
  std::array<std::uint8_t, kMaxFrameLength> bytes{};
  const std::size_t length = emit(frame, bytes);
  if (length == 0) return control::IoError::Malformed;
  iovec iov{bytes.data(), length};
  msghdr header{};
  header.msg_iov = &iov;
  header.msg_iovlen = 1;
  alignas(cmsghdr) std::array<std::uint8_t, kControlRoom> control{};
  if (fd >= 0) {
    header.msg_control = control.data();
    header.msg_controllen = CMSG_SPACE(sizeof(int));
    cmsghdr* cmsg = CMSG_FIRSTHDR(&header);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cmsg), &fd, sizeof(int));
  }
  if (::sendmsg(socket_fd, &header, MSG_NOSIGNAL) < 0) {
    return errno == EAGAIN ? control::IoError::WouldBlock : control::IoError::System;
  }
  return control::IoError::None;
}

Received receive_frame(int socket_fd) {
  Received result;
  std::array<std::uint8_t, kMaxFrameLength> bytes{};
  iovec iov{bytes.data(), bytes.size()};
  msghdr header{};
  header.msg_iov = &iov;
  header.msg_iovlen = 1;
  alignas(cmsghdr) std::array<std::uint8_t, kControlRoom> control{};
  header.msg_control = control.data();
  header.msg_controllen = control.size();
  const ssize_t received = ::recvmsg(socket_fd, &header, MSG_CMSG_CLOEXEC);
  if (received < 0) {
    result.error = errno == EAGAIN ? control::IoError::WouldBlock : control::IoError::System;
    return result;
  }
  control::ReceivedFds fds;
  control::collect_fds(header, fds);
  if (received == 0) {
    result.error = control::IoError::PeerClosed;
  } else if ((header.msg_flags & MSG_TRUNC) != 0) {
    result.error = control::IoError::Truncated;
  } else if ((header.msg_flags & MSG_CTRUNC) != 0) {
    result.error = control::IoError::FdsTruncated;
  } else {
    result.decode_error = parse(ByteSpan(bytes.data(), static_cast<std::size_t>(received)), fds.size(), result.frame);
    if (result.decode_error != DecodeError::None) result.error = control::IoError::Malformed;
  }
  if (result.error == control::IoError::None) result.fds = std::move(fds);
  return result;
}

}  // namespace rrdma::verbs::ucma

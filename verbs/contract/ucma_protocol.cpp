#include "verbs/contract/ucma_protocol.h"

#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <cstring>

namespace rrdma::verbs::ucma {
namespace {

constexpr std::size_t kMagicAt = 0, kVersionAt = 4, kKindAt = 6, kRequestIdAt = 8, kCommandAt = 12,
                      kChannelAt = 16, kAuxAt = 24, kStatusAt = 32, kBodyLengthAt = 36;

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
  out.request_id = load_be32(bytes, kRequestIdAt);
  out.command = load_be32(bytes, kCommandAt);
  out.channel = load_be64(bytes, kChannelAt);
  out.aux_channel = load_be64(bytes, kAuxAt);
  out.status = load_be32(bytes, kStatusAt);
  const std::size_t fds_expected = out.kind == Kind::CreateChannel && out.reply && out.status == 0 ? 1 : 0;
  if (fd_count != fds_expected) return DecodeError::WrongFdCount;
  out.body.assign(bytes.begin() + kHeaderLength, bytes.end());
  return DecodeError::None;
}

control::IoError send_frame(int socket_fd, const Frame& frame, int fd) {
  std::array<std::uint8_t, kMaxFrameLength> bytes{};
  const std::size_t length = emit(frame, bytes);
  if (length == 0) return control::IoError::Malformed;
  const int fds[1] = {fd};
  return control::send_bytes(socket_fd, ByteSpan(bytes.data(), length),
                             fd >= 0 ? std::span<const int>(fds) : std::span<const int>());
}

Received receive_frame(int socket_fd) {
  Received result;
  std::array<std::uint8_t, kMaxFrameLength> bytes{};
  std::size_t length = 0;
  control::ReceivedFds fds;
  result.error = control::receive_bytes(socket_fd, bytes, length, fds);
  if (result.error == control::IoError::None) {
    result.decode_error = parse(ByteSpan(bytes.data(), length), fds.size(), result.frame);
    if (result.decode_error != DecodeError::None) result.error = control::IoError::Malformed;
  }
  if (result.error == control::IoError::None) result.fds = std::move(fds);
  return result;  // on error, `fds` closes everything that arrived
}

}  // namespace rrdma::verbs::ucma

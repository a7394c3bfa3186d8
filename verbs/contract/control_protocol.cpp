#include "verbs/contract/control_protocol.h"

#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

namespace rrdma::verbs::control {
namespace {

struct TypeShapes {
  MessageType type;
  const char* name;
  MessageShape request;
  MessageShape reply;
};

using namespace field;

constexpr std::array<TypeShapes, kMessageTypeCount> kShapes{{
    {MessageType::OpenDevice, "open_device", {kOpenDeviceWords, 3}, {kOpenDeviceReplyWords, 0}},
    {MessageType::QueryDevice, "query_device", {kQueryDeviceWords, 0},
     {kQueryDeviceReplyWords, 0}},
    {MessageType::QueryPort, "query_port", {kQueryPortWords, 0}, {kQueryPortReplyWords, 0}},
    {MessageType::QueryGid, "query_gid", {kQueryGidWords, 0}, {kQueryGidReplyWords, 0}},
    {MessageType::AllocPd, "alloc_pd", {kAllocPdWords, 0}, {kHandleReplyWords, 0}},
    {MessageType::DeallocPd, "dealloc_pd", {kDestroyWords, 0}, {kStatusReplyWords, 0}},
    {MessageType::RegMr, "reg_mr", {kRegMrWords, 0}, {kRegMrReplyWords, 0}},
    {MessageType::DeregMr, "dereg_mr", {kDestroyWords, 0}, {kStatusReplyWords, 0}},
    {MessageType::CreateCq, "create_cq", {kCreateCqWords, 2}, {kHandleReplyWords, 0}},
    {MessageType::DestroyCq, "destroy_cq", {kDestroyWords, 0}, {kStatusReplyWords, 0}},
    {MessageType::CreateQp, "create_qp", {kCreateQpWords, 3}, {kCreateQpReplyWords, 0}},
    {MessageType::ModifyQp, "modify_qp", {kModifyQpWords, 0}, {kStatusReplyWords, 0}},
    {MessageType::QueryQp, "query_qp", {kQueryQpWords, 0}, {kQueryQpReplyWords, 0}},
    {MessageType::DestroyQp, "destroy_qp", {kDestroyWords, 0}, {kStatusReplyWords, 0}},
    {MessageType::CreateSrq, "create_srq", {kCreateSrqWords, 2}, {kHandleReplyWords, 0}},
    {MessageType::DestroySrq, "destroy_srq", {kDestroyWords, 0}, {kStatusReplyWords, 0}},
    {MessageType::CreateAh, "create_ah", {kCreateAhWords, 0}, {kHandleReplyWords, 0}},
    {MessageType::DestroyAh, "destroy_ah", {kDestroyWords, 0}, {kStatusReplyWords, 0}},
    {MessageType::ResizeCq, "resize_cq", {kResizeCqWords, 1}, {kStatusReplyWords, 0}},
    {MessageType::ModifySrq, "modify_srq", {kModifySrqWords, 0}, {kStatusReplyWords, 0}},
    {MessageType::QuerySrq, "query_srq", {kQuerySrqWords, 0}, {kQuerySrqReplyWords, 0}},
    {MessageType::ReregMr, "rereg_mr", {kReregMrWords, 0}, {kReregMrReplyWords, 0}},
    {MessageType::AllocMw, "alloc_mw", {kAllocMwWords, 0}, {kAllocMwReplyWords, 0}},
    {MessageType::DeallocMw, "dealloc_mw", {kDestroyWords, 0}, {kStatusReplyWords, 0}},
}};

// Types are numbered 1..kMessageTypeCount in table order.
static_assert(static_cast<std::size_t>(kShapes.back().type) == kShapes.size());
static_assert(kModifyQpWords <= kMaxBodyWords && kQueryDeviceReplyWords <= kMaxBodyWords);

const TypeShapes* entry_for(std::uint16_t base_type) {
  if (base_type == 0 || base_type > kShapes.size()) return nullptr;
  return &kShapes[base_type - 1];
}

Message make(std::uint16_t wire_type, std::uint32_t request_id) {
  Message message;
  message.wire_type = wire_type;
  message.request_id = request_id;
  message.words.assign(shape_of(wire_type)->words, 0);
  return message;
}

}  // namespace

std::optional<MessageShape> shape_of(std::uint16_t wire_type) {
  const TypeShapes* entry = entry_for(wire_type & ~kReplyBit);
  if (entry == nullptr) return std::nullopt;
  return (wire_type & kReplyBit) != 0 ? entry->reply : entry->request;
}

std::uint16_t request_type(MessageType type) { return static_cast<std::uint16_t>(type); }

std::uint16_t reply_type(MessageType type) {
  return static_cast<std::uint16_t>(static_cast<std::uint16_t>(type) | kReplyBit);
}

const char* message_name(MessageType type) {
  const TypeShapes* entry = entry_for(static_cast<std::uint16_t>(type));
  return entry == nullptr ? "unknown" : entry->name;
}

Message make_request(MessageType type, std::uint32_t request_id) {
  return make(request_type(type), request_id);
}

Message make_reply(MessageType type, std::uint32_t request_id, std::uint64_t status) {
  Message message = make(reply_type(type), request_id);
  message.words[0] = status;
  return message;
}

const char* decode_error_name(DecodeError error) {
  switch (error) {
    case DecodeError::None: return "none";
    case DecodeError::Truncated: return "truncated";
    case DecodeError::BadMagic: return "bad magic";
    case DecodeError::BadVersion: return "bad version";
    case DecodeError::UnknownType: return "unknown type";
    case DecodeError::LengthMismatch: return "length field disagrees with frame";
    case DecodeError::WrongBodyLength: return "wrong body length for type";
    case DecodeError::WrongFdCount: return "wrong fd count for type";
  }
  return "?";
}

std::optional<FrameView> FrameView::check(ByteSpan frame) {
  if (frame.size() < kHeaderLength) return std::nullopt;
  return FrameView(frame);
}

std::size_t emit(const Message& message, MutableByteSpan out) {
  store_be32(out, 0, kMagic);
  store_be16(out, 4, kVersion);
  store_be16(out, 6, message.wire_type);
  store_be32(out, 8, message.request_id);
  store_be32(out, 12, static_cast<std::uint32_t>(message.words.size() * 8));
  for (std::size_t i = 0; i < message.words.size(); ++i) {
    store_be64(out, kHeaderLength + i * 8, message.words[i]);
  }
  return message.length();
}

DecodeError parse(ByteSpan frame, std::size_t fd_count, Message& out) {
  const std::optional<FrameView> view = FrameView::check(frame);
  if (!view) return DecodeError::Truncated;
  if (view->magic() != kMagic) return DecodeError::BadMagic;
  if (view->version() != kVersion) return DecodeError::BadVersion;
  const std::optional<MessageShape> shape = shape_of(view->wire_type());
  if (!shape) return DecodeError::UnknownType;
  if (view->body_length() != view->body().size()) return DecodeError::LengthMismatch;
  if (view->body().size() != shape->words * 8) return DecodeError::WrongBodyLength;
  if (fd_count != shape->fds) return DecodeError::WrongFdCount;
  out.wire_type = view->wire_type();
  out.request_id = view->request_id();
  out.words.resize(shape->words);
  for (std::size_t i = 0; i < shape->words; ++i) out.words[i] = load_be64(view->body(), i * 8);
  return DecodeError::None;
}

bool is_admin_json(ByteSpan frame) { return !frame.empty() && frame[0] == '{'; }

ReceivedFds::ReceivedFds(ReceivedFds&& other) noexcept : fds_(std::move(other.fds_)) {
  other.fds_.clear();
}

ReceivedFds& ReceivedFds::operator=(ReceivedFds&& other) noexcept {
  if (this != &other) {
    close_all();
    fds_ = std::move(other.fds_);
    other.fds_.clear();
  }
  return *this;
}

ReceivedFds::~ReceivedFds() { close_all(); }

int ReceivedFds::release(std::size_t i) {
  const int fd = fds_[i];
  fds_[i] = -1;
  return fd;
}

void ReceivedFds::close_all() {
  for (int fd : fds_) {
    if (fd >= 0) ::close(fd);
  }
  fds_.clear();
}

const char* io_error_name(IoError error) {
  switch (error) {
    case IoError::None: return "none";
    case IoError::WouldBlock: return "would block";
    case IoError::PeerClosed: return "peer closed";
    case IoError::System: return "system error";
    case IoError::Truncated: return "message truncated";
    case IoError::FdsTruncated: return "fds truncated";
    case IoError::TooManyFds: return "too many fds";
    case IoError::Malformed: return "malformed";
  }
  return "?";
}

namespace {
// Room for one more fd than allowed, so a peer sending too many is seen (and its fds closed)
// rather than silently cut to the limit by MSG_CTRUNC alone.
constexpr std::size_t kControlRoom = CMSG_SPACE(sizeof(int) * (kMaxFdsPerMessage + 1));
}  // namespace

IoError send_bytes(int socket_fd, ByteSpan bytes, std::span<const int> fds) {
  if (fds.size() > kMaxFdsPerMessage) return IoError::TooManyFds;
  iovec iov{const_cast<std::uint8_t*>(bytes.data()), bytes.size()};
  msghdr header{};
  header.msg_iov = &iov;
  header.msg_iovlen = 1;
  alignas(cmsghdr) std::array<std::uint8_t, kControlRoom> control{};
  if (!fds.empty()) {
    header.msg_control = control.data();
    header.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* cmsg = CMSG_FIRSTHDR(&header);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
  }
  const ssize_t sent = ::sendmsg(socket_fd, &header, MSG_NOSIGNAL);
  if (sent < 0) return errno == EAGAIN ? IoError::WouldBlock : IoError::System;
  return IoError::None;
}

IoError send_message(int socket_fd, const Message& message, std::span<const int> fds) {
  if (message.words.size() > kMaxBodyWords) return IoError::Malformed;
  std::array<std::uint8_t, kMaxFrameLength> frame{};
  const std::size_t length = emit(message, frame);
  return send_bytes(socket_fd, ByteSpan(frame.data(), length), fds);
}

namespace {
// Takes every fd out of every SCM_RIGHTS header, so none can leak whatever happens next.
void collect_fds(msghdr& header, ReceivedFds& fds) {
  for (cmsghdr* cmsg = CMSG_FIRSTHDR(&header); cmsg != nullptr;
       cmsg = CMSG_NXTHDR(&header, cmsg)) {
    if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(cmsg) + i * sizeof(int), sizeof(int));
      fds.add(fd);
    }
  }
}
}  // namespace

IoError receive_bytes(int socket_fd, MutableByteSpan buffer, std::size_t& length, ReceivedFds& fds) {
  iovec iov{buffer.data(), buffer.size()};
  msghdr header{};
  header.msg_iov = &iov;
  header.msg_iovlen = 1;
  alignas(cmsghdr) std::array<std::uint8_t, kControlRoom> control{};
  header.msg_control = control.data();
  header.msg_controllen = control.size();
  const ssize_t received = ::recvmsg(socket_fd, &header, MSG_CMSG_CLOEXEC);
  if (received < 0) return errno == EAGAIN ? IoError::WouldBlock : IoError::System;
  collect_fds(header, fds);
  length = static_cast<std::size_t>(received);
  if (received == 0) return IoError::PeerClosed;
  if ((header.msg_flags & MSG_TRUNC) != 0) return IoError::Truncated;
  if ((header.msg_flags & MSG_CTRUNC) != 0) return IoError::FdsTruncated;
  if (fds.size() > kMaxFdsPerMessage) return IoError::TooManyFds;
  return IoError::None;
}

Received receive_message(int socket_fd) {
  Received result;
  std::array<std::uint8_t, kMaxFrameLength> frame{};
  std::size_t length = 0;
  ReceivedFds fds;
  result.error = receive_bytes(socket_fd, frame, length, fds);
  if (result.error == IoError::None) {
    result.decode_error = parse(ByteSpan(frame.data(), length), fds.size(), result.message);
    if (result.decode_error != DecodeError::None) result.error = IoError::Malformed;
  }
  if (result.error == IoError::None) result.fds = std::move(fds);
  return result;  // on error, `fds` closes everything that arrived
}

}  // namespace rrdma::verbs::control

// The application <-> daemon control protocol: one request or reply per SOCK_SEQPACKET
// message, with the file descriptors a resource needs (ring memfds, doorbell eventfds)
// passed alongside as SCM_RIGHTS. Only the frames and their codec live here; what the
// daemon does with a request is elsewhere. Layout and rules: docs/VERBS_CONTROL.md.
//
// A frame is a 16-byte header then a body of 64-bit big-endian words:
//   0  magic 0x89 'R' 'V' 'C'   (first byte 0x89, never '{' = 0x7B, the admin JSON)
//   4  version (16)             6  type (16)
//   8  request id (32)          12 body length in bytes (32)
// Each type has exactly one body length (words x 8) and one fd count; a frame that says
// otherwise is refused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "stack/bytes.h"

namespace rrdma::verbs::control {

inline constexpr std::uint32_t kMagic = 0x89525643;  // 0x89 'R' 'V' 'C'
// 2: open_device carries the process's memory handle (/proc/self/mem), the only way the
// daemon reaches an application's memory (docs/SECURITY.md).
// 3: reg_mr carries the region's IOVA; rereg_mr.
// 4: alloc_mw, dealloc_mw; query_device answers max_mw.
inline constexpr std::uint16_t kVersion = 4;
inline constexpr std::size_t kHeaderLength = 16;
inline constexpr std::size_t kMaxBodyWords = 32;
inline constexpr std::size_t kMaxFrameLength = kHeaderLength + kMaxBodyWords * 8;
// No message needs more than three fds (a QP: SQ ring, RQ ring, doorbell); anything beyond
// this many in one recvmsg is refused and closed.
inline constexpr std::size_t kMaxFdsPerMessage = 4;
// A reply's type is its request's type with this bit set.
inline constexpr std::uint16_t kReplyBit = 0x8000;

enum class MessageType : std::uint16_t {
  OpenDevice = 1,
  QueryDevice = 2,
  QueryPort = 3,
  QueryGid = 4,
  AllocPd = 5,
  DeallocPd = 6,
  RegMr = 7,
  DeregMr = 8,
  CreateCq = 9,
  DestroyCq = 10,
  CreateQp = 11,
  ModifyQp = 12,
  QueryQp = 13,
  DestroyQp = 14,
  CreateSrq = 15,
  DestroySrq = 16,
  CreateAh = 17,
  DestroyAh = 18,
  ResizeCq = 19,
  ModifySrq = 20,
  QuerySrq = 21,
  ReregMr = 22,
  AllocMw = 23,
  DeallocMw = 24,
};
// Types are numbered 1..kMessageTypeCount.
inline constexpr std::uint16_t kMessageTypeCount = 24;

// What a frame of one (type, direction) must carry.
struct MessageShape {
  std::size_t words = 0;
  std::size_t fds = 0;
};

// The shape of a request or reply type; nullopt for a type we do not know.
std::optional<MessageShape> shape_of(std::uint16_t wire_type);
std::uint16_t request_type(MessageType type);
std::uint16_t reply_type(MessageType type);
const char* message_name(MessageType type);

// The order of each body's words, one enum per message so the daemon and the client library
// name fields instead of counting. Every reply's word 0 is its status: 0 or a positive errno.
namespace field {
// fds: the context's async-event ring memfd (entries are AsyncEventEntry, verbs/contract/abi.h), the
// event eventfd the daemon writes after each event it pushes (the context's async_fd), and
// the process's /proc/self/mem opened by the process itself: every DMA into the client goes
// through it (verbs/device/process_dma.h), so it reaches the address space that opened it and no
// other, whatever the pid later runs (docs/SECURITY.md).
enum OpenDevice : std::size_t { kAbiVersion, kEventRingBytes, kOpenDeviceWords };
// node_guid: the EUI-64 of the vnic's MAC (as rxe derives it), in ibv_device_attr's order.
enum OpenDeviceReply : std::size_t { kStatus, kContextHandle, kNodeGuid, kOpenDeviceReplyWords };
enum QueryDevice : std::size_t { kQueryDeviceContext, kQueryDeviceWords };
// The ibv_device_attr fields an application sizes its resources from (verbs/device/device_caps.h).
enum QueryDeviceReply : std::size_t {
  kDevStatus, kMaxMrSize, kPageSizeCap, kMaxQp, kMaxQpWr, kDeviceCapFlags, kMaxSge, kMaxCq,
  kMaxCqe, kMaxMr, kMaxPd, kMaxQpRdAtom, kMaxQpInitRdAtom, kAtomicCap, kMaxSrq, kMaxSrqWr,
  kMaxSrqSge, kMaxAh, kMaxMw, kQueryDeviceReplyWords
};
enum QueryPort : std::size_t { kQueryPortContext, kPortNum, kQueryPortWords };
enum QueryPortReply : std::size_t {
  kPortStatus, kState, kMaxMtu, kActiveMtu, kGidTblLen, kPkeyTblLen, kLinkLayer,
  kQueryPortReplyWords
};
enum QueryGid : std::size_t { kQueryGidContext, kGidPort, kGidIndex, kQueryGidWords };
// The 16 GID bytes as two big-endian words, bytes 0-7 then 8-15.
enum QueryGidReply : std::size_t { kGidStatus, kGidHigh, kGidLow, kQueryGidReplyWords };
enum AllocPd : std::size_t { kAllocPdContext, kAllocPdWords };
enum HandleReply : std::size_t { kHandleStatus, kHandle, kHandleReplyWords };
enum Destroy : std::size_t { kDestroyHandle, kDestroyWords };
enum StatusReply : std::size_t { kOnlyStatus, kStatusReplyWords };
// The MR lives in the application; the daemon reaches it through the memory handle that
// open_device brought (verbs/device/process_dma.h), so no fd travels.
// iova: the address WQEs and RETHs name the region's first byte by (ibv_reg_mr_iova; the
// client sends `address` for ibv_reg_mr, 0 for IBV_ACCESS_ZERO_BASED).
enum RegMr : std::size_t { kMrPd, kMrAddress, kMrLength, kMrAccess, kMrIova, kRegMrWords };
enum RegMrReply : std::size_t { kMrStatus, kMrHandle, kMrLkey, kMrRkey, kRegMrReplyWords };
// ibv_rereg_mr: flags are enum ibv_rereg_mr_flags; pd, address + length and access count only
// when their flag is set. The reply's keys are the region's keys afterwards.
enum ReregMr : std::size_t {
  kReregMr, kReregFlags, kReregPd, kReregAddress, kReregLength, kReregAccess, kReregMrWords
};
enum ReregMrReply : std::size_t { kReregStatus, kReregLkey, kReregRkey, kReregMrReplyWords };
// ibv_alloc_mw: type is enum ibv_mw_type (1 or 2). The reply's handle names the window for
// dealloc_mw; its R_Key is the window's first (a bind changes the low byte).
enum AllocMw : std::size_t { kMwPd, kMwType, kAllocMwWords };
enum AllocMwReply : std::size_t { kMwStatus, kMwHandle, kMwRkey, kAllocMwReplyWords };
// fds: the ring memfd, the doorbell eventfd.
enum CreateCq : std::size_t { kCqContext, kCqEntries, kCqRingBytes, kCreateCqWords };
// fds: the SQ ring memfd, the RQ ring memfd (unused, -1 not allowed: see docs, with an SRQ
// the RQ ring is still passed and stays empty), the doorbell eventfd.
enum CreateQp : std::size_t {
  kQpPd, kQpType, kQpSendCq, kQpRecvCq, kQpSrq, kQpMaxSendWr, kQpMaxRecvWr, kQpMaxSendSge,
  kQpMaxRecvSge, kQpMaxInline, kQpSqRingBytes, kQpRqRingBytes, kCreateQpWords
};
enum CreateQpReply : std::size_t { kQpStatus, kQpHandle, kQpNum, kCreateQpReplyWords };
// ibv_qp_attr fields in the order qp_rules.h reads them; kModAttrMask says which are set.
enum ModifyQp : std::size_t {
  kModQp, kModAttrMask, kModState, kModCurState, kModPathMtu, kModQkey, kModRqPsn, kModSqPsn,
  kModDestQpNum, kModAccessFlags, kModPkeyIndex, kModPortNum, kModMaxRdAtomic,
  kModMaxDestRdAtomic, kModMinRnrTimer, kModTimeout, kModRetryCnt, kModRnrRetry,
  kModDgidHigh, kModDgidLow, kModSgidIndex, kModHopLimit, kModTrafficClass, kModFlowLabel,
  kModifyQpWords
};
enum QueryQp : std::size_t { kQueryQpHandle, kQueryQpMask, kQueryQpWords };
// A query reply carries the same attribute words as ModifyQp, word 0 being the status.
enum QueryQpReply : std::size_t { kQueryQpStatus, kQueryQpReplyWords = kModifyQpWords };
// fds: the SRQ ring memfd, the doorbell eventfd.
enum CreateSrq : std::size_t {
  kSrqPd, kSrqMaxWr, kSrqMaxSge, kSrqLimit, kSrqRingBytes, kCreateSrqWords
};
// fds: the new ring memfd. The daemon moves the CQEs not yet polled into the new ring, in
// order, before it replies; the client switches rings when the reply arrives.
enum ResizeCq : std::size_t { kResizeCq, kResizeEntries, kResizeRingBytes, kResizeCqWords };
// attr_mask: IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT (ibv_modify_srq(3)).
enum ModifySrq : std::size_t {
  kModSrq, kModSrqMask, kModSrqMaxWr, kModSrqLimit, kModifySrqWords
};
enum QuerySrq : std::size_t { kQuerySrqHandle, kQuerySrqWords };
enum QuerySrqReply : std::size_t {
  kQuerySrqStatus, kQuerySrqMaxWr, kQuerySrqMaxSge, kQuerySrqLimit, kQuerySrqReplyWords
};
enum CreateAh : std::size_t {
  kAhPd, kAhDgidHigh, kAhDgidLow, kAhSgidIndex, kAhHopLimit, kAhTrafficClass, kAhFlowLabel,
  kAhPortNum, kCreateAhWords
};
}  // namespace field

// The parsed value of one frame, without its fds.
struct Message {
  std::uint16_t wire_type = 0;  // request_type(t) or reply_type(t)
  std::uint32_t request_id = 0;
  std::vector<std::uint64_t> words;

  bool is_reply() const { return (wire_type & kReplyBit) != 0; }
  MessageType type() const { return static_cast<MessageType>(wire_type & ~kReplyBit); }
  std::size_t length() const { return kHeaderLength + words.size() * 8; }
};

// A message with all words zero and the right count for its shape.
Message make_request(MessageType type, std::uint32_t request_id);
Message make_reply(MessageType type, std::uint32_t request_id, std::uint64_t status);

enum class DecodeError : std::uint8_t {
  None, Truncated, BadMagic, BadVersion, UnknownType, LengthMismatch, WrongBodyLength,
  WrongFdCount
};
const char* decode_error_name(DecodeError error);

// A checked view of a frame's header: constructible only over at least kHeaderLength bytes.
class FrameView {
 public:
  static std::optional<FrameView> check(ByteSpan frame);
  std::uint32_t magic() const { return load_be32(bytes_, 0); }
  std::uint16_t version() const { return load_be16(bytes_, 4); }
  std::uint16_t wire_type() const { return load_be16(bytes_, 6); }
  std::uint32_t request_id() const { return load_be32(bytes_, 8); }
  std::uint32_t body_length() const { return load_be32(bytes_, 12); }
  ByteSpan body() const { return bytes_.subspan(kHeaderLength); }

 private:
  explicit FrameView(ByteSpan bytes) : bytes_(bytes) {}
  ByteSpan bytes_;
};

// Writes `message` into out (at least message.length() bytes); returns the bytes used.
std::size_t emit(const Message& message, MutableByteSpan out);
// Checks everything a hostile peer could lie about, including that `fd_count` fds came
// with the frame, and parses it.
DecodeError parse(ByteSpan frame, std::size_t fd_count, Message& out);
// True if a received frame is an admin JSON request (vnic/control.cpp), not ours.
bool is_admin_json(ByteSpan frame);

// Fds received with a message; closes whatever it still owns.
class ReceivedFds {
 public:
  ReceivedFds() = default;
  ReceivedFds(ReceivedFds&& other) noexcept;
  ReceivedFds& operator=(ReceivedFds&& other) noexcept;
  ReceivedFds(const ReceivedFds&) = delete;
  ReceivedFds& operator=(const ReceivedFds&) = delete;
  ~ReceivedFds();

  void add(int fd) { fds_.push_back(fd); }
  std::size_t size() const { return fds_.size(); }
  int at(std::size_t i) const { return fds_[i]; }
  // Hands fd i to the caller (who must close it); its slot becomes -1.
  int release(std::size_t i);
  void close_all();

 private:
  std::vector<int> fds_;
};

enum class IoError : std::uint8_t {
  None, WouldBlock, PeerClosed, System, Truncated, FdsTruncated, TooManyFds, Malformed
};
const char* io_error_name(IoError error);

// One SOCK_SEQPACKET message of `bytes`, with `fds` (at most kMaxFdsPerMessage) as
// SCM_RIGHTS; MSG_NOSIGNAL. errno is kept on System. The frames of this protocol and of
// ucma_protocol.h are sent with it.
IoError send_bytes(int socket_fd, ByteSpan bytes, std::span<const int> fds);
// Receives one message into `buffer` (MSG_CMSG_CLOEXEC): its length in `length`, and every fd
// that came with it in `fds`, whatever else happened (the caller's ReceivedFds closes them).
// None, or WouldBlock, System, PeerClosed, Truncated, FdsTruncated, TooManyFds.
IoError receive_bytes(int socket_fd, MutableByteSpan buffer, std::size_t& length, ReceivedFds& fds);

// Sends one frame with `fds` as SCM_RIGHTS (at most kMaxFdsPerMessage). errno is kept on
// System.
IoError send_message(int socket_fd, const Message& message, std::span<const int> fds);

struct Received {
  IoError error = IoError::None;
  DecodeError decode_error = DecodeError::None;
  Message message;
  ReceivedFds fds;  // empty unless error == None
};
// Receives one frame (MSG_CMSG_CLOEXEC) and parses it. On any error every fd that arrived
// is already closed.
Received receive_message(int socket_fd);

}  // namespace rrdma::verbs::control

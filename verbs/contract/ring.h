// Single-producer single-consumer rings in memory shared between an application and the
// daemon (the NIC): the application produces send/receive WQEs and the daemon consumes them;
// the daemon produces CQEs and the application polls them. Layout, memory ordering and the
// doorbell protocol are explained in docs/VERBS_ABI.md.
//
// The other process is not trusted: it can write anything into the region at any time. So
// each side keeps its own index privately (the copy in shared memory is only published for
// the other side), reads the other side's index once per refresh, checks it against what is
// possible, and copies each entry out before anyone validates it. The geometry (capacity,
// entry size) comes from the control path and is never re-read from shared memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

#include "stack/bytes.h"

namespace rrdma::verbs {

// Owns a mapping of a memfd (MAP_SHARED), so another process can map the same pages after
// receiving the fd over SCM_RIGHTS. Sizes are whole pages.
class SharedRegion {
 public:
  enum class AdoptError : std::uint8_t { None, NotSealed, WrongSize, MapFailed };

  SharedRegion() = default;
  SharedRegion(SharedRegion&& other) noexcept;
  SharedRegion& operator=(SharedRegion&& other) noexcept;
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;
  ~SharedRegion();

  // Creates and maps a memfd of `size` bytes rounded up to whole pages, sealed against
  // shrinking and growing: a peer that truncated it would make our loads fault (SIGBUS).
  // Throws std::system_error when the kernel refuses.
  static SharedRegion create(const char* name, std::size_t size);

  // Takes ownership of `fd` (received from another process) and maps it if it is a memfd
  // sealed against shrinking and exactly `size` bytes long (size rounded up to pages).
  // On failure the fd is closed and the returned region is empty.
  static SharedRegion adopt(int fd, std::size_t size, AdoptError& error);
  // The bytes a region of `size` maps: whole pages.
  static std::size_t mapped_size(std::size_t size);

  bool valid() const { return base_ != nullptr; }
  int fd() const { return fd_; }
  std::size_t size() const { return size_; }
  MutableByteSpan bytes() const { return {base_, size_}; }

 private:
  SharedRegion(int fd, std::uint8_t* base, std::size_t size) : fd_(fd), base_(base), size_(size) {}
  void reset();

  int fd_ = -1;
  std::uint8_t* base_ = nullptr;
  std::size_t size_ = 0;
};

// The doorbell: an eventfd the producer writes when, and only when, the consumer asked for it.
class Doorbell {
 public:
  Doorbell() = default;
  Doorbell(Doorbell&& other) noexcept;
  Doorbell& operator=(Doorbell&& other) noexcept;
  Doorbell(const Doorbell&) = delete;
  Doorbell& operator=(const Doorbell&) = delete;
  ~Doorbell();

  // A new non-blocking eventfd. Throws std::system_error when the kernel refuses.
  static Doorbell create();
  // Takes ownership of an fd from another process; empty unless it really is an eventfd
  // (checked through /proc/self/fd), so a write to it can never block or reach a file.
  static Doorbell adopt(int fd);
  // The same without making it non-blocking, for an eventfd the daemon only writes through
  // io_uring and the application reads (a CQ's notify fd, a context's event fd): its mode
  // is the application's, since ibv_get_cq_event / ibv_get_async_event block unless the
  // application itself made the fd non-blocking (docs/VERBS_DATAPATH.md).
  static Doorbell adopt_keeping_mode(int fd);

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  void ring() const;
  // Resets the counter; true if the doorbell had been rung since the last drain.
  bool drain() const;
  // Waits up to timeout_ms for a ring, then drains. True if it was rung.
  bool wait(int timeout_ms) const;

 private:
  explicit Doorbell(int fd) : fd_(fd) {}
  int fd_ = -1;
};

inline constexpr std::size_t kCacheLine = 64;
// Values of RingHeader::consumer_wants_doorbell on a completion ring (arm_notification).
inline constexpr std::uint32_t kNotifyNone = 0;
inline constexpr std::uint32_t kNotifyNext = 1;
inline constexpr std::uint32_t kNotifySolicited = 2;
inline constexpr std::uint32_t kRingMagic = 0x52524E47;  // "RRNG"
inline constexpr std::uint32_t kRingVersion = 1;
inline constexpr std::uint32_t kMaxRingCapacity = 1u << 16;
inline constexpr std::uint32_t kMaxRingEntrySize = 4096;
inline constexpr std::uint32_t kRingEntryAlign = 8;

// The shared header. Each index sits alone on its cache line so the producer's stores do not
// invalidate the line the consumer writes, and the doorbell flag (read by the producer on
// every publish, written by the consumer only before it sleeps) has a line of its own.
// Indices run freely modulo 2^32; an entry lives in slot (index & (capacity - 1)).
struct RingHeader {
  std::uint32_t magic;
  std::uint32_t version;
  std::uint32_t capacity;
  std::uint32_t entry_size;
  alignas(kCacheLine) std::uint32_t producer_index;
  alignas(kCacheLine) std::uint32_t consumer_index;
  alignas(kCacheLine) std::uint32_t consumer_wants_doorbell;
};
static_assert(std::is_standard_layout_v<RingHeader>);
static_assert(offsetof(RingHeader, magic) == 0);
static_assert(offsetof(RingHeader, version) == 4);
static_assert(offsetof(RingHeader, capacity) == 8);
static_assert(offsetof(RingHeader, entry_size) == 12);
static_assert(offsetof(RingHeader, producer_index) == 64);
static_assert(offsetof(RingHeader, consumer_index) == 128);
static_assert(offsetof(RingHeader, consumer_wants_doorbell) == 192);
static_assert(sizeof(RingHeader) == 256);

struct RingGeometry {
  std::uint32_t capacity = 0;    // entries: a power of two, 1 .. kMaxRingCapacity
  std::uint32_t entry_size = 0;  // bytes: a multiple of 8, 8 .. kMaxRingEntrySize

  bool valid() const;
  // The bytes a ring of this geometry needs: the header, then the slots.
  std::size_t region_size() const { return sizeof(RingHeader) + std::size_t{capacity} * entry_size; }
};

enum class RingError : std::uint8_t {
  None,
  BadGeometry,        // capacity not a power of two or out of range, bad entry size
  BadRegion,          // region too small or not aligned to a cache line
  HeaderMismatch,     // magic, version, capacity or entry size differ from the agreed ones
  ProducerOverrun,    // producer index more than capacity ahead of the consumer index
  ProducerRewound,    // producer index moved back below what it had published
  ConsumerOverrun,    // consumer index ahead of what the producer published
  ConsumerRewound,    // consumer index moved back
};
const char* to_string(RingError error);

// Writes a fresh header (both indices 0, no doorbell wanted) into `region`: done once, by
// whoever creates the ring, before the region is shared.
RingError format_ring(MutableByteSpan region, RingGeometry geometry);

// What both ends share: the checked view of the region. After a successful check every slot
// address is inside the region, whatever the shared words say. A ring error is sticky: the
// ring is dead, and the owner reports it (a QP or CQ goes to the error state).
class RingEnd {
 public:
  RingError error() const { return error_; }
  std::uint32_t capacity() const { return geometry_.capacity; }
  std::uint32_t entry_size() const { return geometry_.entry_size; }

 protected:
  RingEnd(MutableByteSpan region, RingGeometry geometry);
  std::uint8_t* slot(std::uint32_t index) const {
    return slots_ + std::size_t{index & (geometry_.capacity - 1)} * geometry_.entry_size;
  }
  bool fail(RingError error) {
    error_ = error;
    return false;
  }

  RingHeader* header_ = nullptr;
  std::uint8_t* slots_ = nullptr;
  RingGeometry geometry_{};
  RingError error_ = RingError::None;
};

enum class PushResult : std::uint8_t { Pushed, Full, Broken };
enum class PopResult : std::uint8_t { Popped, Empty, Broken };

class RingProducer : public RingEnd {
 public:
  // Attaches to a formatted ring of exactly `geometry`; check error() afterwards.
  RingProducer(MutableByteSpan region, RingGeometry geometry);

  // Copies `entry` (at most entry_size bytes; the rest of the slot is zeroed) into the next
  // free slot. The consumer cannot see it until publish().
  PushResult try_push(ByteSpan entry);
  template <typename T>
  PushResult try_push_value(const T& entry) {
    static_assert(std::is_trivially_copyable_v<T>);
    std::uint8_t bytes[sizeof(T)];
    std::memcpy(bytes, &entry, sizeof(T));
    return try_push(ByteSpan(bytes, sizeof(T)));
  }
  // Makes every pushed entry visible (one release store of the producer index). Returns true
  // when the consumer asked to be woken: the caller must then ring the doorbell. Only one
  // publish answers true per request.
  bool publish();
  // The completion-queue form of publish(), for a consumer that armed notification with
  // arm_notification() (ibv_req_notify_cq): true, and the arm consumed, when the consumer
  // armed for the next completion, or for solicited ones and `solicited` says that this
  // batch holds a solicited (or error) completion. The caller then signals the consumer's
  // completion channel.
  bool publish_completions(bool solicited);
  // Entries the consumer has not taken yet, including pushed but unpublished ones.
  std::uint32_t in_flight() const { return staged_ - consumer_seen_; }

 private:
  bool refresh_consumer_index();

  std::uint32_t staged_ = 0;         // next index to fill (private)
  std::uint32_t published_ = 0;      // last value stored to producer_index
  std::uint32_t consumer_seen_ = 0;  // last checked consumer index
};

class RingConsumer : public RingEnd {
 public:
  RingConsumer(MutableByteSpan region, RingGeometry geometry);

  // Copies the next entry into `out` (its first min(out.size(), entry_size) bytes), frees the
  // slot (release store of the consumer index) and returns Popped.
  PopResult try_pop(MutableByteSpan out);
  template <typename T>
  PopResult try_pop_value(T& out) {
    static_assert(std::is_trivially_copyable_v<T>);
    std::uint8_t bytes[sizeof(T)] = {};
    const PopResult result = try_pop(MutableByteSpan(bytes, sizeof(T)));
    if (result == PopResult::Popped) std::memcpy(&out, bytes, sizeof(T));
    return result;
  }
  // Published entries waiting (reads the producer index); 0 when broken.
  std::uint32_t available();
  // Takes out of the published entries those `drop` says (it sees a copy of each), the
  // others staying in order: walking from the newest to the oldest, a kept entry moves up by
  // the number dropped after it, then the consumer index passes the slots so freed. The
  // producer writes only past what it published, so nothing races. What a hardware provider
  // does to its CQ when a QP goes to RESET (mlx5_cq_clean). Returns how many were dropped.
  std::uint32_t remove_if(const std::function<bool(ByteSpan)>& drop);
  // Before sleeping on the doorbell: asks to be woken, then looks at the ring again. True if
  // it is still empty (sleep now: the producer will ring). False if entries arrived in the
  // meantime (the request is withdrawn; consume them) or the ring is broken.
  bool request_doorbell();
  // ibv_req_notify_cq: asks the producer to signal after the NEXT entry it publishes
  // (kNotifyNext), or the next solicited or error one (kNotifySolicited). Unlike
  // request_doorbell() the request stands even if entries are already waiting: verbs
  // notify only about completions added after the arm, and an application polls the CQ
  // after arming to catch the ones that raced with it.
  void arm_notification(std::uint32_t kind);
  // The arm still standing (kNotifyNone once the producer has signalled).
  std::uint32_t notification_armed() const;

 private:
  bool refresh_producer_index();

  std::uint32_t consumed_ = 0;       // next index to take (private)
  std::uint32_t producer_seen_ = 0;  // last checked producer index
};

}  // namespace rrdma::verbs

#include "verbs/contract/ring.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <new>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace rrdma::verbs {

namespace {

// The shared words are plain uint32_t in the mapping; atomic_ref gives them atomic access.
// Lock-free atomics are address-free, so two processes mapping the same page at different
// addresses still synchronise through them.
using SharedWord = std::atomic_ref<std::uint32_t>;
static_assert(SharedWord::is_always_lock_free);
static_assert(SharedWord::required_alignment <= alignof(std::uint32_t));

std::size_t round_up_to_pages(std::size_t size) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return (size + page - 1) / page * page;
}

[[noreturn]] void throw_errno(const char* what) {
  throw std::system_error(errno, std::generic_category(), what);
}

// The region holds a RingHeader made by format_ring() (here, or in the peer). Only this
// one function turns the bytes into the header object.
RingHeader* header_in(MutableByteSpan region) {
  return std::launder(reinterpret_cast<RingHeader*>(region.data()));
}

bool region_fits(MutableByteSpan region, RingGeometry geometry) {
  return region.size() >= geometry.region_size() &&
         reinterpret_cast<std::uintptr_t>(region.data()) % kCacheLine == 0;
}

}  // namespace

// ---------------------------------------------------------------------------- SharedRegion

SharedRegion::SharedRegion(SharedRegion&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      base_(std::exchange(other.base_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

SharedRegion& SharedRegion::operator=(SharedRegion&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = std::exchange(other.fd_, -1);
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

SharedRegion::~SharedRegion() { reset(); }

void SharedRegion::reset() {
  if (base_ != nullptr) munmap(base_, size_);
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  base_ = nullptr;
  size_ = 0;
}

std::size_t SharedRegion::mapped_size(std::size_t size) { return round_up_to_pages(size); }

SharedRegion SharedRegion::create(const char* name, std::size_t size) {
  const std::size_t bytes = round_up_to_pages(size);
  const int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) throw_errno("memfd_create");
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const int saved = errno;
    close(fd);
    errno = saved;
    throw_errno("memfd sizing");
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    const int saved = errno;
    close(fd);
    errno = saved;
    throw_errno("mmap");
  }
  return SharedRegion(fd, static_cast<std::uint8_t*>(base), bytes);
}

SharedRegion SharedRegion::adopt(int fd, std::size_t size, AdoptError& error) {
  const std::size_t bytes = round_up_to_pages(size);
  // Without F_SEAL_SHRINK the peer could truncate the file under our mapping, and our next
  // load would raise SIGBUS in the daemon. F_GET_SEALS fails on anything but a memfd.
  const int seals = fcntl(fd, F_GET_SEALS);
  struct stat st {};
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    error = AdoptError::NotSealed;
  } else if (fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != bytes) {
    error = AdoptError::WrongSize;
  } else if (void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
             base == MAP_FAILED) {
    error = AdoptError::MapFailed;
  } else {
    error = AdoptError::None;
    return SharedRegion(fd, static_cast<std::uint8_t*>(base), bytes);
  }
  close(fd);
  return {};
}

// -------------------------------------------------------------------------------- Doorbell

Doorbell::Doorbell(Doorbell&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

Doorbell& Doorbell::operator=(Doorbell&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

Doorbell::~Doorbell() {
  if (fd_ >= 0) close(fd_);
}

Doorbell Doorbell::create() {
  const int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) throw_errno("eventfd");
  return Doorbell(fd);
}

Doorbell Doorbell::adopt_keeping_mode(int fd) {
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  char target[64] = {};
  const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
  if (n < 0 || std::string(target, static_cast<std::size_t>(n)) != "anon_inode:[eventfd]") {
    if (fd >= 0) close(fd);
    return {};
  }
  return Doorbell(fd);
}

Doorbell Doorbell::adopt(int fd) {
  Doorbell adopted = adopt_keeping_mode(fd);
  if (!adopted.valid()) return adopted;
  fd = adopted.fd();
  // The flag lives in the file description we share with the peer, which may clear it again:
  // see docs/VERBS_ABI.md ("A hostile peer") for why the daemon rings through io_uring.
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  return adopted;
}

void Doorbell::ring() const {
  const std::uint64_t one = 1;
  // A full counter (2^64 - 2 unread rings) answers EAGAIN: the consumer is woken anyway.
  [[maybe_unused]] const ssize_t n = write(fd_, &one, sizeof(one));
}

bool Doorbell::drain() const {
  std::uint64_t count = 0;
  // Our eventfds are non-blocking; an adopted one might not be, so poll first.
  pollfd p{fd_, POLLIN, 0};
  if (poll(&p, 1, 0) != 1) return false;
  return read(fd_, &count, sizeof(count)) == static_cast<ssize_t>(sizeof(count)) && count > 0;
}

bool Doorbell::wait(int timeout_ms) const {
  pollfd p{fd_, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) != 1) return false;
  return drain();
}

// ------------------------------------------------------------------------------- the ring

bool RingGeometry::valid() const {
  const bool power_of_two = capacity != 0 && (capacity & (capacity - 1)) == 0;
  return power_of_two && capacity <= kMaxRingCapacity && entry_size >= kRingEntryAlign &&
         entry_size <= kMaxRingEntrySize && entry_size % kRingEntryAlign == 0;
}

const char* to_string(RingError error) {
  switch (error) {
    case RingError::None: return "no error";
    case RingError::BadGeometry: return "bad ring geometry";
    case RingError::BadRegion: return "ring region too small or misaligned";
    case RingError::HeaderMismatch: return "ring header does not match the agreed geometry";
    case RingError::ProducerOverrun: return "producer index more than capacity ahead of consumer";
    case RingError::ProducerRewound: return "producer index moved backwards";
    case RingError::ConsumerOverrun: return "consumer index ahead of the published entries";
    case RingError::ConsumerRewound: return "consumer index moved backwards";
  }
  return "unknown ring error";
}

RingError format_ring(MutableByteSpan region, RingGeometry geometry) {
  if (!geometry.valid()) return RingError::BadGeometry;
  if (!region_fits(region, geometry)) return RingError::BadRegion;
  new (region.data()) RingHeader{kRingMagic, kRingVersion, geometry.capacity, geometry.entry_size, 0, 0, 0};
  std::memset(region.data() + sizeof(RingHeader), 0, geometry.region_size() - sizeof(RingHeader));
  return RingError::None;
}

RingEnd::RingEnd(MutableByteSpan region, RingGeometry geometry) : geometry_(geometry) {
  if (!geometry.valid()) {
    fail(RingError::BadGeometry);
    return;
  }
  if (!region_fits(region, geometry)) {
    fail(RingError::BadRegion);
    return;
  }
  RingHeader* header = header_in(region);
  // Read once: after this the geometry is ours, whatever the peer writes there later.
  if (SharedWord(header->magic).load(std::memory_order_relaxed) != kRingMagic ||
      SharedWord(header->version).load(std::memory_order_relaxed) != kRingVersion ||
      SharedWord(header->capacity).load(std::memory_order_relaxed) != geometry.capacity ||
      SharedWord(header->entry_size).load(std::memory_order_relaxed) != geometry.entry_size) {
    fail(RingError::HeaderMismatch);
    return;
  }
  header_ = header;
  slots_ = region.data() + sizeof(RingHeader);
}

RingProducer::RingProducer(MutableByteSpan region, RingGeometry geometry) : RingEnd(region, geometry) {
  if (error_ != RingError::None) return;
  // Start where the shared words say (a ring may be re-attached); the consumer index must be
  // within a capacity behind, like at any other time.
  staged_ = published_ = SharedWord(header_->producer_index).load(std::memory_order_relaxed);
  consumer_seen_ = SharedWord(header_->consumer_index).load(std::memory_order_acquire);
  if (published_ - consumer_seen_ > geometry_.capacity) fail(RingError::ConsumerOverrun);
}

bool RingProducer::refresh_consumer_index() {
  const std::uint32_t index = SharedWord(header_->consumer_index).load(std::memory_order_acquire);
  // Legal values lie between the last one seen and the last published index (mod 2^32).
  if (index - consumer_seen_ > published_ - consumer_seen_) {
    const bool rewound = consumer_seen_ - index <= geometry_.capacity;
    return fail(rewound ? RingError::ConsumerRewound : RingError::ConsumerOverrun);
  }
  consumer_seen_ = index;
  return true;
}

PushResult RingProducer::try_push(ByteSpan entry) {
  if (error_ != RingError::None) return PushResult::Broken;
  if (entry.size() > geometry_.entry_size) throw std::length_error("ring entry larger than the slot");
  if (staged_ - consumer_seen_ >= geometry_.capacity) {
    if (!refresh_consumer_index()) return PushResult::Broken;
    if (staged_ - consumer_seen_ >= geometry_.capacity) return PushResult::Full;
  }
  std::uint8_t* to = slot(staged_);
  if (!entry.empty()) std::memcpy(to, entry.data(), entry.size());
  std::memset(to + entry.size(), 0, geometry_.entry_size - entry.size());
  ++staged_;
  return PushResult::Pushed;
}

bool RingProducer::publish() {
  if (error_ != RingError::None || staged_ == published_) return false;
  // Release: the entry stores above become visible before (with) the new index.
  SharedWord(header_->producer_index).store(staged_, std::memory_order_release);
  published_ = staged_;
  // Store-load barrier, paired with the one in request_doorbell(): either the consumer's
  // re-check sees our index, or we see its flag. See docs/VERBS_ABI.md, "Doorbell".
  std::atomic_thread_fence(std::memory_order_seq_cst);
  SharedWord wants(header_->consumer_wants_doorbell);
  return wants.load(std::memory_order_relaxed) != 0 && wants.exchange(0, std::memory_order_relaxed) != 0;
}

bool RingProducer::publish_completions(bool solicited) {
  if (error_ != RingError::None || staged_ == published_) return false;
  SharedWord(header_->producer_index).store(staged_, std::memory_order_release);
  published_ = staged_;
  // The same store-load pairing as publish(), with arm_notification() on the other side.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  SharedWord arm(header_->consumer_wants_doorbell);
  std::uint32_t kind = arm.load(std::memory_order_relaxed);
  if (kind == kNotifyNone || (kind == kNotifySolicited && !solicited)) return false;
  // Any other non-zero value a hostile consumer wrote counts as kNotifyNext.
  return arm.compare_exchange_strong(kind, kNotifyNone, std::memory_order_relaxed);
}

RingConsumer::RingConsumer(MutableByteSpan region, RingGeometry geometry) : RingEnd(region, geometry) {
  if (error_ != RingError::None) return;
  consumed_ = producer_seen_ = SharedWord(header_->consumer_index).load(std::memory_order_relaxed);
  refresh_producer_index();
}

bool RingConsumer::refresh_producer_index() {
  const std::uint32_t index = SharedWord(header_->producer_index).load(std::memory_order_acquire);
  const std::uint32_t ahead = index - consumed_;
  if (ahead > geometry_.capacity) return fail(RingError::ProducerOverrun);
  if (ahead < producer_seen_ - consumed_) return fail(RingError::ProducerRewound);
  producer_seen_ = index;
  return true;
}

std::uint32_t RingConsumer::available() {
  if (error_ != RingError::None || !refresh_producer_index()) return 0;
  return producer_seen_ - consumed_;
}

std::uint32_t RingConsumer::remove_if(const std::function<bool(ByteSpan)>& drop) {
  if (error_ != RingError::None || !refresh_producer_index()) return 0;
  std::vector<std::uint8_t> entry(geometry_.entry_size);
  std::uint32_t dropped = 0;
  for (std::uint32_t index = producer_seen_; index != consumed_;) {
    --index;
    std::memcpy(entry.data(), slot(index), entry.size());  // decide on a copy (try_pop)
    if (drop(ByteSpan(entry.data(), entry.size()))) {
      ++dropped;
    } else if (dropped != 0) {
      std::memcpy(slot(index + dropped), entry.data(), entry.size());
    }
  }
  if (dropped == 0) return 0;
  consumed_ += dropped;
  // Release: the moved entries are in place before the producer may reuse the freed slots.
  SharedWord(header_->consumer_index).store(consumed_, std::memory_order_release);
  return dropped;
}

PopResult RingConsumer::try_pop(MutableByteSpan out) {
  if (error_ != RingError::None) return PopResult::Broken;
  if (consumed_ == producer_seen_) {
    if (!refresh_producer_index()) return PopResult::Broken;
    if (consumed_ == producer_seen_) return PopResult::Empty;
  }
  // Copy out before anyone looks at the bytes: the peer may rewrite the slot at any time,
  // and a value checked in shared memory could change before it is used.
  const std::size_t n = out.size() < geometry_.entry_size ? out.size() : geometry_.entry_size;
  std::memcpy(out.data(), slot(consumed_), n);
  ++consumed_;
  // Release: our reads of the slot happen before the producer may reuse it.
  SharedWord(header_->consumer_index).store(consumed_, std::memory_order_release);
  return PopResult::Popped;
}

bool RingConsumer::request_doorbell() {
  if (error_ != RingError::None) return false;
  SharedWord wants(header_->consumer_wants_doorbell);
  wants.store(1, std::memory_order_relaxed);
  // Store-load barrier, paired with the one in publish(): see docs/VERBS_ABI.md, "Doorbell".
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!refresh_producer_index()) return false;
  if (producer_seen_ != consumed_) {
    wants.store(0, std::memory_order_relaxed);
    return false;
  }
  return true;
}

void RingConsumer::arm_notification(std::uint32_t kind) {
  if (error_ != RingError::None) return;
  SharedWord(header_->consumer_wants_doorbell).store(kind, std::memory_order_relaxed);
  // Paired with the fence in publish_completions(): either the producer sees the arm, or the
  // poll that follows the arm sees the producer's entries.
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

std::uint32_t RingConsumer::notification_armed() const {
  return SharedWord(header_->consumer_wants_doorbell).load(std::memory_order_acquire);
}

}  // namespace rrdma::verbs
